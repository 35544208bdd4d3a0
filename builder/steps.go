package builder

import (
	"context"
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
	"sort"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/recipes"
)

// BuildError is a failed build step: the tail of its log and where the whole log is.
type BuildError struct {
	Component string
	Step      string
	Log       string
	Tail      string
	Err       error
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("build %s: step %s failed: %v\n--- last lines of %s ---\n%s", e.Component, e.Step, e.Err, e.Log, e.Tail)
}

// ExitCode: the job failed.
func (e *BuildError) ExitCode() int { return 1 }
func (e *BuildError) Unwrap() error { return e.Err }

// stepEnv is what a build step runs with.
type stepEnv struct {
	component string
	src       string // the tree being built (a private copy)
	work      string // scratch space for out-of-tree builds
	prefix    string // the final staged prefix path (files are staged under destdir)
	destdir   string // where installs land before publishing: destdir + prefix
	logs      string
	env       []string
	jobs      int
	ninja     bool
	python    string
	// mapFlag maps the build directory away in what host compilers write (repro.go); the
	// environment's CFLAGS/CXXFLAGS carry it, and cmake's flags where the recipe sets them.
	mapFlag string
}

var templRe = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// expand replaces {{...}} references from vars; an unknown one is an error (validation
// catches them earlier, so this is a bug guard).
func expand(s string, vars map[string]string) (string, error) {
	var bad string
	out := templRe.ReplaceAllStringFunc(s, func(m string) string {
		k := templRe.FindStringSubmatch(m)[1]
		v, ok := vars[k]
		if !ok {
			bad = k
		}
		return v
	})
	if bad != "" {
		return "", fmt.Errorf("template {{%s}} has no value here", bad)
	}
	return out, nil
}

func expandMap(m map[string]string, vars map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(m))
	for k, v := range m {
		e, err := expand(v, vars)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = e
	}
	return out, nil
}

// withEnv returns base with the pairs of m set (replacing existing names).
func withEnv(base []string, m map[string]string) []string {
	if len(m) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(m))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := m[k]; !over {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// runStep runs one command with its output appended to the step's log file.
func (s *stepEnv) run(ctx context.Context, step, dir string, env []string, name string, args ...string) error {
	logPath := filepath.Join(s.logs, step+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("build %s: open log: %w", s.component, err)
	}
	defer f.Close()
	fmt.Fprintf(f, "$ %s %s\n", name, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, f, f
	if err := cmd.Run(); err != nil {
		_ = f.Sync()
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = fmt.Errorf("%s not found on PATH: %w", name, err)
		}
		return &BuildError{Component: s.component, Step: step, Log: logPath, Tail: tailFile(logPath, 40), Err: err}
	}
	return nil
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
	opts, err := expandMap(st.Options, vars)
	if err != nil {
		return fmt.Errorf("build %s: cmake options: %w", s.component, err)
	}
	senv, err := expandMap(st.Env, vars)
	if err != nil {
		return fmt.Errorf("build %s: cmake env: %w", s.component, err)
	}
	env := withEnv(s.env, senv)
	srcDir, err := stepDir(s.src, st.Dir)
	if err != nil {
		return fmt.Errorf("build %s: cmake dir: %w", s.component, err)
	}
	bdir := filepath.Join(s.work, fmt.Sprintf("cmake-build-%d", i))
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
			var pe *PreflightError
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
	return s.run(ctx, step, s.src, withEnv(env, map[string]string{"DESTDIR": s.destdir}), "cmake", "--install", bdir)
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
				return "", &PreflightError{Missing: []Missing{{What: "ninja",
					Need:  fmt.Sprintf("the Ninja generator, to pass the %s flag %q literally (make and CMake's link scripts read $, \\ and ' in different ways)", key, w),
					Found: "none on PATH", Fix: "install ninja (Debian: ninja-build), or drop those characters from the flag"}}}
			}
			if w == "" || strings.Trim(w, flagPlain) != "" {
				w = shellQuote(w)
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

// globInside is what a check's file pattern matches in prefix, sorted: nothing for a
// pattern that leaves it, and no match that resolves outside it through a symlink
// (validate refuses the first kind already; a plan read from an installed manifest is
// checked again here).
func globInside(prefix, pattern string) []string {
	if !filepath.IsLocal(filepath.FromSlash(pattern)) {
		return nil
	}
	m, _ := filepath.Glob(filepath.Join(prefix, filepath.FromSlash(pattern)))
	root, err := filepath.EvalSymlinks(prefix)
	if err != nil {
		return nil
	}
	out := m[:0]
	for _, p := range m {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(root, real); err == nil && filepath.IsLocal(rel) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
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
// prefix/python; with wheel set, it also keeps a wheel under prefix/wheels. Python runs
// without a shell; the step's env reaches setup.py as it is.
func (s *stepEnv) pythonExtension(ctx context.Context, i int, st *recipes.PythonExtensionStep, vars map[string]string) error {
	senv, err := expandMap(st.Env, vars)
	if err != nil {
		return fmt.Errorf("build %s: python-extension env: %w", s.component, err)
	}
	if _, ok := senv["MAX_JOBS"]; !ok {
		senv["MAX_JOBS"] = strconv.Itoa(s.jobs)
	}
	env := withEnv(s.env, senv)
	step := fmt.Sprintf("%02d-python-extension", i)
	blib := filepath.Join(s.work, "pybuild-lib")
	btmp := filepath.Join(s.work, "pybuild-tmp")
	if err := s.run(ctx, step, s.src, env, s.python, "setup.py", "build", "--build-lib", blib, "--build-temp", btmp); err != nil {
		return err
	}
	dst := filepath.Join(s.destdir+s.prefix, "python")
	if err := copyTree(blib, dst); err != nil {
		return fmt.Errorf("build %s: install python package: %w", s.component, err)
	}
	if st.Wheel {
		wd := filepath.Join(s.destdir+s.prefix, "wheels")
		if err := s.run(ctx, step, s.src, env, s.python, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", wd, "."); err != nil {
			return err
		}
	}
	return nil
}

// command runs a plain command in the tree, with PREFIX (final path), DESTDIR and SRC set:
// the program itself, not a shell, so each argument arrives as written.
func (s *stepEnv) command(ctx context.Context, i int, st *recipes.CommandStep, vars map[string]string) error {
	senv, err := expandMap(st.Env, vars)
	if err != nil {
		return fmt.Errorf("build %s: command env: %w", s.component, err)
	}
	args := make([]string, len(st.Run))
	for j, a := range st.Run {
		if args[j], err = expand(a, vars); err != nil {
			return fmt.Errorf("build %s: command: %w", s.component, err)
		}
	}
	senv["PREFIX"], senv["DESTDIR"], senv["SRC"] = s.prefix, s.destdir, s.src
	dir, err := stepDir(s.src, st.Dir)
	if err != nil {
		return fmt.Errorf("build %s: command dir: %w", s.component, err)
	}
	return s.run(ctx, fmt.Sprintf("%02d-command", i), dir, withEnv(s.env, senv), args[0], args[1:]...)
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
