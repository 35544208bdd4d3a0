//go:build !linux

package archive

func renameNoReplace(oldpath, newpath string) error { return renameIfAbsent(oldpath, newpath) }
