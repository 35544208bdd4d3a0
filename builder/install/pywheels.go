package install

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/wheel"
)

// A component a recipe packs as a package of the Python environment (python-wheel: NCCL
// built here as torch's own nvidia-nccl-cu13) runs only once that wheel is installed
// there: torch loads its NCCL from its own wheel's directory, and an extension linked
// against the newer NCCL does not even import without it. So install settles the
// environment before it stages anything: it refuses, with the command, when the wheel is
// not there, or with PythonWheels installs it itself (pip, offline, from beside the
// artifact) and says how to undo it.

// WheelMissingError is a Python environment that lacks a wheel the artifact needs there.
// Nothing was written. The environment lacks something: exit 3.
type WheelMissingError struct {
	Python  string
	Wheel   manifest.WheelFile
	Path    string // the wheel beside the artifact
	Have    string // the version the environment has ("" none)
	Problem string // why the wheel cannot be used, when it is not merely not installed
}

func (e *WheelMissingError) Error() string {
	have := "has none"
	if e.Have != "" {
		have = "has " + quote.Term(e.Have)
	}
	if e.Problem != "" {
		return fmt.Sprintf("install: %s is built to be the Python environment's %s, and %s: %s; rebuild or pull the artifact with its .wheels directory",
			e.Wheel.Component, quote.Term(e.Wheel.Replaces.Package), quote.Term(e.Path), e.Problem)
	}
	return fmt.Sprintf("install: %s is built to be the Python environment's %s %s, and %s %s; nothing was written. "+
		"Install it first (%s -m pip install --no-deps --force-reinstall --no-index %s; undo: %s -m %s) or let install do it: --python-wheels",
		e.Wheel.Component, quote.Term(e.Wheel.Replaces.Package), quote.Term(e.Wheel.Version), quote.Term(e.Python), have,
		quote.Shell(e.Python), quote.Shell(e.Path), quote.Shell(e.Python), undo(e.Wheel.Replaces.Package, e.Have))
}

// ExitCode: the environment lacks something.
func (e *WheelMissingError) ExitCode() int { return 3 }

// undo is the pip command that puts back what the environment had: the version there
// before, else none at all.
func undo(pkg, have string) string {
	return (&manifest.Replaced{Package: pkg, Version: have}).Undo()
}

// pythonWheels checks, for each wheel of m that takes the place of a package of the Python
// environment, that py's environment has that wheel's version; with apply it installs the
// ones missing (offline, the file beside art checked against the manifest's sha256 first)
// and returns what it did, with the undo.
func pythonWheels(ctx context.Context, py string, env []string, m *manifest.Manifest, art string, apply bool) ([]string, error) {
	var notes []string
	for _, w := range m.Wheels {
		if w.Replaces == nil {
			continue
		}
		have, err := distVersion(ctx, py, env, w.Replaces.Package)
		if err != nil {
			return notes, err
		}
		if have == w.Version {
			notes = append(notes, fmt.Sprintf("%s is the Python environment's %s already (%s; undo: %s -m %s)",
				w.File, w.Replaces.Package, py, quote.Shell(py), w.Replaces.Undo()))
			continue
		}
		path := filepath.Join(manifest.WheelDir(art), w.File)
		if sum, _, err := wheel.HashFile(path); err != nil {
			return notes, &WheelMissingError{Python: py, Wheel: w, Path: path, Have: have, Problem: "it cannot be read: " + err.Error()}
		} else if sum != w.SHA256 {
			return notes, &WheelMissingError{Python: py, Wheel: w, Path: path, Have: have,
				Problem: fmt.Sprintf("its sha256 is %s, not the %s the manifest records", sum, quote.Term(w.SHA256))}
		}
		if !apply {
			return notes, &WheelMissingError{Python: py, Wheel: w, Path: path, Have: have}
		}
		pctx, cancel := context.WithTimeout(ctx, pipTimeout)
		cmd := exec.CommandContext(pctx, py, "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", "--no-index", "--disable-pip-version-check", path)
		cmd.Env = env
		out := &headBuffer{max: maxToolOutput}
		cmd.Stdout, cmd.Stderr = out, out
		err = cmd.Run()
		cancel()
		if err != nil {
			return notes, fmt.Errorf("install %s into the Python environment of %s: %w: %s", quote.Term(w.File), quote.Term(py), err, quote.Term(quote.Tail(out.String(), 600)))
		}
		if now, err := distVersion(ctx, py, env, w.Replaces.Package); err != nil {
			return notes, err
		} else if now != w.Version {
			return notes, fmt.Errorf("install %s into the Python environment of %s: pip exited 0, and the environment has %s %s", quote.Term(w.File), quote.Term(py), quote.Term(w.Replaces.Package), quote.Term(now))
		}
		was := "none"
		if have != "" {
			was = have
		}
		notes = append(notes, fmt.Sprintf("installed %s into the Python environment of %s in place of %s %s (undo: %s -m %s)",
			w.File, py, w.Replaces.Package, was, quote.Shell(py), undo(w.Replaces.Package, have)))
	}
	return notes, nil
}

// distVersion is the version of a distribution in py's environment ("" when it has none),
// read the way pip reads it (importlib.metadata).
func distVersion(ctx context.Context, py string, env []string, pkg string) (string, error) {
	const prog = `import sys, importlib.metadata as m
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    print("")`
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-I", "-c", prog, pkg)
	cmd.Env = env
	stdout, stderr := &headBuffer{max: maxToolOutput}, &headBuffer{max: maxToolOutput}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	out := stdout.Bytes()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("read the version of %s: no Python interpreter %s (give one with --python): %w", pkg, quote.Term(py), err)
		}
		return "", fmt.Errorf("read the version of %s in the Python environment of %s: %w: %s", pkg, py, err, quote.Term(quote.Tail(stderr.String(), 400)))
	}
	return strings.TrimSpace(string(out)), nil
}

// Bounds of the Python runs: the version probe imports nothing but importlib; pip
// installs one local wheel offline.
const (
	probeTimeout  = time.Minute
	pipTimeout    = 10 * time.Minute
	maxToolOutput = 64 << 10
)

// headBuffer keeps the first max bytes written to it and drops the rest: a program's
// output read into an error message stays bounded.
type headBuffer struct {
	bytes.Buffer
	max int
}

func (h *headBuffer) Write(b []byte) (int, error) {
	if room := h.max - h.Len(); room > 0 {
		h.Buffer.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}
