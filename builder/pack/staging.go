package pack

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// StagingDir creates a new directory prefix+random in parent for a download that must
// not appear under its final name before it is checked, and holds an exclusive flock on
// it until release, which also removes it. Directories of that prefix whose lock is free
// are removed first: their process died (SIGKILL, a crash, a full disk) without removing
// them, and no live one can be using them. A staging directory of a live process is
// left alone.
func StagingDir(parent, prefix string) (string, func(), error) {
	removeStaleStaging(parent, prefix)
	for range 3 {
		dir, err := os.MkdirTemp(parent, prefix)
		if err != nil {
			return "", nil, err
		}
		f, err := lockDir(dir, unix.LOCK_EX)
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, err
		}
		// another run may have taken it for stale between MkdirTemp and the lock
		st, err1 := f.Stat()
		now, err2 := os.Stat(dir)
		if err1 == nil && err2 == nil && os.SameFile(st, now) {
			return dir, func() { _ = os.RemoveAll(dir); _ = f.Close() }, nil
		}
		_ = f.Close()
	}
	return "", nil, fmt.Errorf("create a staging directory in %s: removed by another run as it was made, three times", parent)
}

// removeStaleStaging removes the directories prefix* in parent whose lock nobody holds.
// It is best effort: what cannot be removed stays for the next run.
func removeStaleStaging(parent, prefix string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		f, err := lockDir(p, unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			continue // in use, or gone
		}
		_ = os.RemoveAll(p)
		_ = f.Close()
	}
}

// lockDir opens dir and flocks it; the lock lasts until the file is closed or the
// process ends, however it ends.
func lockDir(dir string, how int) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}
