//go:build !linux

package disk

import "errors"

// errNoExchange: the file system cannot swap two paths in one step.
var errNoExchange = errors.New("atomic exchange not supported")

// exchange has no portable form: callers fall back to two renames.
func exchange(a, b string) error { return errNoExchange }

func renameNoReplace(oldpath, newpath string) error { return renameIfAbsent(oldpath, newpath) }

// diskFree is unknown here: the checks that need it are skipped.
func diskFree(dir string) (bytes, inodes int64, ok bool) { return 0, 0, false }
