package cache

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const sumA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
const sumB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"

func TestDefaultDir(t *testing.T) {
	t.Setenv("EPBUILD_CACHE", "/x/epb")
	t.Setenv("XDG_CACHE_HOME", "/x/xdg")
	if d, _ := DefaultDir(); d != "/x/epb" {
		t.Errorf("with EPBUILD_CACHE: %s", d)
	}
	t.Setenv("EPBUILD_CACHE", "")
	if d, _ := DefaultDir(); d != "/x/xdg/epbuild" {
		t.Errorf("with XDG_CACHE_HOME: %s", d)
	}
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "/x/home")
	if d, _ := DefaultDir(); d != "/x/home/.cache/epbuild" {
		t.Errorf("with HOME: %s", d)
	}
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"github.com/NVIDIA/nvshmem.git", "file/srv/x.git"} {
		if err := CheckKey(KindGit, k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	for _, k := range []string{"", "/abs.git", "a/../b.git", "../x.git", "a/./b.git", "a//b.git", "noext", "a/.git/b.git"} {
		if err := CheckKey(KindGit, k); err == nil {
			t.Errorf("git key %q accepted", k)
		}
	}
	for _, k := range []string{"", strings.ToUpper(sumA), sumA[:63], "../" + sumA[3:]} {
		if err := CheckKey(KindArchive, k); err == nil {
			t.Errorf("archive key %q accepted", k)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "f")
	if err := WriteFile(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(b) != "two" || fi.Mode().Perm() != 0o644 {
		t.Errorf("got %q %v", b, fi.Mode())
	}
	if des, _ := os.ReadDir(filepath.Dir(p)); len(des) != 1 {
		t.Errorf("temp files left: %v", des)
	}
}

func TestLockExcludesAndCancels(t *testing.T) {
	c, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Two Cache values on one directory stand for two processes: flock locks belong to
	// open files, so they exclude each other even within one process.
	c2, _ := Open(c.Dir())
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		cc := c
		if i%2 == 1 {
			cc = c2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			unlock, err := cc.Lock(ctx, KindArchive, sumA)
			if err != nil {
				t.Error(err)
				return
			}
			n := inside.Add(1)
			if n > maxInside.Load() {
				maxInside.Store(n)
			}
			time.Sleep(10 * time.Millisecond)
			inside.Add(-1)
			unlock()
		}()
	}
	wg.Wait()
	if maxInside.Load() != 1 {
		t.Errorf("%d holders at once", maxInside.Load())
	}

	unlock, err := c.Lock(ctx, KindArchive, sumA)
	if err != nil {
		t.Fatal(err)
	}
	// Another key is independent.
	u2, err := c.Lock(ctx, KindArchive, sumB)
	if err != nil {
		t.Fatal(err)
	}
	u2()
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := c2.Lock(tctx, KindArchive, sumA); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lock wait under a deadline: %v", err)
	}
	unlock()
	if _, err := c.Lock(ctx, KindGit, "../escape.git"); err == nil {
		t.Errorf("lock with a bad key succeeded")
	}
}

func TestLockRemovesDeadTemps(t *testing.T) {
	c, _ := Open(t.TempDir())
	ctx := context.Background()
	unlock, _ := c.Lock(ctx, KindGit, "h/a.git")
	mine, err := c.TempDir(KindGit, "h/a.git")
	if err != nil {
		t.Fatal(err)
	}
	other, _ := c.TempDir(KindGit, "h/a.git.git")
	unlock() // as if the holder died with mine still there
	unlock, _ = c.Lock(ctx, KindGit, "h/a.git")
	defer unlock()
	if _, err := os.Stat(mine); err == nil {
		t.Errorf("the dead holder's temp dir survived the next lock")
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another key's temp dir was removed: %v", err)
	}
}

func TestListTouchGC(t *testing.T) {
	c, _ := Open(t.TempDir())
	ctx := context.Background()
	put := func(kind Kind, key, url string, size int) {
		p := c.Path(kind, key)
		if kind == KindGit {
			p = filepath.Join(p, "objects", "pack", "pack-1.pack")
		}
		if err := WriteFile(p, make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := c.Touch(kind, key, url); err != nil {
			t.Fatal(err)
		}
	}
	put(KindGit, "github.com/NVIDIA/nvshmem.git", "https://github.com/NVIDIA/nvshmem", 100)
	put(KindGit, "github.com/deepseek-ai/DeepEP.git", "https://github.com/deepseek-ai/DeepEP", 200)
	put(KindArchive, sumA, "https://example.com/a.tgz", 300)
	put(KindArchive, sumB, "https://example.com/b.tgz", 400)
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(c.metaPath(KindGit, "github.com/NVIDIA/nvshmem.git"), old, old)
	os.Chtimes(c.metaPath(KindArchive, sumA), old, old)

	es, err := c.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, string(e.Kind)+" "+e.Key+" "+e.URL)
	}
	want := []string{
		"git github.com/NVIDIA/nvshmem.git https://github.com/NVIDIA/nvshmem",
		"git github.com/deepseek-ai/DeepEP.git https://github.com/deepseek-ai/DeepEP",
		"archive " + sumA + " https://example.com/a.tgz",
		"archive " + sumB + " https://example.com/b.tgz",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("List:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if u, _ := c.Usage(); u != 1000 {
		t.Errorf("Usage = %d, want 1000", u)
	}
	// Touch refreshes the last use; GC keeps what was used within a day, and an entry
	// that another process holds locked.
	if err := c.Touch(KindArchive, sumA, "ignored"); err != nil {
		t.Fatal(err)
	}
	held, _ := Open(c.Dir())
	unlock, _ := held.Lock(ctx, KindGit, "github.com/deepseek-ai/DeepEP.git")
	os.Chtimes(c.metaPath(KindGit, "github.com/deepseek-ai/DeepEP.git"), old, old)
	removed, err := c.GC(ctx, UnusedFor(24*time.Hour, time.Now()))
	unlock()
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].Key != "github.com/NVIDIA/nvshmem.git" {
		t.Errorf("GC removed %+v", removed)
	}
	if _, err := os.Stat(c.GitDir("github.com/NVIDIA/nvshmem.git")); err == nil {
		t.Errorf("GC left the repository")
	}
	es, _ = c.List()
	if len(es) != 3 {
		t.Errorf("after GC: %+v", es)
	}
}

