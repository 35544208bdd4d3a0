//go:build !linux

package archive

import "io/fs"

// ident is what says that a file is still the one that was read (here: size and mtime).
type ident struct {
	size, mtime int64
}

func identOf(fi fs.FileInfo) ident {
	return ident{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}
