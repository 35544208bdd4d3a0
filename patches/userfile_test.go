package patches

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// loadBounded runs LoadFor, failing the test instead of hanging when the load blocks
// (the bug: a FIFO opened for reading waits for a writer forever).
func loadBounded(t *testing.T, local Local, names ...string) (*Catalog, error) {
	t.Helper()
	type result struct {
		c   *Catalog
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := LoadFor(local, names...)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		return r.c, r.err
	case <-time.After(time.Minute):
		t.Fatal("loading the set blocked")
		return nil, nil
	}
}

// TestLocalSetSpecialFiles: a patch that is a FIFO or a symlink to /dev/zero, and a
// set.yaml that is a FIFO, are refused at once (bad input) naming the file, what it is
// and the fix; nothing blocks or reads forever.
func TestLocalSetSpecialFiles(t *testing.T) {
	cases := []struct {
		name string
		make func(t *testing.T, setDir, patch string)
		want func(setDir, patch string) string
	}{
		{"fifo patch", func(t *testing.T, _, patch string) {
			mustRemove(t, patch)
			if err := syscall.Mkfifo(patch, 0o644); err != nil {
				t.Fatal(err)
			}
		}, func(setDir, patch string) string {
			return filepath.Join(setDir, "set.yaml") + ":6:11: patches[0].file: " + patch + " is a named pipe (FIFO), not a regular file: a patch set's files are read whole, so put the file itself there"
		}},
		{"patch linked to /dev/zero", func(t *testing.T, _, patch string) {
			mustRemove(t, patch)
			if err := os.Symlink("/dev/zero", patch); err != nil {
				t.Fatal(err)
			}
		}, func(setDir, patch string) string {
			return filepath.Join(setDir, "set.yaml") + ":6:11: patches[0].file: " + patch + " is a symlink to a character device, not a regular file"
		}},
		{"fifo set.yaml", func(t *testing.T, setDir, _ string) {
			y := filepath.Join(setDir, "set.yaml")
			mustRemove(t, y)
			if err := syscall.Mkfifo(y, 0o644); err != nil {
				t.Fatal(err)
			}
		}, func(setDir, _ string) string {
			return filepath.Join(setDir, "set.yaml") + " is a named pipe (FIFO), not a regular file"
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			patch := writeLocalSet(t, dir, "site-fix", "deepep", localPatch)
			setDir := filepath.Join(dir, "site-fix")
			c.make(t, setDir, patch)
			_, err := loadBounded(t, Local{Dirs: []string{dir}}, "site-fix")
			if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), c.want(setDir, patch)) {
				t.Fatalf("got %v\nwant %s", err, c.want(setDir, patch))
			}
		})
	}
}

func mustRemove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

// TestLocalSetFileTwice: a set naming one file twice is refused at the second,
// naming the first and its line: it would be read, hashed and applied twice.
func TestLocalSetFileTwice(t *testing.T) {
	dir := t.TempDir()
	writeLocalSet(t, dir, "site-fix", "deepep", localPatch)
	y := filepath.Join(dir, "site-fix", "set.yaml")
	b, err := os.ReadFile(y)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256Hex([]byte(localPatch))
	body := string(b) + "  - name: again\n    file: ./0001-fix.patch\n    sha256: " + sum + "\n"
	if err := os.WriteFile(y, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadFor(Local{Dirs: []string{dir}}, "site-fix")
	want := y + `:9:11: patches[1].file: "./0001-fix.patch" is also the file of patches[0] (line 6): a file is one patch of a set; remove one of them`
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

// TestLocalSetTooLarge: a patch over the limit is refused before it is read, at load
// and, grown after loading, at apply time: a clean error, not an allocation of its size.
func TestLocalSetTooLarge(t *testing.T) {
	dir := t.TempDir()
	patch := writeLocalSet(t, dir, "site-fix", "deepep", localPatch+strings.Repeat(" \n", 1024))
	_, err := LoadFor(Local{Dirs: []string{dir}, Limits: Limits{PatchBytes: 1024}}, "site-fix")
	want := patch + " is 2117 bytes; the limit is 1 KiB (patches.Limits.PatchBytes): split the patch"
	if exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}

	patch = writeLocalSet(t, dir, "site-fix", "deepep", localPatch)
	c, err := LoadFor(Local{Dirs: []string{dir}, Limits: Limits{PatchBytes: 1024}}, "site-fix")
	if err != nil {
		t.Fatal(err)
	}
	// 1 GiB, sparse: read whole it would be allocated
	if err := os.Truncate(patch, 1<<30); err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Apply(context.Background(), tree, mustGet(t, c, "site-fix"), nil, Options{})
	want = "patch fix: " + patch + " is 1024 MiB; the limit is 1 KiB"
	var tl *TooLargeError
	if !errors.As(err, &tl) || !strings.Contains(err.Error(), want) {
		t.Fatalf("apply: got %v\nwant %s", err, want)
	}
}

// TestOwnFileReadCancelled: reading a patch of the set stops when the context is done.
func TestOwnFileReadCancelled(t *testing.T) {
	dir := t.TempDir()
	writeLocalSet(t, dir, "site-fix", "deepep", localPatch)
	c, err := LoadFor(Local{Dirs: []string{dir}}, "site-fix")
	if err != nil {
		t.Fatal(err)
	}
	s := mustGet(t, c, "site-fix")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r, done, err := s.openOwnFile(ctx, s.Patches[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, context.Canceled) {
		t.Errorf("read after cancel: %v", err)
	}
	if err := done(); !errors.Is(err, context.Canceled) {
		t.Errorf("done after cancel: %v", err)
	}
}

// TestSetNumberName: an unquoted number where the set holds a string is refused at its
// line and column with the quoted value to write (0001 would be the patch "1").
func TestSetNumberName(t *testing.T) {
	dir := t.TempDir()
	writeLocalSet(t, dir, "site-fix", "deepep", localPatch)
	y := filepath.Join(dir, "site-fix", "set.yaml")
	b, err := os.ReadFile(y)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(y, []byte(strings.Replace(string(b), "- name: fix", "- name: 0001", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadFor(Local{Dirs: []string{dir}}, "site-fix")
	want := y + `:5:11: patches[0].name: 0001 is a number in YAML (read as 1), and this value is a string: quote it: "0001"`
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}

// TestSetWithoutEffectsWarns: a set stating no effects loads, with a warning naming its
// set.yaml and the fix.
func TestSetWithoutEffectsWarns(t *testing.T) {
	dir := t.TempDir()
	writeLocalSet(t, dir, "site-fix", "deepep", localPatch)
	c, err := LoadFor(Local{Dirs: []string{dir}}, "site-fix")
	if err != nil {
		t.Fatal(err)
	}
	w := mustGet(t, c, "site-fix").Warnings()
	want := filepath.Join(dir, "site-fix", "set.yaml") + " states no effects"
	if len(w) != 1 || !strings.HasPrefix(w[0], want) || !strings.Contains(w[0], "add effects (see docs/patch-sets.md") {
		t.Fatalf("warnings %q, want %s...", w, want)
	}
	all, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range all.Names() {
		if w := mustGet(t, all, n).Warnings(); len(w) != 0 {
			t.Errorf("shipped set %s: %q", n, w)
		}
	}
}

func mkfifo(p string) error { return syscall.Mkfifo(p, 0o644) }
