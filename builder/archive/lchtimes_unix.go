//go:build linux || darwin

package archive

import (
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"
)

// lchtimes sets a symlink's own mtime. os.Root has no Lchtimes, so it opens the link's
// parent through the root (a directory it created itself) and acts relative to it.
func lchtimes(root *os.Root, rel string, t time.Time) error {
	dir, err := root.Open(path.Dir(rel))
	if err != nil {
		return err
	}
	defer dir.Close()
	ts := unix.NsecToTimespec(t.UnixNano())
	if err := unix.UtimesNanoAt(int(dir.Fd()), path.Base(rel), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "lchtimes", Path: rel, Err: err}
	}
	return nil
}
