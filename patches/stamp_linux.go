package patches

import (
	"io/fs"
	"syscall"
)

// fileStamp is what says that a file is still the one that was read: a write changes its
// ctime even when the size and mtime are put back.
type fileStamp struct {
	size, mtime, ctime int64
	ino                uint64
}

func stampOf(fi fs.FileInfo) fileStamp {
	st := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ctime, st.ino = sys.Ctim.Nano(), sys.Ino
	}
	return st
}
