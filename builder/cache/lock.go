package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// FileLock is an open lock file (flock). Lock files are never removed: removing one
// would let two processes hold "the" lock.
type FileLock struct {
	f    *os.File
	path string
}

// LockError is a lock file epbuild refuses to use: not a regular file (a FIFO, whose
// open would hang, a device, a link) or another user's (who could hold it forever).
type LockError struct {
	Path  string
	Found string
	Fix   string
}

func (e *LockError) Error() string {
	return fmt.Sprintf("lock file %s: %s; fix: %s", e.Path, e.Found, e.Fix)
}

// ExitCode is 3: the environment is wrong, not the input.
func (e *LockError) ExitCode() int { return 3 }

// OpenLock opens (creating, mode perm) the lock file path safely: without following a
// link, without waiting on a FIFO, and only if it is a regular file of this user's or
// root's.
func OpenLock(path string, perm os.FileMode, fix string) (*FileLock, error) {
	const flags = os.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	f, err := os.OpenFile(path, flags|os.O_CREATE, perm)
	if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrPermission) {
		// a sticky directory refuses O_CREAT on another user's file (protected_regular):
		// open it as it is, to say whose it is
		if g, gerr := os.OpenFile(path, flags, 0); gerr == nil {
			f, err = g, nil
		}
	}
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &LockError{Path: path, Found: "a symbolic link", Fix: fix}
		}
		if st, lerr := os.Lstat(path); lerr == nil {
			if found := badLock(st); found != "" {
				return nil, &LockError{Path: path, Found: found, Fix: fix}
			}
		}
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open lock %s: %w", path, err)
	}
	if found := badLock(st); found != "" {
		f.Close()
		return nil, &LockError{Path: path, Found: found, Fix: fix}
	}
	return &FileLock{f: f, path: path}, nil
}

// badLock says what is wrong with the lock file st, or "".
func badLock(st fs.FileInfo) string {
	if !st.Mode().IsRegular() {
		return "not a regular file (" + st.Mode().Type().String() + ")"
	}
	if s, ok := st.Sys().(*syscall.Stat_t); ok && int(s.Uid) != os.Getuid() && s.Uid != 0 {
		return "owned by " + userName(int(s.Uid)) + ", who could hold it forever"
	}
	return ""
}

// TryLock takes the lock, shared or exclusive, if it is free now.
func (l *FileLock) TryLock(shared bool) (bool, error) {
	how := syscall.LOCK_EX
	if shared {
		how = syscall.LOCK_SH
	}
	err := syscall.Flock(int(l.f.Fd()), how|syscall.LOCK_NB)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return false, fmt.Errorf("lock %s: %w", l.path, err)
}

// Wait takes the lock, polling every poll until it is free or ctx ends (flock cannot be
// cancelled); waiting is called once, when the lock is found held.
func (l *FileLock) Wait(ctx context.Context, shared bool, poll time.Duration, waiting func()) error {
	for {
		ok, err := l.TryLock(shared)
		if err != nil || ok {
			return err
		}
		if waiting != nil {
			waiting()
			waiting = nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// Close releases the lock and closes the file.
func (l *FileLock) Close() { l.f.Close() }

// LockFix is what to do about a bad lock file in the locks/ of the cache dir.
func LockFix(dir string) string {
	return "remove it (no epbuild may be running with cache " + dir + "), or set EPBUILD_CACHE to a directory of yours"
}
