//go:build !linux

package archive

import "os"

func renameNoReplace(oldpath, newpath string) error { return renameIfAbsent(oldpath, newpath) }

func openRead(name string) (*os.File, error) { return os.Open(name) }
