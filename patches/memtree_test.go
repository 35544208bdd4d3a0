package patches

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// dirTree is a Tree read from a directory on disk, recording what was asked.
type dirTree struct {
	root string
	mu   sync.Mutex
	read []string
}

func (d *dirTree) Entry(p string) (Entry, error) {
	d.mu.Lock()
	d.read = append(d.read, p)
	d.mu.Unlock()
	full := filepath.Join(d.root, filepath.FromSlash(p))
	fi, err := os.Lstat(full)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Entry{Kind: EntryNone}, nil
	case err != nil:
		return Entry{}, err
	case fi.Mode()&fs.ModeSymlink != 0:
		return Entry{Kind: EntrySymlink}, nil
	case fi.IsDir():
		return Entry{Kind: EntryDir}, nil
	}
	data, err := os.ReadFile(full)
	return Entry{Kind: EntryFile, Data: data, Exec: fi.Mode()&0o100 != 0}, err
}

// TestCheckInMemory: a set tried on a tree in memory reports what Apply with
// CheckOnly reports on the same tree on disk (applied, offset, conflict, already
// applied, refused symlink), and reads only the paths the patch names.
func TestCheckInMemory(t *testing.T) {
	f, base, head := treeFixture(t)
	set := fileSet(t, 0, "all", string(f.diff(base, head)))
	ps, err := Prepare(context.Background(), set, nil)
	if err != nil {
		t.Fatal(err)
	}
	same := func(what, dir string, opts Options) {
		t.Helper()
		opts.CheckOnly = true
		want, wantErr := apply(t, dir, set, opts)
		tree := &dirTree{root: dir}
		got, gotErr := ps.Check(tree, opts)
		if !reflect.DeepEqual(want, got) || (wantErr == nil) != (gotErr == nil) || (wantErr != nil && wantErr.Error() != gotErr.Error()) {
			t.Fatalf("%s: in memory\n %+v %v\non disk\n %+v %v", what, got, gotErr, want, wantErr)
		}
		for _, p := range tree.read {
			if strings.HasPrefix(p, "README") || strings.HasPrefix(p, "src/deep") {
				t.Errorf("%s: read %s, which the patch does not name", what, p)
			}
		}
	}
	same("base", f.checkout(base), Options{})
	same("head", f.checkout(head), Options{})
	same("head, allowed", f.checkout(head), Options{AllowApplied: true})

	moved := f.checkout(base)
	a := filepath.Join(moved, "src", "a.c")
	b, _ := os.ReadFile(a)
	if err := os.WriteFile(a, append([]byte(lines("top", 4)), b...), 0o644); err != nil {
		t.Fatal(err)
	}
	same("moved, strict", moved, Options{})
	four := 4
	same("moved, offset 4", moved, Options{MaxOffset: &four})

	linked := f.checkout(base)
	if err := os.Remove(filepath.Join(linked, "noeol.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("README", filepath.Join(linked, "noeol.txt")); err != nil {
		t.Fatal(err)
	}
	same("symlink", linked, Options{})

	gone := f.checkout(base)
	if err := os.RemoveAll(filepath.Join(gone, "src")); err != nil {
		t.Fatal(err)
	}
	same("directory gone", gone, Options{})
}

// TestPreparedSetHoldsItsPatches: Prepare reads and parses each patch once, so a set tried
// on many trees never reads its files again; Apply reads each file as it applies it.
func TestPreparedSetHoldsItsPatches(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"a.txt": []byte(lines("a", 20))})
	head := f.commit("one", map[string][]byte{"a.txt": []byte(strings.Replace(lines("a", 20), "a 5\n", "a five\n", 1))})
	dir := t.TempDir()
	writeSet(t, dir, []string{writeTemp(t, f.diff(base, head))})
	c, err := LoadFS(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.Get("bench")
	ps, err := Prepare(context.Background(), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "bench", "0001.patch")
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	for commit, want := range map[string]Status{base: StatusChecked, head: StatusAlreadyApplied} {
		res, err := ps.Check(&dirTree{root: f.checkout(commit)}, Options{AllowApplied: true})
		if err != nil || len(res.Patches) != 1 || res.Patches[0].Status != want {
			t.Fatalf("check at %s after the file went: %+v, %v; want %s", commit, res, err, want)
		}
	}
	if _, err := Apply(context.Background(), f.checkout(base), s, nil, Options{}); err == nil || !strings.Contains(err.Error(), "0001.patch") {
		t.Fatalf("apply after the file went: %v, want an error naming 0001.patch", err)
	}
}

// TestCheckSeries: a second set written against the first one's result is checked on
// the tree the first leaves, as the real apply in order sees it; tried on the pristine
// tree alone it would conflict (the bug epbuild patch --check had).
func TestCheckSeries(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"a.txt": []byte(lines("line", 12))})
	// the first set adds a line near the top; the second was made on that result
	mid := f.commit("first", map[string][]byte{"a.txt": []byte("added\n" + lines("line", 12))})
	end := f.commit("second", map[string][]byte{"a.txt": []byte("added\n" + strings.Replace(lines("line", 12), "line 9\n", "line 9 changed\n", 1))})
	first := fileSet(t, 0, "first", string(f.diff(base, mid)))
	second := fileSet(t, 0, "second", string(f.diff(mid, end)))
	dir := f.checkout(base)
	before := snapshot(t, dir)

	res, failed, err := CheckSeries(context.Background(), dir, []*Set{first, second}, nil, Options{})
	if err != nil || failed != -1 || len(res) != 2 {
		t.Fatalf("series: %v (failed %d, %d results)", err, failed, len(res))
	}
	for _, r := range res {
		if r.Patches[0].Status != StatusChecked || r.Patches[0].Moved() {
			t.Errorf("%s: %+v", r.Set, r.Patches[0])
		}
	}
	sameTrees(t, "check writes nothing", before, snapshot(t, dir))
	// the second alone on the pristine tree does not apply at offset 0: the series is what
	// makes it check
	if _, err := apply(t, dir, second, Options{CheckOnly: true}); err == nil {
		t.Fatal("the second set applies to the pristine tree too: the test tells nothing")
	}
	// a series whose second set does not fit names that set
	if _, failed, err := CheckSeries(context.Background(), dir, []*Set{second, first}, nil, Options{}); err == nil || failed != 0 {
		t.Errorf("reversed series: failed %d, %v", failed, err)
	}
}
