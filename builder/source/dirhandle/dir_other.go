//go:build !linux

package dirhandle

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
)

// Dir is a directory of a checkout, by its path, off Linux.
type Dir string

func Open(abs string) (Dir, error) { return Dir(abs), nil }

func (d Dir) Close() {}

func (d Dir) Mkdir(name string) error {
	return os.Mkdir(filepath.Join(string(d), name), 0o755)
}

func (d Dir) Symlink(target, name string, e *index.Entry) error {
	if err := os.Symlink(target, filepath.Join(string(d), name)); err != nil {
		return err
	}
	return d.Lstat(name, e)
}

func (d Dir) Lstat(name string, e *index.Entry) error {
	fi, err := os.Lstat(filepath.Join(string(d), name))
	if err != nil {
		return err
	}
	fillEntry(e, fi)
	return nil
}

func (d Dir) WriteFile(name string, perm uint32, data []byte, rd io.Reader, e *index.Entry) error {
	f, err := os.OpenFile(filepath.Join(string(d), name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(perm))
	if err != nil {
		return err
	}
	if rd != nil {
		_, err = io.Copy(f, rd)
	} else {
		_, err = f.Write(data)
	}
	var fi fs.FileInfo
	if err == nil {
		fi, err = f.Stat() // closing changes no time stamp
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		fillEntry(e, fi)
	}
	return err
}

// fillEntry fills what the index needs to trust a file; off Linux the inode fields stay
// zero, and git rehashes the files once.
func fillEntry(e *index.Entry, fi fs.FileInfo) {
	e.ModifiedAt = fi.ModTime()
	if e.Mode != filemode.Submodule {
		e.Size = uint32(fi.Size())
	}
}
