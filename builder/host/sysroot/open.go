package sysroot

import (
	"errors"
	"fmt"
	"os"
)

// Error is a --sysroot that cannot be read: not there, or an archive that is not
// a capture. Bad input, exit 2.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string {
	return fmt.Sprintf("--sysroot %s: %v", e.Path, e.Err)
}
func (e *Error) Unwrap() error { return e.Err }

// ExitCode: bad input.
func (e *Error) ExitCode() int { return 2 }

// Open opens what --sysroot names: "" is the real root, a directory is read as it
// is, and a file is a capture archive (what host.Capture wrote, OUT.tar.zst), unpacked into a
// temporary directory that done removes.
func Open(path string) (sys Root, done func(), err error) {
	done = func() {}
	if path == "" {
		return New(""), done, nil
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return Root{}, done, &Error{Path: path, Err: err}
	case st.IsDir():
		return New(path), done, nil
	case !st.Mode().IsRegular():
		return Root{}, done, &Error{Path: path, Err: errors.New("neither a directory nor a capture archive")}
	}
	f, err := os.Open(path)
	if err != nil {
		return Root{}, done, &Error{Path: path, Err: err}
	}
	defer f.Close()
	dir, err := os.MkdirTemp("", "epbuild-sysroot-")
	if err != nil {
		return Root{}, done, fmt.Errorf("unpack the capture %s: %w", path, err)
	}
	done = func() { _ = os.RemoveAll(dir) }
	if err := Extract(f, dir); err != nil {
		done()
		return Root{}, func() {}, &Error{Path: path,
			Err: fmt.Errorf("not a capture epbuild host capture wrote (a directory, or OUT.tar.zst): %w", err)}
	}
	return New(dir), done, nil
}
