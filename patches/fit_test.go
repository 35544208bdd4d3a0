package patches

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConflictSaysWhatFits: when strict context fails, the conflict says
// where each hunk would fit, the offset that places every hunk of the file
// (as git apply, which searches without bound, places them), and shows three
// lines of expected and found text; with that offset the set applies.
func TestConflictSaysWhatFits(t *testing.T) {
	f := newFixture(t)
	orig := lines("line", 200)
	base := f.commit("base", map[string][]byte{"f.txt": []byte(orig)})
	changed := strings.Replace(orig, "line 103\n", "line one-o-three\n", 1)
	changed = strings.Replace(changed, "line 150\n", "line one-fifty\n", 1)
	head := f.commit("head", map[string][]byte{"f.txt": []byte(changed)})
	patch := string(f.diff(base, head))

	// The tree lost 9 lines before the first hunk and 2 more before the
	// second: the hunks sit 9 and 11 lines higher, as PR #466 does on v1.2.1.
	tree := t.TempDir()
	kept := strings.SplitAfter(orig, "\n")
	var b strings.Builder
	for i, l := range kept {
		n := i + 1
		if (n >= 20 && n < 29) || n == 120 || n == 121 {
			continue
		}
		b.WriteString(l)
	}
	if err := os.WriteFile(filepath.Join(tree, "f.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, tree)
	_, err := apply(t, tree, fileSet(t, 0, "p", patch), Options{})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("want a conflict, got %v", err)
	}
	if ce.Hunk != 1 || ce.Line != 100 || ce.FitLine != 91 || ce.FitOffset != -9 || ce.NeedOffset != 11 {
		t.Fatalf("conflict hunk %d line %d fits at %d offset %d, needs %d; want hunk 1 line 100 fits at 91 offset -9, needs 11",
			ce.Hunk, ce.Line, ce.FitLine, ce.FitOffset, ce.NeedOffset)
	}
	msg := err.Error()
	for _, want := range []string{
		"hunk 1 fits at line 91 (offset -9): pass `--max-offset 11`",
		"or pin a base where it applies cleanly",
		"expected   100  line 100",
		"expected   102  line 102",
		"found      100  line 109",
		"found      102  line 111",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "expected   103") {
		t.Errorf("message shows more than three lines of context:\n%s", msg)
	}
	sameTrees(t, "after conflict", before, snapshot(t, tree))

	// Ten lines are not enough, eleven are, and place the hunks where git apply does.
	ten, eleven := 10, 11
	if _, err := apply(t, tree, fileSet(t, 0, "p", patch), Options{MaxOffset: &ten, CheckOnly: true}); !errors.As(err, &ce) || ce.Hunk != 2 || ce.NeedOffset != 11 {
		t.Fatalf("max offset 10: want hunk 2 to conflict needing 11, got %v", err)
	}
	res, err := apply(t, tree, fileSet(t, 0, "p", patch), Options{MaxOffset: &eleven})
	if err != nil {
		t.Fatal(err)
	}
	if h := res.Patches[0].Files[0].Hunks; len(h) != 2 || h[0].Offset != -9 || h[1].Offset != -11 {
		t.Fatalf("hunks %+v, want offsets -9 and -11", h)
	}
	ref := t.TempDir()
	if err := os.WriteFile(filepath.Join(ref, "f.txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	gitApply(t, ref, []byte(patch))
	sameTrees(t, "engine vs git apply", snapshot(t, ref), snapshot(t, tree))
}

// TestConflictFitsNowhere: a hunk whose context is nowhere in the file gets no
// suggestion, and a hunk that fits while a later one does not says so.
func TestConflictFitsNowhere(t *testing.T) {
	f := newFixture(t)
	orig := lines("line", 60)
	base := f.commit("base", map[string][]byte{"f.txt": []byte(orig)})
	changed := strings.Replace(strings.Replace(orig, "line 10\n", "line ten\n", 1), "line 50\n", "line fifty\n", 1)
	head := f.commit("head", map[string][]byte{"f.txt": []byte(changed)})
	patch := string(f.diff(base, head))

	tree := t.TempDir()
	// Two lines gone at the top (hunk 1 fits at -2), line 51 rewritten (hunk 2 fits nowhere).
	content := strings.Replace(strings.SplitAfterN(orig, "\n", 3)[2], "line 51\n", "line 51 changed\n", 1)
	if err := os.WriteFile(filepath.Join(tree, "f.txt"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := apply(t, tree, fileSet(t, 0, "p", patch), Options{})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Hunk != 1 || ce.FitOffset != -2 || ce.NeedOffset != 0 {
		t.Fatalf("want hunk 1 fitting at -2 with no offset for the file, got %+v", err)
	}
	if !strings.Contains(err.Error(), "but not every hunk of f.txt fits anywhere") {
		t.Errorf("message: %s", err)
	}
	two := 2
	_, err = apply(t, tree, fileSet(t, 0, "p", patch), Options{MaxOffset: &two})
	if !errors.As(err, &ce) || ce.Hunk != 2 || ce.FitLine != 0 || ce.Suggestion() != "" {
		t.Fatalf("want hunk 2 fitting nowhere, got %+v", err)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("a hunk that fits nowhere has a one-line message: %s", err)
	}
}
