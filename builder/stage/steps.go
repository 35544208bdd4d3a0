package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/procgroup"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/builder/wheel"
	"github.com/epbuild/epbuild/recipes"
)

// BuildError is a failed build step: the tail of its log and where the whole log is
// (kept under the cache until `epbuild cache gc` removes it).
type BuildError struct {
	Component string
	Step      string
	Log       string
	Tail      string
	Err       error
	// Stopped: the run was interrupted (Err is why), the step did not fail by itself.
	Stopped bool
	// Kept is the failed build's directory, kept for reading (--keep-failed); "": removed.
	Kept string
}

func (e *BuildError) Error() string {
	if e.Stopped {
		return fmt.Sprintf("build %s: step %s stopped: %v; its log so far: %s", e.Component, e.Step, e.Err, e.Log)
	}
	kept := ""
	if e.Kept != "" {
		kept = "\nthe build directory is kept: " + e.Kept
	}
	return fmt.Sprintf("build %s: step %s failed: %v\n--- last lines of %s ---\n%s%s", e.Component, e.Step, e.Err, e.Log, e.Tail, kept)
}

// ExitCode: the job failed, or what stopped it says (an interrupt: 130).
func (e *BuildError) ExitCode() int {
	var ec interface{ ExitCode() int }
	if e.Stopped && errors.As(e.Err, &ec) {
		return ec.ExitCode()
	}
	return 1
}
func (e *BuildError) Unwrap() error { return e.Err }

// StepLog is where the step's whole log is (the store reads it to tell a full disk).
func (e *BuildError) StepLog() string { return e.Log }

// Watcher shows a build step while one of its commands runs (builder/progress.Display
// on the command line): since is when the step's first command started; done is called
// when the command ends.
type Watcher interface {
	Step(name, logPath string, since time.Time) (done func())
}

// stepEnv is what a build step runs with.
type stepEnv struct {
	component string
	src       string // the tree being built (a private copy)
	work      string // the source directory src lies in (the same path under every root)
	out       string // the build directory: out-of-tree builds and scratch space (work itself, or under EPBUILD_BUILD_ROOT)
	prefix    string // the final staged prefix path (files are staged under destdir)
	destdir   string // where installs land before publishing: destdir + prefix
	logs      string
	env       []string
	jobs      int
	ninja     bool
	python    string
	watch     Watcher              // nil: nothing shows the steps
	started   map[string]time.Time // when each step's first command started
	// mapFlag maps the source and build directories away in what host compilers write (repro.go); the
	// environment's CFLAGS/CXXFLAGS carry it, and cmake's flags where the recipe sets them.
	mapFlag string
}

// run runs one command of a step with its output appended to the step's log file, in a
// process group of its own, so that an interrupt stops it and everything it started
// (cmake → ninja → nvcc), and nothing it started outlives epbuild (builder/procgroup).
func (s *stepEnv) run(ctx context.Context, step, dir string, env []string, name string, args ...string) error {
	logPath := filepath.Join(s.logs, step+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("build %s: open log: %w", s.component, err)
	}
	defer f.Close()
	fmt.Fprintf(f, "$ %s %s\n", name, strings.Join(args, " "))
	if ctx.Err() != nil {
		return &BuildError{Component: s.component, Step: step, Log: logPath, Err: context.Cause(ctx), Stopped: true}
	}
	if s.watch != nil {
		if s.started == nil {
			s.started = map[string]time.Time{}
		}
		if _, ok := s.started[step]; !ok {
			s.started[step] = time.Now()
		}
		done := s.watch.Step("build "+s.component+" "+step, logPath, s.started[step])
		defer done()
	}
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, f, f
	err = procgroup.Run(ctx, cmd)
	if err == nil {
		return nil
	}
	_ = f.Sync()
	if ctx.Err() != nil {
		return &BuildError{Component: s.component, Step: step, Log: logPath, Err: context.Cause(ctx), Stopped: true}
	}
	var ee *exec.Error
	if errors.As(err, &ee) {
		err = fmt.Errorf("%s not found on PATH: %w", name, err)
	}
	return &BuildError{Component: s.component, Step: step, Log: logPath, Tail: tailFile(logPath, 40), Err: err}
}

// tailFile is the end of a build log, preceded by the first lines that name an error:
// compilers report the cause early and a wrapper's traceback fills the tail.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	start := 0
	if len(lines) > n {
		start = len(lines) - n
	}
	var first []string
	for _, l := range lines[:start] {
		if errorLineRe.MatchString(l) && len(first) < 12 {
			first = append(first, l)
		}
	}
	out := strings.Join(lines[start:], "\n")
	if len(first) > 0 {
		out = "first errors:\n" + strings.Join(first, "\n") + "\n...\n" + out
	}
	return out
}

