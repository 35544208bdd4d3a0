package archive

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSmallFilesWrittenInOrder: small files are written by the extraction's writers, and
// what later entries do to the same names still happens after them: a file given twice
// keeps its last content, a file replaced by a symlink is a symlink, a hard link to a
// small file holds its bytes, and every file has its mode and time.
func TestSmallFilesWrittenInOrder(t *testing.T) {
	var ents []tent
	for i := range 200 {
		ents = append(ents, withMode(file(fmt.Sprintf("d%d/f%03d", i%7, i), strings.Repeat(fmt.Sprint(i), 100+i)), 0o644|int64(i%2)*0o111))
	}
	ents = append(ents,
		file("d1/f001", "second"),
		symlink("d2/f002", "f009"),
		hardlink("d3/link", "d3/f003"),
		sized("big", asyncMax+1),
	)
	// right after the file they act on, while it is likely still being written
	for i := range 20 {
		p := fmt.Sprintf("r/f%02d", i)
		ents = append(ents, file(p, "first"), file(p, "again"), hardlink(p+".l", p), file(p+".s", "x"), symlink(p+".s", "f00"))
	}
	tmp := t.TempDir()
	art := filepath.Join(tmp, "a.tar")
	if err := os.WriteFile(art, craftTar(t, ents...), 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(tmp, "x")
	rep, err := ExtractFile(context.Background(), art, dest, ExtractOptions{Hash: true})
	if err != nil {
		t.Fatal(err)
	}
	diffEntries(t, "listing against the tree on disk", rep.Tree, hashTree(t, dest))
	for p, want := range map[string]string{"d1/f001": "second", "d3/link": strings.Repeat("3", 103), "d6/f006": strings.Repeat("6", 106)} {
		if b, err := os.ReadFile(filepath.Join(dest, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q (%v), want %q", p, b, err, want)
		}
	}
	for i := range 20 {
		p := filepath.Join(dest, fmt.Sprintf("r/f%02d", i))
		for _, q := range []string{p, p + ".l"} {
			if b, err := os.ReadFile(q); err != nil || string(b) != "again" {
				t.Errorf("%s: %q (%v), want again", q, b, err)
			}
		}
		if target, err := os.Readlink(p + ".s"); err != nil || target != "f00" {
			t.Errorf("%s.s: symlink to %q (%v), want f00", p, target, err)
		}
	}
	if target, err := os.Readlink(filepath.Join(dest, "d2/f002")); err != nil || target != "f009" {
		t.Errorf("d2/f002: symlink to %q (%v), want f009", target, err)
	}
	for _, p := range []string{"d0/f007", "d6/f006", "big"} {
		fi, err := os.Lstat(filepath.Join(dest, p))
		if err != nil || !fi.ModTime().Equal(fixedTime) {
			t.Errorf("%s: mtime %v (%v), want %v", p, fi.ModTime(), err, fixedTime)
		}
	}
	if fi, err := os.Stat(filepath.Join(dest, "d0/f007")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("d0/f007: mode %v (%v), want 0755", fi.Mode(), err)
	}
}

// TestSmallFileWriteFails: a small file the writers cannot create fails the extraction,
// which leaves nothing behind.
func TestSmallFileWriteFails(t *testing.T) {
	var ents []tent
	for i := range 50 {
		ents = append(ents, file(fmt.Sprintf("f%03d", i), "x"))
	}
	ents = append(ents, file(strings.Repeat("n", 300), "too long a name"))
	for i := range 50 {
		ents = append(ents, file(fmt.Sprintf("g%03d", i), "y"))
	}
	tmp := t.TempDir()
	art := filepath.Join(tmp, "a.tar")
	if err := os.WriteFile(art, craftTar(t, ents...), 0o644); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(tmp, "x")
	_, err := ExtractFile(context.Background(), art, dest, ExtractOptions{Hash: true})
	var xe *ExtractError
	if !errors.As(err, &xe) || xe.Entry != strings.Repeat("n", 300) || xe.Kind != nil {
		t.Fatalf("got %v, want the write of the long name to fail", err)
	}
	absent(t, dest)
}
