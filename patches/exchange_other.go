//go:build !linux

package patches

import (
	"errors"
	"os"
)

// canExchange says whether exchange can work here.
const canExchange = false

// exchange would swap two entries of a directory in one step; only Linux has it.
func exchange(*os.File, string, string) error {
	return errors.ErrUnsupported
}

// renameNoReplace renames oldpath to newpath, failing when newpath exists; without
// renameat2 the check and the rename are two steps.
func renameNoReplace(oldpath, newpath string) error {
	if _, err := os.Lstat(newpath); err == nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: os.ErrExist}
	}
	return os.Rename(oldpath, newpath)
}