var errorLineRe = regexp.MustCompile(`(?i)(\berror\b|undefined reference|fatal)`)

// cmake configures, builds and installs into destdir+prefix. cmake runs without a
// shell; each option is one -DKEY=VALUE argument (see cmakeValue).
func (s *stepEnv) cmake(ctx context.Context, i int, st *recipes.CMakeStep, vars map[string]string) error {
	opts, err := envsh.ExpandMap(st.Options, vars)
	if err != nil {
		return fmt.Errorf("build %s: cmake options: %w", s.component, err)
	}
	senv, err := envsh.ExpandMap(st.Env, vars)
	if err != nil {
		return fmt.Errorf("build %s: cmake env: %w", s.component, err)
	}
	env := envsh.WithEnv(s.env, senv)
	srcDir, err := stepDir(s.src, st.Dir)
	if err != nil {
		return fmt.Errorf("build %s: cmake dir: %w", s.component, err)
	}
	bdir := filepath.Join(s.out, fmt.Sprintf("cmake-build-%d", i))
	args := []string{"-S", srcDir, "-B", bdir, "-DCMAKE_INSTALL_PREFIX=" + s.prefix, "-DCMAKE_BUILD_TYPE=Release"}
	if s.mapFlag != "" {
		// a recipe's CMAKE_C(XX)_FLAGS take the place of CFLAGS/CXXFLAGS: add the map there
		for _, k := range []string{"CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS"} {
			if v, ok := opts[k]; ok {
				opts[k] = strings.TrimSpace(v + " " + s.mapFlag)
			}
		}
	}
	if s.ninja {
		args = append(args, "-G", "Ninja")
	}
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		v, err := cmakeValue(k, opts[k], s.ninja)
		if err != nil {
			var pe *toolchain.PreflightError
			if errors.As(err, &pe) {
				pe.Recipe = s.component
				return pe
			}
			return fmt.Errorf("build %s: %w", s.component, err)
		}
		args = append(args, "-D"+k+"="+v)
	}
	step := fmt.Sprintf("%02d-cmake", i)
	if err := s.run(ctx, step, s.src, env, "cmake", args...); err != nil {
		return err
	}
	if err := s.run(ctx, step, s.src, env, "cmake", "--build", bdir, "--parallel", strconv.Itoa(s.jobs)); err != nil {
		return err
	}
	// DESTDIR keeps the final prefix path in installed files while the files themselves
	// land in the stage's temporary directory.
	return s.run(ctx, step, s.src, envsh.WithEnv(env, map[string]string{"DESTDIR": s.destdir}), "cmake", "--install", bdir)
}

// flagPlain are the characters that mean themselves to sh, make and Ninja alike: a
// flag made of them alone needs no quoting.
const flagPlain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,+-=@%"

// cmakeValue is the VALUE of -DKEY=VALUE that makes cmake hold exactly the recipe's
// value. cmake runs without a shell, so any value reaches it as one argument, but two
// kinds need care:
//
//   - CMAKE_*FLAGS values, which CMake pastes into compile and link lines as they are;
//     Ninja and make run those through /bin/sh. The value is read as a list of flags
//     (recipes.SplitFlags: shell-like words, no expansion), and each flag is written
//     back single-quoted where it holds more than plain characters, with $ doubled for
//     Ninja's and make's own expansion: every flag reaches the compiler as one literal
//     argument and nothing is run. make and CMake's link scripts read $, \ and ' in
//     different ways, so such a flag needs the Ninja generator.
//   - values that begin and end with ' or end in a blank: cmake's -D parser strips
//     one pair of single quotes and trailing blanks, so they are wrapped in one more pair.
func cmakeValue(key, val string, ninja bool) (string, error) {
	if strings.ContainsFunc(val, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		return "", fmt.Errorf("cmake option %s: a control character (newline) cannot be passed on a command line", key)
	}
	if recipes.IsFlagsOption(key) {
		words, err := recipes.SplitFlags(val)
		if err != nil {
			return "", fmt.Errorf("cmake option %s: %w", key, err)
		}
		parts := make([]string, len(words))
		for i, w := range words {
			if !ninja && strings.ContainsAny(w, `$\'`) {
				return "", &toolchain.PreflightError{Missing: []toolchain.Missing{{What: "ninja",
					Need:  fmt.Sprintf("the Ninja generator, to pass the %s flag %q literally (make and CMake's link scripts read $, \\ and ' in different ways)", key, w),
					Found: "none on PATH", Fix: "install ninja (Debian: ninja-build), or drop those characters from the flag"}}}
			}
			if w == "" || strings.Trim(w, flagPlain) != "" {
				w = quote.ShellAlways(w)
			}
			parts[i] = strings.ReplaceAll(w, "$", "$$")
		}
		val = strings.Join(parts, " ")
	}
	if len(val) >= 2 && val[0] == '\'' && val[len(val)-1] == '\'' || strings.HasSuffix(val, " ") || strings.HasSuffix(val, "\t") {
		val = "'" + val + "'"
	}
	return val, nil
}

