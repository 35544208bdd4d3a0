package sysroot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxSymlinkHops bounds symlink resolution the way the kernel does (ELOOP after 40).
const maxSymlinkHops = 40

// entryKind says what a recorded path was, so a capture can recreate it.
type entryKind int

const (
	kindFile entryKind = iota
	kindDir
	kindLink
	kindNode // a device node; captured as an empty file because mknod needs privilege
	kindExec // an executable the checks only look for (nvcc): captured empty, mode 0555
)

type entry struct {
	kind   entryKind
	data   []byte // kindFile: the bytes the checks saw
	target string // kindLink: the link text, as readlink returned it
}

// recorder remembers every path read through a Root, keyed by its resolved host path
// ("/sys/devices/..."); symlinks are recorded where they sit, so a capture keeps them.
type recorder struct {
	mu      sync.Mutex
	entries map[string]entry
}

func (r *recorder) add(p string, e entry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.entries[p]; ok && (old.kind == kindFile || old.kind == kindExec) && e.kind != kindFile {
		return // a file read beats a mere listing of the same path
	}
	r.entries[p] = e
}

func (r *recorder) snapshot() map[string]entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]entry, len(r.entries))
	for k, v := range r.entries {
		out[k] = v
	}
	return out
}

// Root is the root under which /sys, /proc and /dev are read: "" is the real root, a
// directory is a capture. It records every path read, which is what WriteCapture
// archives. Copies share the record.
type Root struct {
	dir string
	rec *recorder
	run Runner
}

// Runner runs a program and returns what it wrote on stdout (nvidia-smi, scontrol). An
// error satisfying errors.Is(err, exec.ErrNotFound) means the program is not there.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// New returns a Root reading under dir ("" for the real root) with an empty record.
// On the real root it runs programs with os/exec; under a capture their recorded output
// stands in for them.
func New(dir string) Root {
	return Root{dir: dir, rec: &recorder{entries: map[string]entry{}}, run: execRunner}
}

// WithRunner returns the Root running programs with r (on the real root; a capture
// never runs one). The copy shares the record.
func (s Root) WithRunner(r Runner) Root {
	s.run = r
	return s
}

// Runner is what s runs programs with.
func (s Root) Runner() Runner { return s.run }

// commandTimeout bounds one program: nvidia-smi can hang on a GPU that has fallen off the bus.
const commandTimeout = 60 * time.Second

func execRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	var stderr bytes.Buffer
	c := exec.CommandContext(ctx, name, args...)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, firstLineOf(msg))
		}
		return out, err
	}
	return out, nil
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// commandsDir is where a capture keeps the output of the programs the checks ran, one
// file per command line, named by the command line with its spaces and slashes escaped
// (url.PathEscape): "/epbuild-commands/nvidia-smi%20-q".
const commandsDir = "/epbuild-commands"

// CommandPath is where a capture keeps the output of argv.
func CommandPath(argv ...string) string {
	return commandsDir + "/" + url.PathEscape(strings.Join(argv, " "))
}

// Output runs argv (on the real root) or reads its recorded output (under a capture), and
// records the output for a capture. A program that is not there, or that fails, is an
// error; under a capture that lacks the command, the error satisfies
// errors.Is(err, fs.ErrNotExist).
func (s Root) Output(ctx context.Context, argv ...string) ([]byte, error) {
	return s.OutputKeeping(ctx, func(b []byte) []byte { return b }, argv...)
}

// OutputKeeping is Output recording only keep(the output), for a long output of which
// the checks use a part.
func (s Root) OutputKeeping(ctx context.Context, keep func([]byte) []byte, argv ...string) ([]byte, error) {
	p := CommandPath(argv...)
	if s.dir != "" {
		b, err := os.ReadFile(s.onDisk(p))
		if err != nil {
			return nil, hostErr("read the captured output of", strings.Join(argv, " "), err)
		}
		s.add(p, entry{kind: kindFile, data: keep(b)})
		return b, nil
	}
	run := s.run
	if run == nil {
		run = execRunner
	}
	b, err := run(ctx, argv[0], argv[1:]...)
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", strings.Join(argv, " "), err)
	}
	s.add(p, entry{kind: kindFile, data: keep(b)})
	return b, nil
}

// IsExecutable reports whether p (symlinks followed) is a regular file someone may
// execute, and records it without its bytes (an nvcc is tens of megabytes).
func (s Root) IsExecutable(p string) (bool, error) {
	r, err := s.resolve(p, true)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return false, nil
		}
		return false, hostErr("stat", p, err)
	}
	fi, err := os.Stat(s.onDisk(r))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	case err != nil:
		return false, hostErr("stat", p, err)
	case !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0:
		return false, nil
	}
	s.add(r, entry{kind: kindExec})
	return true, nil
}

// Dir is the directory the Root reads under ("" for the real root).
func (s Root) Dir() string { return s.dir }

func (s Root) record() map[string]entry {
	if s.rec == nil {
		return nil
	}
	return s.rec.snapshot()
}

func (s Root) add(p string, e entry) {
	if s.rec != nil {
		s.rec.add(p, e)
	}
}

// onDisk maps a host path ("/sys/...") to where it lies on this machine.
func (s Root) onDisk(p string) string {
	if s.dir == "" {
		return filepath.FromSlash(p)
	}
	return filepath.Join(s.dir, filepath.FromSlash(p))
}

