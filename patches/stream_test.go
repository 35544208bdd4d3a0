package patches

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// splitMessages is the messages the chunker cuts data into.
func splitMessages(data []byte) [][]byte {
	c := newChunker(bytes.NewReader(data))
	var out [][]byte
	for {
		p, more, err := c.piece()
		if err != nil || !more {
			return out
		}
		for len(out) <= p.msg {
			out = append(out, []byte{})
		}
		out[p.msg] = append(out[p.msg], p.text...)
	}
}

// TestPiecesParseAsTheWhole: parsing a series piece by piece gives the files that parsing
// each whole message gives, and a parse error names the line of its message.
func TestPiecesParseAsTheWhole(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"a.txt": []byte(lines("a", 40)), "b.txt": []byte(lines("b", 40)), "c.txt": []byte(lines("c", 40))})
	f.commit("one", map[string][]byte{
		"a.txt": []byte(strings.Replace(lines("a", 40), "a 5\n", "a five\n", 1)),
		"b.txt": []byte(strings.Replace(lines("b", 40), "b 30\n", "b thirty\n", 1)),
		"d.txt": []byte("new\n"),
	})
	head := f.commit("two", map[string][]byte{"c.txt": nil, "a.txt": []byte(lines("a", 41))})
	mbox := git(t, f.dir, "format-patch", "--stdout", "--full-index", base+".."+head)

	got, err := parsePatch("series", []byte(mbox))
	if err != nil {
		t.Fatal(err)
	}
	msgs := splitMessages([]byte(mbox))
	if len(got) != 2 || len(msgs) != 2 {
		t.Fatalf("%d messages parsed, %d cut, want 2", len(got), len(msgs))
	}
	for i, m := range msgs {
		want, _, err := gitdiff.Parse(bytes.NewReader(m))
		if err != nil {
			t.Fatal(err)
		}
		if len(got[i]) != len(want) {
			t.Fatalf("message %d: %d files, want %d", i+1, len(got[i]), len(want))
		}
		for j := range want {
			if g, w := got[i][j].String(), want[j].String(); g != w {
				t.Errorf("message %d file %d:\n%s\nwant\n%s", i+1, j+1, g, w)
			}
		}
	}

	// A hunk that says it has one line more than it has, in the second file of the first
	// message: the error names the line of the message, inside that file's diff (parsed
	// whole, go-gitdiff would read on into the next file's header and complain of that).
	first := string(msgs[0])
	at := strings.Index(first, "diff --git a/b.txt")
	at += strings.Index(first[at:], "@@ -")
	end := at + strings.Index(first[at:], " @@")
	var o1, o2, n1, n2 int
	if _, err := fmt.Sscanf(first[at:end], "@@ -%d,%d +%d,%d", &o1, &o2, &n1, &n2); err != nil {
		t.Fatalf("hunk header %q: %v", first[at:end], err)
	}
	bad := first[:at] + fmt.Sprintf("@@ -%d,%d +%d,%d", o1, o2+1, n1, n2+1) + first[end:]
	lineOf := func(s string) int { return strings.Count(bad[:strings.Index(bad, s)], "\n") + 1 }
	_, err = parsePatch("bad", []byte(bad+string(msgs[1])))
	var n int
	if err == nil || !strings.Contains(err.Error(), "patch bad: parse message 1 of 2: gitdiff: line ") {
		t.Fatalf("got %v", err)
	}
	fmt.Sscanf(err.Error()[strings.Index(err.Error(), "gitdiff: line ")+len("gitdiff: line "):], "%d", &n)
	if n <= lineOf("diff --git a/b.txt") || n >= lineOf("diff --git a/d.txt") {
		t.Errorf("error at line %d, not in b.txt's diff (lines %d to %d): %v", n, lineOf("diff --git a/b.txt"), lineOf("diff --git a/d.txt")-1, err)
	}
}

// TestPatchFileHashedOnce: a patch file whose pin loading checked is not hashed again
// while it is unchanged, and is when it changed after loading, even with its size and
// mtime put back.
func TestPatchFileHashedOnce(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"a.txt": []byte(lines("a", 20))})
	head := f.commit("one", map[string][]byte{"a.txt": []byte(strings.Replace(lines("a", 20), "a 5\n", "a five\n", 1))})
	diff := f.diff(base, head)
	dir := t.TempDir()
	writeSet(t, dir, []string{writeTemp(t, diff)})
	c, err := LoadFS(os.DirFS(dir))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := c.Get("bench")
	if _, ok := s.checked["0001.patch"]; !ok {
		t.Fatal("loading did not record the checked pin")
	}
	if _, err := Apply(context.Background(), f.checkout(base), s, nil, Options{}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "bench", "0001.patch")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	changed := bytes.Replace(diff, []byte("+a five"), []byte("+a FIVE"), 1)
	if err := os.WriteFile(file, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	tree := f.checkout(base)
	before := snapshot(t, tree)
	_, err = Apply(context.Background(), tree, s, nil, Options{})
	var pe *PinError
	if !errors.As(err, &pe) || pe.Got != sha256Hex(changed) {
		t.Fatalf("changed patch file: %v, want a pin error", err)
	}
	sameTrees(t, "after the pin error", before, snapshot(t, tree))
}

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "p.patch")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestInputErrorBeforeConflict: a malformed patch after one that does not apply is what
// Apply reports, as when every patch was parsed before the first was applied; a conflict
// alone is reported with the results so far.
func TestInputErrorBeforeConflict(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"a.txt": []byte(lines("a", 20))})
	head := f.commit("one", map[string][]byte{"a.txt": []byte(strings.Replace(lines("a", 20), "a 5\n", "a five\n", 1))})
	conflicting := strings.ReplaceAll(string(f.diff(base, head)), " a 4\n", " a four\n")
	bad := "this is not a diff\n"
	res, err := apply(t, f.checkout(base), fileSet(t, 0, "a", conflicting, "b", bad), Options{})
	if res != nil || err == nil || err.Error() != "patch b: no file changes found (is it a diff?)" {
		t.Errorf("conflict then malformed: %+v, %v", res, err)
	}
	res, err = apply(t, f.checkout(base), fileSet(t, 0, "a", conflicting, "b", string(f.diff(base, head))), Options{})
	var ce *ConflictError
	if !errors.As(err, &ce) || res == nil || len(res.Patches) != 1 || res.Patches[0].Status != StatusConflict {
		t.Errorf("conflict: %+v, %v", res, err)
	}
}