// stepDir resolves a step's dir inside the tree root: a path that leaves it, lexically
// or through a symlink, is refused (validate refuses the first kind already).
func stepDir(root, dir string) (string, error) {
	if dir == "" {
		return root, nil
	}
	if !filepath.IsLocal(filepath.FromSlash(dir)) {
		return "", fmt.Errorf("%q is not a directory inside the source tree", dir)
	}
	p := filepath.Join(root, filepath.FromSlash(dir))
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("%q: %w", dir, err)
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", err
	}
	if rel, err := filepath.Rel(realRoot, real); err != nil || !filepath.IsLocal(rel) && rel != "." {
		return "", fmt.Errorf("%q leads outside the source tree (to %s) through a symlink", dir, real)
	}
	return p, nil
}

// pythonExtension builds a setup.py package (DeepEP) and installs its build output into
// prefix/python with a NAME-VERSION.dist-info made from `setup.py egg_info` (so pip and
// importlib.metadata see the package); the package stage packs that tree into a wheel
// when the step asks for one. setup.py runs once, without a shell; the step's env
// reaches it as it is. Nothing here needs the wheel or build modules.
func (s *stepEnv) pythonExtension(ctx context.Context, i int, st *recipes.PythonExtensionStep, vars map[string]string) error {
	senv, err := envsh.ExpandMap(st.Env, vars)
	if err != nil {
		return fmt.Errorf("build %s: python-extension env: %w", s.component, err)
	}
	if _, ok := senv["MAX_JOBS"]; !ok {
		senv["MAX_JOBS"] = strconv.Itoa(s.jobs)
	}
	if err := s.keepPythonCFLAGS(ctx, senv); err != nil {
		return fmt.Errorf("build %s: %w", s.component, err)
	}
	env := envsh.WithEnv(s.env, senv)
	step := fmt.Sprintf("%02d-python-extension", i)
	blib := filepath.Join(s.out, "pybuild-lib")
	btmp := filepath.Join(s.out, "pybuild-tmp")
	egg := filepath.Join(s.out, "pybuild-egg")
	if err := os.MkdirAll(egg, 0o755); err != nil {
		return fmt.Errorf("build %s: %w", s.component, err)
	}
	// the interpreter's wheel tags do not depend on the build: asked while it runs, and
	// waited for on every return, so that the question never outlives the step
	askTags := later(func() (wheel.Tags, error) { return s.pythonTags(ctx, env) })
	defer askTags()
	if err := s.run(ctx, step, s.src, env, s.python, "setup.py", "egg_info", "--egg-base", egg, "build", "--build-lib", blib, "--build-temp", btmp); err != nil {
		return err
	}
	dst := filepath.Join(s.destdir+s.prefix, "python")
	if err := copyTree(blib, dst); err != nil {
		return fmt.Errorf("build %s: install python package: %w", s.component, err)
	}
	tags, err := askTags()
	if err != nil {
		return fmt.Errorf("build %s: %w", s.component, err)
	}
	w, err := wheel.WriteDistInfo(dst, egg, s.src, tags)
	if err != nil {
		return fmt.Errorf("build %s: package metadata: %w", s.component, err)
	}
	s.logf(step, "wrote python/%s (%s %s, tag %s)", w.Dir, w.Name, w.Version, w.Tag)
	return nil
}