// resolve walks p component by component, following (and recording) symlinks inside the
// sysroot, so an absolute link target never escapes a capture and every link the answer
// depended on ends up in the capture. With followLast false the last component is not
// followed (readlink, lstat).
func (s Root) resolve(p string, followLast bool) (string, error) {
	if !path.IsAbs(p) {
		return "", fmt.Errorf("resolve %q: not an absolute host path", p)
	}
	rest := SplitPath(p)
	cur := "/"
	hops := 0
	for len(rest) > 0 {
		comp := rest[0]
		rest = rest[1:]
		next := path.Join(cur, comp)
		if len(rest) == 0 && !followLast {
			return next, nil
		}
		fi, err := os.Lstat(s.onDisk(next))
		if err != nil {
			return next, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		hops++
		if hops > maxSymlinkHops {
			return next, syscall.ELOOP
		}
		target, err := os.Readlink(s.onDisk(next))
		if err != nil {
			return next, err
		}
		s.add(next, entry{kind: kindLink, target: target})
		// cur holds no symlinks, so cleaning ".." lexically against it is exact.
		joined := target
		if !path.IsAbs(target) {
			joined = path.Join(cur, target)
		}
		rest = append(SplitPath(joined), rest...)
		cur = "/"
	}
	return cur, nil
}

// hostErr words an error by the host path, leaving out where the sysroot lies on disk, so
// a report reads the same from a capture as from the node it was taken on.
func hostErr(op, p string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s %s: %w", op, p, err)
}

// SplitPath returns the components of the host path p, cleaned.
func SplitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(path.Clean(p), "/") {
		if c != "" {
			out = append(out, c)
		}
	}
	return out
}

// Resolve returns p with every symlink followed, as a host path ("/sys/devices/...").
func (s Root) Resolve(p string) (string, error) {
	r, err := s.resolve(p, true)
	if err != nil {
		return "", hostErr("resolve", p, err)
	}
	return r, nil
}

// ReadFile reads a host file through the sysroot and records its bytes.
func (s Root) ReadFile(p string) ([]byte, error) {
	return s.ReadFileKeeping(p, func(b []byte) []byte { return b })
}

// ReadFileKeeping reads a host file whole but records only keep(its bytes): for a large
// file (the dpkg database) of which the checks use a part, so a capture stays small.
func (s Root) ReadFileKeeping(p string, keep func([]byte) []byte) ([]byte, error) {
	r, err := s.resolve(p, true)
	if err != nil {
		return nil, hostErr("read", p, err)
	}
	b, err := os.ReadFile(s.onDisk(r))
	if err != nil {
		return nil, hostErr("read", p, err)
	}
	s.add(r, entry{kind: kindFile, data: keep(b)})
	return b, nil
}

// ReadString is ReadFile with surrounding white space trimmed (sysfs values end in "\n").
func (s Root) ReadString(p string) (string, error) {
	b, err := s.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

// Readlink returns the text of the symlink p (its parents are followed) and records it.
func (s Root) Readlink(p string) (string, error) {
	r, err := s.resolve(p, false)
	if err != nil {
		return "", hostErr("readlink", p, err)
	}
	target, err := os.Readlink(s.onDisk(r))
	if err != nil {
		return "", hostErr("readlink", p, err)
	}
	s.add(r, entry{kind: kindLink, target: target})
	return target, nil
}

// ReadDir lists a host directory, sorted by name, and records the directory with its
// symlink and directory entries (regular files are recorded only when read: the checks
// never use a file's name without reading it).
func (s Root) ReadDir(p string) ([]fs.DirEntry, error) {
	r, err := s.resolve(p, true)
	if err != nil {
		return nil, hostErr("list", p, err)
	}
	ents, err := os.ReadDir(s.onDisk(r))
	if err != nil {
		return nil, hostErr("list", p, err)
	}
	s.add(r, entry{kind: kindDir})
	for _, e := range ents {
		ep := path.Join(r, e.Name())
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			if t, err := os.Readlink(s.onDisk(ep)); err == nil {
				s.add(ep, entry{kind: kindLink, target: t})
			}
		case e.IsDir():
			s.add(ep, entry{kind: kindDir})
		}
	}
	return ents, nil
}

// Names lists a directory's entry names, sorted.
func (s Root) Names(p string) ([]string, error) {
	ents, err := s.ReadDir(p)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, nil
}

// Stat follows p and records what it found (a directory, a device node, or a file with its
// bytes). A missing path returns an error satisfying errors.Is(err, fs.ErrNotExist).
func (s Root) Stat(p string) (fs.FileInfo, error) {
	r, err := s.resolve(p, true)
	if err != nil {
		return nil, hostErr("stat", p, err)
	}
	fi, err := os.Lstat(s.onDisk(r))
	if err != nil {
		return nil, hostErr("stat", p, err)
	}
	switch {
	case fi.IsDir():
		s.add(r, entry{kind: kindDir})
	case fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice) != 0:
		s.add(r, entry{kind: kindNode})
	case fi.Mode().IsRegular():
		if b, err := os.ReadFile(s.onDisk(r)); err == nil {
			s.add(r, entry{kind: kindFile, data: b})
		}
	}
	return fi, nil
}

// Exists reports whether p exists; any error other than "not there" counts as absent too,
// and is returned for the report.
func (s Root) Exists(p string) (bool, error) {
	_, err := s.Stat(p)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return false, err
}
