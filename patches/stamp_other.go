//go:build !linux

package patches

import "io/fs"

// fileStamp is what says that a file is still the one that was read (here: size and mtime).
type fileStamp struct {
	size, mtime int64
}

func stampOf(fi fs.FileInfo) fileStamp {
	return fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
}