// keepPythonCFLAGS keeps the interpreter's own compiler flags when the measures put the
// prefix map in CFLAGS/CXXFLAGS and the user set neither: setuptools 72 and later take an
// environment's CFLAGS in place of sysconfig's ("-DNDEBUG -g -O2 -Wall"), not after them,
// so the map alone would build without -g and without -DNDEBUG (measured on the GPU
// machine: DeepEP's extension lost its 11 MiB of debug sections). Older setuptools append
// the environment's flags, and then sysconfig's come twice, which changes nothing.
func (s *stepEnv) keepPythonCFLAGS(ctx context.Context, senv map[string]string) error {
	if s.mapFlag == "" {
		return nil
	}
	var todo []string
	for _, k := range []string{"CFLAGS", "CXXFLAGS"} {
		if _, set := senv[k]; !set && toolchain.GetenvFrom(s.env, k) == s.mapFlag {
			todo = append(todo, k)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	out, err := s.askPython(ctx, s.env, "its CFLAGS", `import sysconfig; print(sysconfig.get_config_var("CFLAGS") or "")`)
	if err != nil {
		return err
	}
	sys := strings.Join(strings.Fields(out), " ")
	for _, k := range todo {
		senv[k] = strings.TrimSpace(sys + " " + s.mapFlag)
	}
	return nil
}

// later runs f on a goroutine of its own; the function it returns waits for f and gives
// its result, as often as it is called.
func later[T any](f func() (T, error)) func() (T, error) {
	done := make(chan struct{})
	var v T
	var err error
	go func() {
		defer close(done)
		v, err = f()
	}()
	return func() (T, error) {
		<-done
		return v, err
	}
}

// pythonTags asks the build's interpreter for its wheel tags.
func (s *stepEnv) pythonTags(ctx context.Context, env []string) (wheel.Tags, error) {
	var t wheel.Tags
	out, err := s.askPython(ctx, env, "its wheel tags", wheel.TagScript)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal([]byte(out), &t); err != nil {
		return t, fmt.Errorf("ask %s for its wheel tags: %w (it printed %q)", s.python, err, out)
	}
	return t, nil
}

// askPython runs a short program in the build's interpreter and returns what it printed.
func (s *stepEnv) askPython(ctx context.Context, env []string, what, program string) (string, error) {
	cmd := exec.CommandContext(ctx, s.python, "-c", program)
	cmd.Env = env
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ask %s for %s: %w: %s", s.python, what, err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// logf adds a line of epbuild's own to a step's log.
func (s *stepEnv) logf(step, format string, args ...any) {
	f, err := os.OpenFile(filepath.Join(s.logs, step+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "epbuild: "+format+"\n", args...)
}

// command runs a plain command in the tree, with PREFIX (final path), DESTDIR and SRC set:
// the program itself, not a shell, so each argument arrives as written.
func (s *stepEnv) command(ctx context.Context, i int, st *recipes.CommandStep, vars map[string]string) error {
	senv, err := envsh.ExpandMap(st.Env, vars)
	if err != nil {
		return fmt.Errorf("build %s: command env: %w", s.component, err)
	}
	args := make([]string, len(st.Run))
	for j, a := range st.Run {
		if args[j], err = envsh.Expand(a, vars); err != nil {
			return fmt.Errorf("build %s: command: %w", s.component, err)
		}
	}
	senv["PREFIX"], senv["DESTDIR"], senv["SRC"] = s.prefix, s.destdir, s.src
	dir, err := stepDir(s.src, st.Dir)
	if err != nil {
		return fmt.Errorf("build %s: command dir: %w", s.component, err)
	}
	return s.run(ctx, fmt.Sprintf("%02d-command", i), dir, envsh.WithEnv(s.env, senv), args[0], args[1:]...)
}

// copyTests copies the component's declared test files from its patched tree into
// tests/ of the staged prefix, flat (validation keeps their base names apart), so that
// the artifact and its manifest carry them like every other file.
func (s *stepEnv) copyTests(t *recipes.Tests) error {
	if t == nil {
		return nil
	}
	dst := filepath.Join(s.destdir+s.prefix, manifest.TestsDir)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("build %s: copy its tests: %w", s.component, err)
	}
	buf := make([]byte, 1<<20)
	for _, f := range t.Files {
		src := filepath.Join(s.src, filepath.FromSlash(f))
		st, err := os.Lstat(src)
		if err == nil && !st.Mode().IsRegular() {
			err = fmt.Errorf("a %s, not a regular file", st.Mode().Type())
		}
		if err != nil {
			return fmt.Errorf("build %s: test file %s of its tree: %w (tests.files names the files of the pinned tree: check the path at this commit)", s.component, quote.Term(f), err)
		}
		perm := fs.FileMode(0o644)
		if st.Mode().Perm()&0o111 != 0 {
			perm = 0o755
		}
		if err := copyFile(src, filepath.Join(dst, filepath.Base(src)), perm, buf); err != nil {
			return fmt.Errorf("build %s: copy test file %s: %w", s.component, quote.Term(f), err)
		}
	}
	return nil
}

// copyTree copies a directory tree: regular files (0755 or 0644), directories and
// symlinks (verbatim). Used for build copies of patched trees and build outputs.
func copyTree(src, dst string) error {
	buf := make([]byte, 1<<20)
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		t := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(t, info.Mode().Perm()|0o700)
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, t)
		case info.Mode().IsRegular():
			// only the exec bit is kept (as an artifact keeps it): a checkout made under
			// another umask gives the build the same modes
			perm := fs.FileMode(0o644)
			if info.Mode().Perm()&0o111 != 0 {
				perm = 0o755
			}
			return copyFile(p, t, perm, buf)
		}
		return nil
	})
}

func copyFile(src, dst string, perm fs.FileMode, buf []byte) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(out, in, buf); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
