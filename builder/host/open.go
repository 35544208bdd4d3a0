package host

import (
	"errors"
	"fmt"
	"os"
)

// SysrootError is a --sysroot that cannot be read: not there, or an archive that is not
// a capture. Bad input, exit 2.
type SysrootError struct {
	Path string
	Err  error
}

func (e *SysrootError) Error() string {
	return fmt.Sprintf("--sysroot %s: %v", e.Path, e.Err)
}
func (e *SysrootError) Unwrap() error { return e.Err }

// ExitCode: bad input.
func (e *SysrootError) ExitCode() int { return 2 }

// OpenSysroot opens what --sysroot names: "" is the real root, a directory is read as it
// is, and a file is a capture archive (what Capture wrote, OUT.tar.zst), unpacked into a
// temporary directory that done removes.
func OpenSysroot(path string) (sys Sysroot, done func(), err error) {
	done = func() {}
	if path == "" {
		return NewSysroot(""), done, nil
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return Sysroot{}, done, &SysrootError{Path: path, Err: err}
	case st.IsDir():
		return NewSysroot(path), done, nil
	case !st.Mode().IsRegular():
		return Sysroot{}, done, &SysrootError{Path: path, Err: errors.New("neither a directory nor a capture archive")}
	}
	f, err := os.Open(path)
	if err != nil {
		return Sysroot{}, done, &SysrootError{Path: path, Err: err}
	}
	defer f.Close()
	dir, err := os.MkdirTemp("", "epbuild-sysroot-")
	if err != nil {
		return Sysroot{}, done, fmt.Errorf("unpack the capture %s: %w", path, err)
	}
	done = func() { _ = os.RemoveAll(dir) }
	if err := ExtractCapture(f, dir); err != nil {
		done()
		return Sysroot{}, func() {}, &SysrootError{Path: path,
			Err: fmt.Errorf("not a capture epbuild host capture wrote (a directory, or OUT.tar.zst): %w", err)}
	}
	return NewSysroot(dir), done, nil
}
