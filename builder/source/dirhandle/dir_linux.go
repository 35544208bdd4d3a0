package dirhandle

import (
	"io"
	"io/fs"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"golang.org/x/sys/unix"
)

// Dir is an open directory of a checkout: its entries are made relative to it, so
// the kernel resolves one name per file, not the whole path, and a name cannot lead
// outside it. Files are written with plain system calls: os.OpenFile adds four fcntl
// calls and a failed epoll registration to each regular file, more than the open, write,
// fstat and close a checkout needs.
type Dir int

// Open opens the directory abs, which the checkout made (not a symlink).
func Open(abs string) (Dir, error) {
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: abs, Err: err}
	}
	return Dir(fd), nil
}

// Close closes the directory.
func (d Dir) Close() { unix.Close(int(d)) }

// Mkdir makes the directory name in d.
func (d Dir) Mkdir(name string) error {
	if err := unix.Mkdirat(int(d), name, 0o755); err != nil {
		return &fs.PathError{Op: "mkdir", Path: name, Err: err}
	}
	return nil
}

// Symlink makes name a symlink to target and fills e's stat data.
func (d Dir) Symlink(target, name string, e *index.Entry) error {
	if err := unix.Symlinkat(target, int(d), name); err != nil {
		return &fs.PathError{Op: "symlink", Path: name, Err: err}
	}
	return d.Lstat(name, e)
}

// Lstat fills e's stat data from name.
func (d Dir) Lstat(name string, e *index.Entry) error {
	var st unix.Stat_t
	if err := unix.Fstatat(int(d), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	fillUnixStat(e, &st)
	return nil
}

// WriteFile creates name (it must not exist) with perm, writes data, or what rd holds when
// data is nil, and fills e's stat data.
func (d Dir) WriteFile(name string, perm uint32, data []byte, rd io.Reader, e *index.Entry) (err error) {
	fd, err := unix.Openat(int(d), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer func() {
		if cerr := unix.Close(fd); err == nil && cerr != nil {
			err = &fs.PathError{Op: "close", Path: name, Err: cerr}
		}
	}()
	if rd != nil {
		_, err = io.Copy(fdWriter(fd), rd)
	} else {
		_, err = fdWriter(fd).Write(data)
	}
	if err != nil {
		return &fs.PathError{Op: "write", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil { // closing changes no time stamp
		return &fs.PathError{Op: "stat", Path: name, Err: err}
	}
	fillUnixStat(e, &st)
	return nil
}

// fdWriter writes to a file descriptor, all of each buffer.
type fdWriter int

func (w fdWriter) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k, err := unix.Write(int(w), b[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if k == 0 {
			return n, io.ErrShortWrite
		}
		n += k
	}
	return n, nil
}

func fillUnixStat(e *index.Entry, st *unix.Stat_t) {
	e.ModifiedAt = time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
	e.CreatedAt = time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
	e.Dev, e.Inode = uint32(st.Dev), uint32(st.Ino)
	e.UID, e.GID = st.Uid, st.Gid
	if e.Mode != filemode.Submodule {
		e.Size = uint32(st.Size)
	}
}
