// Package userfile reads small files a user hands to epbuild (an ARTIFACT.sha256, a
// patch set's files): such a file may be a FIFO, a device or a symlink to /dev/zero, and
// reading it must then be an error naming it, not a hang or an out-of-memory crash.
//
// A file is opened without blocking (a FIFO opened for reading would wait for a writer
// forever), checked on the opened descriptor (no race between a stat and the open: a
// symlink is followed, and what it leads to is what is checked), and read at most to a
// limit.
//
// It is a leaf: it imports only the standard library.
package userfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// SumLimit bounds a sha256 sidecar (ARTIFACT.sha256): one line of sha256sum, 64 hex
// digits, two spaces and a file name, far below it.
const SumLimit = 4 << 10

// Open opens name for reading, without blocking, and returns it with its status only
// when it is a regular file; anything else is a *NotRegularError.
func Open(name string) (*os.File, fs.FileInfo, error) { return open(name, false) }

// OpenEntry is Open that also accepts a directory (for an fs.FS over the user's files).
func OpenEntry(name string) (*os.File, fs.FileInfo, error) { return open(name, true) }

func open(name string, dirOK bool) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() && !(dirOK && fi.IsDir()) {
		f.Close()
		return nil, nil, &NotRegularError{Path: name, Mode: fi.Mode(), Link: isLink(name)}
	}
	return f, fi, nil
}

// ReadFile reads the regular file name whole, when it holds at most limit bytes: a file
// over it is a *TooLargeError (checked on its size before a byte is read, and on what is
// read, for a file that grows), anything but a regular file a *NotRegularError. An error
// opening it is returned as os.Open returns it (errors.Is(err, fs.ErrNotExist) holds).
func ReadFile(name string, limit int64) ([]byte, error) {
	f, fi, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > limit {
		return nil, &TooLargeError{Path: name, Size: fi.Size(), Limit: limit}
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return nil, &TooLargeError{Path: name, Size: -1, Limit: limit}
	}
	return b, nil
}

func isLink(p string) bool {
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// NotRegularError is a file that is not a regular file (a FIFO, a device, a socket):
// reading it could block forever or never end.
type NotRegularError struct {
	Path string
	Mode fs.FileMode
	Link bool // Path is a symlink to it
	// Fix says what to do; "": put the file itself there.
	Fix string
}

func (e *NotRegularError) Error() string {
	what := "a " + FileType(e.Mode)
	if e.Link {
		what = "a symlink to " + what
	}
	fix := e.Fix
	if fix == "" {
		fix = "put the file itself there"
	}
	return fmt.Sprintf("%s is %s, not a regular file: %s", e.Path, what, fix)
}

// ExitCode marks it as bad input.
func (e *NotRegularError) ExitCode() int { return 2 }

// FileType names what a mode that is not a regular file's is.
func FileType(m fs.FileMode) string {
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
	case m.IsDir():
		return "directory"
	}
	return "file of mode " + m.String()
}

// TooLargeError is a file over its limit.
type TooLargeError struct {
	Path  string
	Size  int64 // -1: it grew past the limit while it was read
	Limit int64
	// Setting names what sets the limit (shown in parentheses); "": nothing to set.
	Setting string
	// Fix says what to do; "": check that this is the file meant.
	Fix string
}

func (e *TooLargeError) Error() string {
	size := "larger than " + Size(e.Limit)
	if e.Size >= 0 {
		size = Size(e.Size)
	}
	setting := ""
	if e.Setting != "" {
		setting = " (" + e.Setting + ")"
	}
	fix := e.Fix
	if fix == "" {
		fix = "check that this is the file you meant"
	}
	return fmt.Sprintf("%s is %s; the limit is %s%s: %s", e.Path, size, Size(e.Limit), setting, fix)
}

// ExitCode marks it as bad input.
func (e *TooLargeError) ExitCode() int { return 2 }

// Size is n bytes for a message: "1 KiB", "1.5 MiB", "17 bytes".
func Size(n int64) string {
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
