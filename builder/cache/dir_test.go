package cache

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeTree writes name → content files under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// listTree is every path under dir.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	_ = filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// EPBUILD_CACHE pointed at a home directory: nothing is made in it, and the error says
// which directory, why and the fix. A directory holding only the names everyone uses
// (tmp/, logs/) is no older epbuild's cache either.
func TestOpenRefusesADirectoryNotACache(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"home":         {"tmp/project/notes.txt": "mine", "logs/2023/app.log": "mine", ".bashrc": "mine"},
		"tmp and logs": {"tmp/project/notes.txt": "mine", "logs/2023/app.log": "mine"},
		"a stray file": {"stages/patch/x": "", "notes.txt": "mine"},
	} {
		t.Run(name, func(t *testing.T) {
			home := t.TempDir()
			writeTree(t, home, files)
			before := listTree(t, home)
			_, err := Open(home)
			var de *DirError
			if !errors.As(err, &de) || de.ExitCode() != 2 || !strings.Contains(err.Error(), home) ||
				!strings.Contains(err.Error(), MarkerName) || !strings.Contains(err.Error(), "EPBUILD_CACHE") {
				t.Fatalf("open %s: %v", home, err)
			}
			if _, _, err := Look(home); !errors.As(err, &de) {
				t.Errorf("look: %v", err)
			}
			if after := listTree(t, home); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("the directory changed:\n%v\n%v", before, after)
			}
		})
	}
}

// A new or empty directory becomes a marked cache; an older epbuild's (its layout and
// nothing else) is adopted; a marker of a newer format is refused.
func TestOpenMarksAndAdopts(t *testing.T) {
	for _, dir := range []string{filepath.Join(t.TempDir(), "new"), t.TempDir()} {
		c, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := Inspect(c.Dir()); st != Marked || err != nil {
			t.Errorf("%s: %v %v", dir, st, err)
		}
	}
	old := t.TempDir()
	writeTree(t, old, map[string]string{"stages/patch/" + sumA + "/.done": "", "locks/x.lock": "", "tmp/.keep": ""})
	if st, err := Inspect(old); st != Legacy || err != nil {
		t.Fatalf("an older epbuild's cache: %v %v", st, err)
	}
	if _, err := Open(old); err != nil {
		t.Fatal(err)
	}
	if st, _ := Inspect(old); st != Marked {
		t.Errorf("not adopted: %v", st)
	}
	newer := t.TempDir()
	writeTree(t, newer, map[string]string{MarkerName: "epbuild cache\nformat: 9\n"})
	if _, err := Open(newer); err == nil || !strings.Contains(err.Error(), "newer epbuild") {
		t.Errorf("a newer format: %v", err)
	}
}

// A run killed while it wrote a new cache's marker leaves only the marker's temporary
// file: the next run makes its cache there (found by killing demo runs at random); the
// same file beside a name that is not epbuild's is still refused.
func TestOpenAfterAKilledMarker(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{".tmp-" + MarkerName + "-581225867": "epbuild ca"})
	if st, err := Inspect(dir); st != Empty || err != nil {
		t.Fatalf("only a half-written marker: %v %v", st, err)
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := Inspect(dir); st != Marked || err != nil {
		t.Errorf("not made a cache: %v %v", st, err)
	}
	other := t.TempDir()
	writeTree(t, other, map[string]string{".tmp-" + MarkerName + "-1": "", "notes.txt": "mine"})
	if _, err := Open(other); err == nil || !strings.Contains(err.Error(), "notes.txt") {
		t.Errorf("a user's file beside a half-written marker: %v", err)
	}
}

// A lock file that is a FIFO, a link or another user's is refused at once, saying what
// it is; the wait never starts.
func TestOpenLockRefusesFIFOAndOthersFiles(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	dir := t.TempDir()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, lockDir, LockFile(KindArchive, sumA))
	if err := syscall.Mkfifo(p, 0o666); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.Lock(ctx, KindArchive, sumA)
	var le *LockError
	if !errors.As(err, &le) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}
	os.Remove(p)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err = c.Lock(ctx, KindArchive, sumA)
	if !errors.As(err, &le) || le.ExitCode() != 3 || !strings.Contains(err.Error(), "owned by") || !strings.Contains(err.Error(), "65534") && !strings.Contains(err.Error(), "nobody") {
		t.Errorf("another user's: %v", err)
	}
	os.Remove(p)
	if err := os.Symlink("/dev/zero", p); err != nil {
		t.Fatal(err)
	}
	if _, err = c.Lock(ctx, KindArchive, sumA); !errors.As(err, &le) || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("a link: %v", err)
	}
	if ctx.Err() != nil {
		t.Error("a lock waited")
	}
}

