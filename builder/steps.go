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

// cmake configures, builds and installs into destdir+prefix.
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
	srcDir := s.src
	if st.Dir != "" {
		srcDir = filepath.Join(s.src, filepath.FromSlash(st.Dir))
	}
	bdir := filepath.Join(s.work, fmt.Sprintf("cmake-build-%d", i))
	args := []string{"-S", srcDir, "-B", bdir, "-DCMAKE_INSTALL_PREFIX=" + s.prefix, "-DCMAKE_BUILD_TYPE=Release"}
	if s.ninja {
		args = append(args, "-G", "Ninja")
	}
	for _, k := range slices.Sorted(maps.Keys(opts)) {
		args = append(args, "-D"+k+"="+opts[k])
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

// pythonExtension builds a setup.py package (DeepEP) and installs its build output into
// prefix/python; with wheel set, it also keeps a wheel under prefix/wheels.
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

// command runs a plain command in the tree, with PREFIX (final path), DESTDIR and SRC set.
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
	dir := s.src
	if st.Dir != "" {
		dir = filepath.Join(s.src, filepath.FromSlash(st.Dir))
	}
	return s.run(ctx, fmt.Sprintf("%02d-command", i), dir, withEnv(s.env, senv), args[0], args[1:]...)
}

// copyTree copies a directory tree: regular files (modes kept), directories and
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
			return copyFile(p, t, info.Mode().Perm(), buf)
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
