package patches

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/epbuild/epbuild/recipes/userfile"
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
	f, _, err := userfile.OpenEntry(d.path(name))
	var nr *NotRegularError
	if errors.As(err, &nr) {
		nr.Fix = notRegularFix
	}
	if err != nil {
		return nil, err
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

// NotRegularError is a set's file that is not a regular file (a FIFO, a device, a
// socket): reading it could block forever or never end.
type NotRegularError = userfile.NotRegularError

const notRegularFix = "a patch set's files are read whole, so put the file itself there"

// TooLargeError is a set's file over its limit.
type TooLargeError = userfile.TooLargeError

// tooLarge is the error of a patch over Limits.PatchBytes.
func tooLarge(path string, size, limit int64) *TooLargeError {
	return &TooLargeError{Path: path, Size: size, Limit: limit, Setting: "patches.Limits.PatchBytes",
		Fix: "split the patch into several patches of the set, or check that this is the file you meant"}
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
		return 0, tooLarge(b.path, -1, b.limit)
	}
	return n, err
}

// checkSize refuses a file whose size is over the limit before a byte of it is read.
func checkSize(fi fs.FileInfo, limit int64, path string) error {
	if !fi.Mode().IsRegular() {
		return &NotRegularError{Path: path, Mode: fi.Mode(), Fix: notRegularFix}
	}
	if fi.Size() > limit {
		return tooLarge(path, fi.Size(), limit)
	}
	return nil
}