// With no home directory the cache is this user's private directory in the temporary
// directory; one another user made first is refused.
func TestDefaultDirWithoutHome(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("EPBUILD_CACHE", "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("HOME", "")
	d, err := DefaultDir()
	want := filepath.Join(tmp, fmt.Sprintf("epbuild-cache-%d", os.Getuid()))
	if err != nil || d != want {
		t.Fatalf("DefaultDir = %q, %v; want %s", d, err, want)
	}
	if st, err := os.Stat(d); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v %v", d, st.Mode(), err)
	}
	if _, err := Open(d); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() != 0 {
		return
	}
	if err := os.Chown(d, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	_, err = DefaultDir()
	var de *DirError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), d) || !strings.Contains(err.Error(), "not yours") {
		t.Errorf("another user's: %v", err)
	}
}

// bindReadOnly mounts dir read-only at a new directory (for root too), or skips.
func bindReadOnly(t *testing.T, dir string) string {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("a read-only bind mount needs root")
	}
	ro := t.TempDir()
	if out, err := exec.Command("mount", "--bind", "-o", "ro", dir, ro).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount read-only here: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", ro).Run() })
	if Writable(ro) {
		t.Skip("the bind mount is writable (an old mount without bind remount)")
	}
	return ro
}

// A cache on a read-only mount opens read-only and serves what it holds: a lock is no
// write, nor is a use; an empty one cannot be made and says why.
func TestReadOnlyCache(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	writeTree(t, dir, map[string]string{"archives/sha256/" + sumA: "x"})
	if err := c.Touch(KindArchive, sumA, "https://x/a.tgz"); err != nil {
		t.Fatal(err)
	}
	ro := bindReadOnly(t, dir)
	rc, err := Open(ro)
	if err != nil || !rc.ReadOnly() {
		t.Fatalf("open read-only: %v", err)
	}
	unlock, err := rc.Lock(context.Background(), KindArchive, sumA)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := rc.Touch(KindArchive, sumA, "https://x/a.tgz"); err != nil {
		t.Error(err)
	}
	if es, err := rc.List(); err != nil || len(es) != 1 {
		t.Errorf("list: %v %v", es, err)
	}
	empty := t.TempDir()
	ro2 := bindReadOnly(t, empty)
	_, err = Open(ro2)
	var de *DirError
	if !errors.As(err, &de) || de.ExitCode() != 3 || !strings.Contains(err.Error(), "read-only file system") || !strings.Contains(err.Error(), "--cache-from") {
		t.Errorf("an empty read-only directory: %v", err)
	}
}

// The helper process of TestOtherUserOnRootsCache: it opens the caches it is given.
func TestHelperOpenAsOtherUser(t *testing.T) {
	dirs := os.Getenv("EPBUILD_TEST_OPEN_AS")
	if dirs == "" {
		t.Skip("a helper process")
	}
	for _, d := range strings.Split(dirs, ":") {
		c, err := Open(d)
		if err != nil {
			fmt.Printf("%s: error: %v (exit %d)\n", d, err, exitCode(err))
			continue
		}
		fmt.Printf("%s: read-only %v\n", d, c.ReadOnly())
	}
}

func exitCode(err error) int {
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

// Another user on root's cache: a filled one serves read-only, an empty one says whose it
// is and the fix (exit 3) rather than a bare "permission denied".
func TestOtherUserOnRootsCache(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run a process as another user")
	}
	base, err := os.MkdirTemp("", "epbuild-other-user-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(base, "cache.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	filled, empty := filepath.Join(base, "filled"), filepath.Join(base, "empty")
	if _, err := Open(filled); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperOpenAsOtherUser$", "-test.v")
	cmd.Dir = base
	cmd.Env = []string{"EPBUILD_TEST_OPEN_AS=" + filled + ":" + empty, "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("cannot run a process as uid 65534 here: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, filled+": read-only true") {
		t.Errorf("the filled cache:\n%s", s)
	}
	if !strings.Contains(s, empty+": error: cache "+empty+": ") || !strings.Contains(s, "permission denied (it is user root's") ||
		!strings.Contains(s, "EPBUILD_CACHE") || !strings.Contains(s, "(exit 3)") {
		t.Errorf("the empty one:\n%s", s)
	}
}
