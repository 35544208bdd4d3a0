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

// openRead opens name for reading. os.Open tries to register every file it opens with
// the poller (fcntl, epoll_ctl, fcntl again: a regular file never can be), which costs
// more than reading a small file; a descriptor handed to os.NewFile is not tried.
func openRead(name string) (*os.File, error) {
	for {
		fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: name, Err: err}
		}
		return os.NewFile(uintptr(fd), name), nil
	}
}
