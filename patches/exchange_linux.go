//go:build linux

package patches

import (
	"os"

	"golang.org/x/sys/unix"
)

// canExchange says whether exchange can work here.
const canExchange = true

// exchange swaps the entries a and b (names without a slash) of the directory
// dir in one step: neither name is missing at any time.
func exchange(dir *os.File, a, b string) error {
	rc, err := dir.SyscallConn()
	if err != nil {
		return err
	}
	var xerr error
	if err := rc.Control(func(fd uintptr) {
		xerr = unix.Renameat2(int(fd), a, int(fd), b, unix.RENAME_EXCHANGE)
	}); err != nil {
		return err
	}
	if xerr != nil {
		return &os.LinkError{Op: "renameat2", Old: a, New: b, Err: xerr}
	}
	return nil
}

// renameNoReplace renames oldpath to newpath, failing when newpath exists (an empty
// directory there too, which rename(2) would replace).
func renameNoReplace(oldpath, newpath string) error {
	if err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE); err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}
