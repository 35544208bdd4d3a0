package archive

import (
	"io/fs"
	"syscall"
)

// ident is what says that a file is still the one that was read: a write changes its
// ctime even when the size and mtime are put back.
type ident struct {
	size, mtime, ctime int64
	ino                uint64
}

func identOf(fi fs.FileInfo) ident {
	id := ident{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ctime = st.Ctim.Nano()
		id.ino = st.Ino
	}
	return id
}
