package userfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadFileRefuses: a FIFO, /dev/zero behind a symlink and a file over the limit are
// refused naming the file and what it is, without blocking or reading past the limit.
func TestReadFileRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "a.sha256")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "b.sha256")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "c.sha256")
	if err := os.WriteFile(big, []byte(strings.Repeat("x", SumLimit+1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, fifo + " is a named pipe (FIFO), not a regular file: put the file itself there"},
		{zero, zero + " is a symlink to a character device, not a regular file"},
		{big, big + " is 4097 bytes; the limit is 4 KiB: check that this is the file you meant"},
		{dir, dir + " is a directory, not a regular file"},
	} {
		_, err := ReadFile(c.path, SumLimit)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ReadFile(%s): %v\nwant %s", c.path, err, c.want)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "absent"), SumLimit); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent: %v", err)
	}
	ok := filepath.Join(dir, "d.sha256")
	if err := os.WriteFile(ok, []byte("abc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(ok, SumLimit); err != nil || string(b) != "abc\n" {
		t.Errorf("ReadFile(%s) = %q, %v", ok, b, err)
	}
	if f, _, err := OpenEntry(dir); err != nil {
		t.Errorf("OpenEntry(dir): %v", err)
	} else {
		f.Close()
	}
}
