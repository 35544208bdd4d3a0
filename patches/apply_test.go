package patches

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func binaryData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	b[0] = 0 // git sees a NUL and calls it binary
	return b
}

// treeFixture commits a base tree and a head that creates, deletes, renames,
// changes modes and binary files, and returns the fixture and both commits.
func treeFixture(t *testing.T) (*fixture, string, string) {
	f := newFixture(t)
	bin := binaryData(1, 8192)
	base := f.commit("base", map[string][]byte{
		"README":             []byte(lines("readme", 30)),
		"src/a.c":            []byte(lines("a", 200)),
		"src/old_name.c":     []byte(lines("renamed", 40)),
		"src/gone/only.c":    []byte(lines("gone", 10)),
		"tools/run.sh*":      []byte("#!/bin/sh\necho run\n"),
		"tools/plain.sh":     []byte("#!/bin/sh\necho plain\n"),
		"data/blob.bin":      bin,
		"data/dropped.bin":   binaryData(2, 300),
		"noeol.txt":          []byte("one\ntwo\nthree"),
		"src/deep/er/keep.c": []byte(lines("keep", 5)),
	})
	a := lines("a", 200)
	a = strings.Replace(a, "a 10\n", "a ten\n", 1)
	a = strings.Replace(a, "a 100\n", "a 100\ninserted\n", 1)
	a = strings.Replace(a, "a 190\n", "", 1)
	renamed := strings.Replace(lines("renamed", 40), "renamed 20\n", "renamed twenty\n", 1)
	bin2 := append([]byte(nil), bin...)
	copy(bin2[4000:], "changed bytes in the middle")
	head := f.commit("head", map[string][]byte{
		"src/a.c":           []byte(a),
		"src/old_name.c":    nil,
		"src/new_name.c":    []byte(renamed),
		"src/gone/only.c":   nil,
		"src/fresh/new.c":   []byte(lines("fresh", 7)),
		"tools/run.sh":      []byte("#!/bin/sh\necho run\n"),
		"tools/plain.sh*":   []byte("#!/bin/sh\necho plain\n"),
		"data/blob.bin":     bin2,
		"data/dropped.bin":  nil,
		"data/created.bin":  binaryData(3, 500),
		"noeol.txt":         []byte("one\n2\nthree"),
		"src/empty_new.txt": []byte{},
	})
	return f, base, head
}

