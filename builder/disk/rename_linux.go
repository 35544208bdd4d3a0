package disk

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// errNoExchange: the file system cannot swap two paths in one step.
var errNoExchange = errors.New("atomic exchange not supported")

// exchange swaps two paths in one step (renameat2 RENAME_EXCHANGE): no moment where
// either is missing.
func exchange(a, b string) error {
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return errNoExchange
	}
	if err != nil {
		return &os.LinkError{Op: "exchange", Old: a, New: b, Err: err}
	}
	return nil
}

// renameNoReplace renames without replacing what appeared at newpath meanwhile.
func RenameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) {
		return renameIfAbsent(oldpath, newpath)
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
	return nil
}

// diskFree is the space and the inodes this process may still use on dir's file system
// (root may use the blocks reserved for it); inodes is -1 where the file system does not
// count them.
func DiskFree(dir string) (bytes, inodes int64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, false
	}
	blocks := st.Bavail
	if os.Geteuid() == 0 {
		blocks = st.Bfree
	}
	inodes = -1
	if st.Files > 0 {
		inodes = int64(st.Ffree)
	}
	return int64(blocks) * st.Bsize, inodes, true
}
