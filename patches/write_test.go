package patches

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParallelWriteFailure: with files written in several directories at
// once, two failing writes leave the tree as it was and the error is that of
// the first failing file in path order, as op by op.
func TestParallelWriteFailure(t *testing.T) {
	f := newFixture(t)
	baseFiles, headFiles := map[string][]byte{}, map[string][]byte{}
	for _, d := range []string{"a", "b", "c", "d", "e"} {
		for i := range 6 {
			p := fmt.Sprintf("%s/f%d.txt", d, i)
			baseFiles[p] = []byte(lines(p, 10))
			headFiles[p] = []byte(lines(p, 11))
		}
	}
	headFiles["new/dir/n.txt"] = []byte("n\n")
	base := f.commit("base", baseFiles)
	head := f.commit("head", headFiles)
	patch := string(f.diff(base, head))
	for i := range 10 {
		tree := f.checkout(base)
		// d/f4.txt and b/f3.txt cannot get their temporary file.
		for _, p := range []string{"d/.f4.txt.epbuild-tmp", "b/.f3.txt.epbuild-tmp"} {
			if err := os.Mkdir(filepath.Join(tree, filepath.FromSlash(p)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		before := snapshot(t, tree)
		_, err := apply(t, tree, fileSet(t, 0, "p", patch), Options{})
		if err == nil || !strings.HasPrefix(err.Error(), "apply set test: write b/f3.txt: ") || strings.Contains(err.Error(), "rollback failed") {
			t.Fatalf("run %d: want a clean failure writing b/f3.txt, got %v", i, err)
		}
		var pe *os.PathError
		if !errors.As(err, &pe) || pe.Path != "b/.f3.txt.epbuild-tmp" {
			t.Fatalf("run %d: the error names %v, want the path from the top of the tree", i, err)
		}
		sameTrees(t, "after failed write", before, snapshot(t, tree))
	}
}

// TestTemporaryNameInTheWay: a patch that makes a directory where the write
// of an earlier file (in path order) puts its temporary file applies as it
// would file by file.
func TestTemporaryNameInTheWay(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"d/keep.txt": []byte("keep\n"), "e/x.txt": []byte("x\n")})
	head := f.commit("head", map[string][]byte{
		"d/-x":                []byte("minus x\n"),
		"d/.-x.epbuild-tmp/y": []byte("y\n"),
		"e/x.txt":             []byte("x\nx\n"),
	})
	tree := f.checkout(base)
	if _, err := apply(t, tree, fileSet(t, 0, "p", string(f.diff(base, head))), Options{}); err != nil {
		t.Fatal(err)
	}
	sameTrees(t, "applied vs head", snapshot(t, f.checkout(head)), snapshot(t, tree))
}

// TestWriteFileSwap: a write by exchange leaves the same tree as a write by
// rename, and where the file read is no longer a regular file, it fails as
// the rename does, leaving that thing in place.
func TestWriteFileSwap(t *testing.T) {
	n := &node{kind: regular, data: "new\n", perm: 0o755}
	for _, swap := range []bool{false, true} {
		tree := t.TempDir()
		if err := os.WriteFile(filepath.Join(tree, "f.txt"), []byte("old\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(tree, "d.txt", "inside"), 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := os.OpenRoot(tree)
		if err != nil {
			t.Fatal(err)
		}
		var dir *os.File
		if swap {
			if dir, err = r.Open("."); err != nil {
				t.Fatal(err)
			}
		}
		if done, err := writeFile(r, ".", "f.txt", n, dir); !done || err != nil {
			t.Fatalf("swap %v: write f.txt: %v, %v", swap, done, err)
		}
		done, err := writeFile(r, ".", "d.txt", n, dir)
		if done || err == nil || err.Error() != "write d.txt: renameat .d.txt.epbuild-tmp d.txt: file exists" {
			t.Fatalf("swap %v: write over a directory: %v, %v", swap, done, err)
		}
		want := map[string]string{
			".":            "dir",
			"f.txt":        "file 111 " + sha256Hex([]byte("new\n")),
			"d.txt":        "dir",
			"d.txt/inside": "dir",
		}
		sameTrees(t, fmt.Sprintf("swap %v", swap), want, snapshot(t, tree))
		if dir != nil {
			dir.Close()
		}
		r.Close()
	}
}