// TempOwner names the entry whose lock guards each temp TempDir and CreateTemp make, and
// nothing for other names; LockFile is the lock Lock takes.
func TestTempOwner(t *testing.T) {
	c, _ := Open(t.TempDir())
	gk := "github.com/deepseek-ai/DeepEP.git"
	d, err := c.TempDir(KindGit, gk)
	if err != nil {
		t.Fatal(err)
	}
	f, err := c.CreateTemp(KindArchive, sumA)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, tc := range []struct {
		name string
		kind Kind
		key  string
	}{{filepath.Base(d), KindGit, gk}, {filepath.Base(f.Name()), KindArchive, sumA}} {
		k, key, ok := TempOwner(tc.name)
		if !ok || k != tc.kind || key != tc.key {
			t.Errorf("TempOwner(%q) = %s %q %v, want %s %q", tc.name, k, key, ok, tc.kind, tc.key)
		}
	}
	for _, name := range []string{"build-0123456789ab-1", "gc-git-1", "git-..%2Fx#1", "work-abc"} {
		if k, key, ok := TempOwner(name); ok {
			t.Errorf("TempOwner(%q) = %s %q, want none", name, k, key)
		}
	}
	unlock, err := c.Lock(context.Background(), KindGit, gk)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(c.Dir(), "locks", LockFile(KindGit, gk))); err != nil {
		t.Errorf("Lock does not take the lock LockFile names: %v", err)
	}
}
