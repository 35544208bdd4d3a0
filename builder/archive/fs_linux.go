package archive

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace moves the finished tree into place without clobbering a destination that
// appeared meanwhile (plain rename(2) would replace an empty directory).
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		// Some file systems (and old kernels) lack RENAME_NOREPLACE.
		return renameIfAbsent(oldpath, newpath)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}
