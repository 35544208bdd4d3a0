package patches

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Limits bound what reading a set's own files may cost. A local set is the user's
// input: a set.yaml or a patch that is a pipe, a device or a huge file must be an error,
// not a hang or an out-of-memory crash.
type Limits struct {
	// SetBytes is the largest set.yaml read.
	SetBytes int
	// PatchBytes is the largest patch file read.
	PatchBytes int64
}

// DefaultLimits are far above any real set (the largest shipped patch is a few hundred
// KiB) and far below what hurts: a patch is parsed in memory.
func DefaultLimits() Limits {
	return Limits{SetBytes: 1 << 20, PatchBytes: 64 << 20}
}

// orDefault fills the limits left zero.
func (l Limits) orDefault() Limits {
	d := DefaultLimits()
	if l.SetBytes <= 0 {
		l.SetBytes = d.SetBytes
	}
	if l.PatchBytes <= 0 {
		l.PatchBytes = d.PatchBytes
	}
	return l
}

// userDir is a directory of the user's as an fs.FS. Open never blocks (a FIFO is opened
// non-blocking) and returns only regular files and directories, checked on the opened
// descriptor: a symlink is followed, and what it leads to is what is checked.
type userDir string

func (d userDir) path(name string) string { return filepath.Join(string(d), filepath.FromSlash(name)) }

func (d userDir) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	p := d.path(name)
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		f.Close()
		return nil, &NotRegularError{Path: p, Mode: fi.Mode(), Link: isLink(p)}
	}
	return f, nil
}

// Stat does not open the file: fs.Stat on a FIFO must not block either.
func (d userDir) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	return os.Stat(d.path(name))
}

func isLink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// NotRegularError is a set's file that is not a regular file (a FIFO, a device, a
// socket): reading it could block forever or never end.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
	Link bool // Path is a symlink to it
}

func (e *NotRegularError) Error() string {
	what := "a " + fileType(e.Mode)
	if e.Link {
		what = "a symlink to " + what
	}
	return fmt.Sprintf("%s is %s, not a regular file: a patch set's files are read whole, so put the file itself there", e.Path, what)
}

// ExitCode marks it as bad input.
func (e *NotRegularError) ExitCode() int { return 2 }

func fileType(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeIrregular != 0:
		return "special file"
	}
	return "file of mode " + m.String()
}

// TooLargeError is a set's file over its limit.
type TooLargeError struct {
	Path  string
	Size  int64 // -1: it grew past the limit while it was read
	Limit int64
	Field string // the Limits field that bounds it
}

func (e *TooLargeError) Error() string {
	size := "larger than " + humanSize(e.Limit)
	if e.Size >= 0 {
		size = humanSize(e.Size)
	}
	return fmt.Sprintf("%s is %s; the limit is %s (patches.Limits.%s): split the patch into several patches of the set, or check that this is the file you meant",
		e.Path, size, humanSize(e.Limit), e.Field)
}

// ExitCode marks it as bad input.
func (e *TooLargeError) ExitCode() int { return 2 }

func humanSize(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// boundedReader reads at most limit bytes of a file and fails past them, and stops
// when its context is done: a patch is read in pieces, each a point where a SIGTERM
// can end the read.
type boundedReader struct {
	ctx   context.Context
	r     io.Reader
	n     int64
	limit int64
	path  string
}

func newBoundedReader(ctx context.Context, r io.Reader, limit int64, path string) *boundedReader {
	return &boundedReader{ctx: ctx, r: io.LimitReader(r, limit+1), limit: limit, path: path}
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if err := b.ctx.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", b.path, context.Cause(b.ctx))
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	if b.n > b.limit {
		return 0, &TooLargeError{Path: b.path, Size: -1, Limit: b.limit, Field: "PatchBytes"}
	}
	return n, err
}

// checkSize refuses a file whose size is over the limit before a byte of it is read.
func checkSize(fi fs.FileInfo, limit int64, path string) error {
	if !fi.Mode().IsRegular() {
		return &NotRegularError{Path: path, Mode: fi.Mode()}
	}
	if fi.Size() > limit {
		return &TooLargeError{Path: path, Size: fi.Size(), Limit: limit, Field: "PatchBytes"}
	}
	return nil
}