// TestApplyMatchesGitApply: create, delete (with its directory), rename with
// changes, mode changes both ways, binary delta/create/delete, a file without a
// final newline: the engine's tree equals git apply's and the head commit's.
func TestApplyMatchesGitApply(t *testing.T) {
	f, base, head := treeFixture(t)
	patch := f.diff(base, head)
	for _, want := range []string{"rename from", "new mode 100755", "new mode 100644", "GIT binary patch", "deleted file mode", "No newline"} {
		if !strings.Contains(string(patch), want) {
			t.Fatalf("fixture diff lacks %q; the test would prove less than it says", want)
		}
	}

	ours := f.checkout(base)
	res, err := apply(t, ours, fileSet(t, 0, "all", string(patch)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	theirs := f.checkout(base)
	gitApply(t, theirs, patch)

	sameTrees(t, "engine vs git apply", snapshot(t, theirs), snapshot(t, ours))
	sameTrees(t, "engine vs head", snapshot(t, f.checkout(head)), snapshot(t, ours))

	if !res.Written || len(res.Patches) != 1 || res.Patches[0].Status != StatusApplied {
		t.Fatalf("result %+v", res)
	}
	ops := map[string]Op{}
	for _, fr := range res.Patches[0].Files {
		ops[fr.Path] = fr.Op
	}
	want := map[string]Op{
		"src/a.c": OpModify, "src/new_name.c": OpRename, "src/gone/only.c": OpDelete, "src/fresh/new.c": OpCreate,
		"tools/run.sh": OpMode, "tools/plain.sh": OpMode, "data/blob.bin": OpModify, "data/created.bin": OpCreate,
		"data/dropped.bin": OpDelete, "noeol.txt": OpModify, "src/empty_new.txt": OpCreate,
	}
	for p, op := range want {
		if ops[p] != op {
			t.Errorf("%s: op %q, want %q", p, ops[p], op)
		}
	}
	if res.Patches[0].Digest != sha256Hex(patch) {
		t.Errorf("digest %s is not the sha256 of the patch", res.Patches[0].Digest)
	}
}

// offsetFixture: a patch made against 100 lines, and a tree where `shift`
// lines were added (>0) or removed (<0) at the top.
func offsetFixture(t *testing.T, shift int) (string, string) {
	f := newFixture(t)
	orig := lines("line", 100)
	base := f.commit("base", map[string][]byte{"f.txt": []byte(orig)})
	head := f.commit("head", map[string][]byte{"f.txt": []byte(strings.Replace(orig, "line 50\n", "line fifty\n", 1))})
	patch := string(f.diff(base, head))
	tree := t.TempDir()
	content := orig
	if shift > 0 {
		content = lines("extra", shift) + orig
	} else {
		content = strings.SplitAfterN(orig, "\n", -shift+1)[-shift]
	}
	if err := os.WriteFile(filepath.Join(tree, "f.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return tree, patch
}

// TestOffsetSearch: a moved hunk conflicts when strict, applies within the
// bound (set's or the option's) reporting its offset, and conflicts beyond it.
func TestOffsetSearch(t *testing.T) {
	three := 3
	two := 2
	cases := []struct {
		name      string
		shift     int
		setOffset int
		opt       *int
		wantOff   int // 0: expect a conflict
	}{
		{"strict", 3, 0, nil, 0},
		{"set bound", 3, 3, nil, 3},
		{"option bound", 3, 0, &three, 3},
		{"backwards", -2, 3, nil, -2},
		{"beyond bound", 3, 0, &two, 0},
		{"option narrows set", 3, 5, &two, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tree, patch := offsetFixture(t, c.shift)
			before := snapshot(t, tree)
			res, err := apply(t, tree, fileSet(t, c.setOffset, "p", patch), Options{MaxOffset: c.opt})
			if c.wantOff == 0 {
				var ce *ConflictError
				if !errors.As(err, &ce) {
					t.Fatalf("want a conflict, got %v", err)
				}
				if ce.Hunk != 1 || ce.Line != 47 || ce.File != "f.txt" || ce.Patch != "p" {
					t.Fatalf("conflict %+v", ce)
				}
				sameTrees(t, "after conflict", before, snapshot(t, tree))
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			pr := res.Patches[0]
			h := pr.Files[0].Hunks[0]
			if pr.Status != StatusAppliedOffset || h.Offset != c.wantOff || h.Line != 47+c.wantOff || h.Index != 1 || !pr.Moved() {
				t.Fatalf("status %s hunk %+v, want offset %d", pr.Status, h, c.wantOff)
			}
			if want := fmt.Sprintf("hunk 1 applied at line %d, offset %+d", 47+c.wantOff, c.wantOff); h.String() != want {
				t.Errorf("hunk says %q, want %q", h, want)
			}
			got, _ := os.ReadFile(filepath.Join(tree, "f.txt"))
			if !strings.Contains(string(got), "line fifty\nline 51\n") || strings.Contains(string(got), "line 50\n") {
				t.Fatalf("change not applied where expected:\n%s", got)
			}
			// git apply (unbounded offset) puts it in the same place.
			ref, _ := offsetFixture(t, c.shift)
			gitApply(t, ref, []byte(patch))
			sameTrees(t, "engine vs git apply", snapshot(t, ref), snapshot(t, tree))
		})
	}
}

// TestAlreadyApplied: a second application is detected by its clean reverse,
// fails by default, and is skipped with AllowApplied without writing.
func TestAlreadyApplied(t *testing.T) {
	f, base, head := treeFixture(t)
	set := fileSet(t, 0, "all", string(f.diff(base, head)))
	tree := f.checkout(base)
	if _, err := apply(t, tree, set, Options{}); err != nil {
		t.Fatal(err)
	}
	after := snapshot(t, tree)

	res, err := apply(t, tree, set, Options{})
	var ae *AlreadyAppliedError
	if !errors.As(err, &ae) || ae.Patch != "all" {
		t.Fatalf("want already applied, got %v", err)
	}
	if !strings.Contains(err.Error(), "patch all: already applied") {
		t.Fatalf("message %q", err)
	}
	if res.Patches[0].Status != StatusAlreadyApplied || res.Written {
		t.Fatalf("result %+v", res)
	}
	sameTrees(t, "after refusal", after, snapshot(t, tree))

	res, err = apply(t, tree, set, Options{AllowApplied: true})
	if err != nil || res.Patches[0].Status != StatusAlreadyApplied || res.Written {
		t.Fatalf("AllowApplied: %+v, %v", res, err)
	}
	sameTrees(t, "after skip", after, snapshot(t, tree))
}

// TestPartlyAppliedIsConflict: a tree holding half of a patch is neither
// "applied" nor "already applied".
func TestPartlyAppliedIsConflict(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"a.txt": []byte(lines("a", 20)), "b.txt": []byte(lines("b", 20))})
	head := f.commit("head", map[string][]byte{
		"a.txt": []byte(strings.Replace(lines("a", 20), "a 5\n", "A5\n", 1)),
		"b.txt": []byte(strings.Replace(lines("b", 20), "b 5\n", "B5\n", 1)),
	})
	half := f.commit("half", map[string][]byte{"a.txt": []byte(lines("a", 20))})
	tree := f.checkout(half) // a.txt original, b.txt changed
	_, err := apply(t, tree, fileSet(t, 0, "p", string(f.diff(base, head))), Options{AllowApplied: true})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.File != "b.txt" {
		t.Fatalf("want a conflict on b.txt, got %v", err)
	}
}

// TestAllOrNothing: the second patch of a set conflicts, so the first one's
// changes (a modification, a created directory) are not written.
func TestAllOrNothing(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"a.txt": []byte(lines("a", 30)), "b.txt": []byte(lines("b", 30))})
	one := f.commit("one", map[string][]byte{
		"a.txt":       []byte(strings.Replace(lines("a", 30), "a 7\n", "a seven\n", 1)),
		"new/dir/x.c": []byte("x\n"),
	})
	two := f.commit("two", map[string][]byte{"b.txt": []byte(strings.Replace(lines("b", 30), "b 12\n", "b twelve\n", 1))})
	set := fileSet(t, 0, "first", string(f.diff(base, one)), "second", string(f.diff(one, two)))

	tree := f.checkout(base)
	if err := os.WriteFile(filepath.Join(tree, "b.txt"), []byte(strings.Replace(lines("b", 30), "b 13\n", "b thirteen\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, tree)
	res, err := apply(t, tree, set, Options{})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("want a conflict, got %v", err)
	}
	want := `patch second: b.txt: hunk 1 at line 9: context does not match: line 13: expected "b 13", found "b thirteen"`
	if err.Error() != want {
		t.Fatalf("message\n got %s\nwant %s", err, want)
	}
	if ce.Patch != "second" || ce.Hunk != 1 || ce.Line != 9 || len(ce.Expected) != 7 || ce.Found[4] != "b thirteen\n" {
		t.Fatalf("conflict %+v", ce)
	}
	if !strings.Contains(ce.Context(), "found       13  b thirteen") {
		t.Fatalf("context:\n%s", ce.Context())
	}
	if res.Written || len(res.Patches) != 2 || res.Patches[0].Status != StatusApplied || res.Patches[1].Status != StatusConflict {
		t.Fatalf("result %+v", res)
	}
	sameTrees(t, "after conflict", before, snapshot(t, tree))
}

// TestWriteFailureRollsBack: a write that fails after others were done puts
// the tree back (files, created directories) byte for byte.
func TestWriteFailureRollsBack(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"b.txt": []byte(lines("b", 10)), "c.txt": []byte(lines("c", 10)), "old/x.txt": []byte("x\n")})
	head := f.commit("head", map[string][]byte{
		"a/new.txt": []byte("new\n"),
		"b.txt":     []byte(lines("b", 11)),
		"c.txt":     []byte(lines("c", 11)),
		"old/x.txt": nil,
	})
	tree := f.checkout(base)
	// A directory where the engine puts c.txt's temporary file: that write
	// fails after the removal of old/x.txt and the writes of a/new.txt and b.txt.
	if err := os.Mkdir(filepath.Join(tree, ".c.txt.epbuild-tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, tree)
	_, err := apply(t, tree, fileSet(t, 0, "p", string(f.diff(base, head))), Options{})
	if err == nil || !strings.Contains(err.Error(), "write c.txt") || strings.Contains(err.Error(), "rollback failed") {
		t.Fatalf("want a clean failure writing c.txt, got %v", err)
	}
	sameTrees(t, "after failed write", before, snapshot(t, tree))
}

// TestCheckOnly computes the whole set and writes nothing.
func TestCheckOnly(t *testing.T) {
	f, base, head := treeFixture(t)
	tree := f.checkout(base)
	before := snapshot(t, tree)
	res, err := apply(t, tree, fileSet(t, 0, "all", string(f.diff(base, head))), Options{CheckOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Written || res.Patches[0].Status != StatusChecked || len(res.Patches[0].Files) != 11 {
		t.Fatalf("result %+v", res)
	}
	sameTrees(t, "after check", before, snapshot(t, tree))
}

// TestMboxSeries: a format-patch series touching one file in two commits is
// split per message and applied in order. Parsed whole, go-gitdiff accepts it
// without error as one merged patch whose second change no longer fits.
func TestMboxSeries(t *testing.T) {
	f := newFixture(t)
	base := f.commit("base", map[string][]byte{"a.txt": []byte(lines("a", 20))})
	f.commit("one", map[string][]byte{"a.txt": []byte(strings.Replace(lines("a", 20), "a 5\n", "a five\n", 1))})
	f.commit("two", map[string][]byte{"a.txt": []byte(strings.Replace(lines("a", 20), "a 5\n", "a FIVE\n", 1)), "b.txt": []byte("b\n")})
	head := f.commit("three", map[string][]byte{"a.txt": []byte(strings.Replace(lines("a", 20), "a 5\n", "a 5!\n", 1))})
	mbox := git(t, f.dir, "format-patch", "--stdout", "--full-index", base+".."+head)

	if got := len(splitMessages([]byte(mbox))); got != 3 {
		t.Fatalf("split into %d messages, want 3", got)
	}
	tree := f.checkout(base)
	merged, err := parsePatch("merged", []byte(strings.ReplaceAll(mbox, "\nFrom ", "\nX-From ")))
	if err != nil {
		t.Fatalf("the unsplit series should parse without error: %v", err)
	}
	if len(merged) != 1 || len(merged[0]) != 4 {
		t.Fatalf("unsplit: %d messages, %d files", len(merged), len(merged[0]))
	}
	if _, err := apply(t, tree, fileSet(t, 0, "merged", strings.ReplaceAll(mbox, "\nFrom ", "\nX-From ")), Options{CheckOnly: true}); err == nil {
		t.Fatal("the merged series applied; splitting would not matter")
	}

	res, err := apply(t, tree, fileSet(t, 0, "series", mbox), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Patches[0].Files); n != 4 {
		t.Fatalf("%d file results, want 4", n)
	}
	sameTrees(t, "series vs head", snapshot(t, f.checkout(head)), snapshot(t, tree))
}

// TestSplitMessages: only lines "From <40-hex> " start a message; a "From "
// inside a message, a short id or text before the first message do not.
func TestSplitMessages(t *testing.T) {
	id := strings.Repeat("0123456789", 4)
	msg := func(s string) string {
		return "From " + id + " Mon Sep 17 00:00:00 2001\nSubject: " + s + "\n\nFrom the body, From " + id + "\n"
	}
	cases := []struct {
		in   string
		want int
	}{
		{"diff --git a/x b/x\n", 1},
		{msg("one"), 1},
		{msg("one") + msg("two") + msg("three"), 3},
		{"preamble\n" + msg("one") + msg("two"), 2},
		{msg("one") + "From " + id[:39] + " x\n" + msg("two"), 2},
		{msg("one") + "From " + strings.ToUpper(strings.Repeat("abcdef0123", 4)) + " x\n", 1},
	}
	for i, c := range cases {
		got := splitMessages([]byte(c.in))
		if len(got) != c.want || string(bytes.Join(got, nil)) != c.in {
			t.Errorf("case %d: %d messages (want %d), rejoined equal: %v", i, len(got), c.want, string(bytes.Join(got, nil)) == c.in)
		}
	}
}
