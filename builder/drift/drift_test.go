package drift

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/recipes"
)

// git runs the git CLI with no user configuration; each commit gets the next
// day as its date, so history order and date order agree.
type git struct {
	t   *testing.T
	dir string
	day int
}

func (g *git) run(args ...string) string {
	g.t.Helper()
	date := fmt.Sprintf("2025-01-%02dT00:00:00Z", g.day+1)
	cmd := exec.Command("git", append([]string{"-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
	cmd.Dir = g.dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "HOME="+g.dir,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		g.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// commit writes files (nil removes), commits them and returns the commit id.
func (g *git) commit(msg string, files map[string]*string) string {
	g.t.Helper()
	for name, data := range files {
		p := filepath.Join(g.dir, filepath.FromSlash(name))
		if data == nil {
			g.run("rm", "-q", name)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			g.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(*data), 0o644); err != nil {
			g.t.Fatal(err)
		}
		g.run("add", name)
	}
	g.day++
	g.run("commit", "-q", "--allow-empty", "-m", msg)
	return g.run("rev-parse", "HEAD")
}

func numbered(prefix string, n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%s %d\n", prefix, i)
	}
	return b.String()
}

func ptr(s string) *string { return &s }

// history is an upstream repository whose file f.txt, patched by a set, moves
// within the file, is changed by the patch itself, conflicts, is renamed away
// and back, and is deleted; and a fork of it whose extra commit is a second set.
type history struct {
	mirror, recipe                            string
	base, other, shifted, applied, conflicted string
	renamed, back, deleted, head              string
	patch                                     string
	// src is the working repository the mirror was cloned from
	src string
}

func newHistory(t *testing.T) *history {
	h := &history{mirror: t.TempDir()}
	g := &git{t: t, dir: t.TempDir()}
	g.run("init", "-q")
	orig := numbered("line", 100)
	h.base = g.commit("base", map[string]*string{"f.txt": ptr(orig), "g.txt": ptr(numbered("g", 30))})
	g.run("tag", "v1")
	changed := strings.Replace(orig, "line 50\n", "line fifty\n", 1)
	g.run("checkout", "-q", "-b", "tmp")
	fix := g.commit("the fix", map[string]*string{"f.txt": ptr(changed)})
	h.patch = g.run("diff", "--full-index", h.base, fix) + "\n"
	g.run("checkout", "-q", "main")

	shift := numbered("top", 5)
	h.other = g.commit("unrelated", map[string]*string{"g.txt": ptr(strings.Replace(numbered("g", 30), "g 25\n", "g 25 changed\n", 1))})
	h.shifted = g.commit("five lines on top", map[string]*string{"f.txt": ptr(shift + orig)})
	g.run("tag", "-a", "-m", "release two", "v2")
	h.applied = g.commit("take the fix", map[string]*string{"f.txt": ptr(shift + changed)})
	h.conflicted = g.commit("rewrite line 51", map[string]*string{"f.txt": ptr(shift + strings.Replace(orig, "line 51\n", "line 51 rewritten\n", 1))})
	g.commit("restore", map[string]*string{"f.txt": ptr(shift + orig)})
	if err := os.Mkdir(filepath.Join(g.dir, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	g.run("mv", "f.txt", "src/f.txt")
	h.renamed = g.commit("move f.txt to src/", nil)
	g.run("mv", "src/f.txt", "f.txt")
	h.back = g.commit("move it back", nil)
	h.deleted = g.commit("delete it", map[string]*string{"f.txt": nil})
	h.head = g.commit("after", map[string]*string{"g.txt": ptr(strings.Replace(numbered("g", 30), "g 4\n", "g four\n", 1))})

	lib := filepath.Join(h.mirror, "example.invalid", "x", "lib.git")
	g.run("clone", "-q", "--bare", g.dir, lib)
	h.src = g.dir

	// The fork: the base and one commit of its own on g.txt.
	fg := &git{t: t, dir: t.TempDir(), day: 20}
	fg.run("clone", "-q", g.dir, ".")
	fg.run("checkout", "-q", "-b", "feature", h.base)
	forkHead := fg.commit("fork change", map[string]*string{"g.txt": ptr(strings.Replace(numbered("g", 30), "g 3\n", "g three\n", 1))})
	fork := filepath.Join(h.mirror, "example.invalid", "y", "fork.git")
	fg.run("clone", "-q", "--bare", fg.dir, fork)

	writeRecipe(t, h, h.base, forkHead)
	return h
}

// writeRecipe writes a recipe for the repository at commit base, with the set
// lib-fix (h.patch, a file beside the recipe) and, given forkHead, fork-change
// (the fork's diff base..forkHead).
func writeRecipe(t *testing.T, h *history, base, forkHead string) {
	dir := t.TempDir()
	sum := sha256.Sum256([]byte(h.patch))
	sets := "lib-fix"
	if forkHead != "" {
		sets += ", fork-change"
	}
	files := map[string]string{
		"lib.yaml": fmt.Sprintf(`name: lib
cluster: test
description: a library patched by its own sets
components:
  - name: lib
    source:
      git: {url: "https://example.invalid/x/lib", commit: %s}
    patches: [%s]
`, base, sets),
		"patches/lib-fix/set.yaml": fmt.Sprintf(`name: lib-fix
description: line 50 of f.txt
component: lib
patches:
  - name: fix
    file: fix.patch
    sha256: %s
`, hex.EncodeToString(sum[:])),
		"patches/lib-fix/fix.patch": h.patch,
		"patches/fork-change/set.yaml": fmt.Sprintf(`name: fork-change
description: a commit of another repository
component: lib
patches:
  - name: fork
    upstream-diff: {repo: "https://example.invalid/y/fork", base: %s, head: %s}
`, base, forkHead),
	}
	if forkHead == "" {
		delete(files, "patches/fork-change/set.yaml")
	}
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h.recipe = filepath.Join(dir, "lib.yaml")
}

func (h *history) drift(t *testing.T, opts Options) *Report {
	t.Helper()
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	plan, err := res.Resolve(h.recipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := stage.NewSources(c, h.mirror, log.New(io.Discard), source.ProgressLines)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := Run(context.Background(), plan, src, opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestDriftHistory: each state is reported at the commit that causes it: the
// fix applies at its base, at an offset once lines move above it, is found
// already applied, conflicts where its context changed, finds its file gone
// (naming where a file of that name went) when it is renamed and when it is
// deleted, and applies again when it comes back. A set computed from another
// repository's commit is tried on the same commits.
func TestDriftHistory(t *testing.T) {
	h := newHistory(t)
	rep := h.drift(t, Options{})
	if len(rep.Tables) != 1 || len(rep.Skipped) != 0 {
		t.Fatalf("report %+v", rep)
	}
	tab := rep.Tables[0]
	if tab.Pinned != h.base || len(tab.Sets) != 2 || tab.Sets[0].Name != "lib-fix" || tab.Sets[0].Origin != filepath.Join(filepath.Dir(h.recipe), "patches", "lib-fix") {
		t.Fatalf("table %+v", tab)
	}
	want := []struct {
		commit string
		fix    string
		fork   string
	}{
		{h.base, "clean", "clean"},
		{h.other, "clean", "clean"},
		{h.shifted, "offset 5", "clean"},
		{h.applied, "already applied", "clean"},
		{h.conflicted, "conflict f.txt:47", "clean"},
		{"", "offset 5", "clean"}, // restored
		{h.renamed, "file gone f.txt (same name: src/f.txt)", "clean"},
		{h.back, "offset 5", "clean"},
		{h.deleted, "file gone f.txt", "clean"},
		{h.head, "file gone f.txt", "conflict g.txt:1"},
	}
	if len(tab.Rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(tab.Rows), len(want), tab.Rows)
	}
	for i, w := range want {
		r := tab.Rows[i]
		if (w.commit != "" && r.Commit != w.commit) || r.Cells[0].String() != w.fix || r.Cells[1].String() != w.fork {
			t.Errorf("row %d %.7s %q: %s | %s, want %.7s: %s | %s", i, r.Commit, r.Subject, r.Cells[0], r.Cells[1], w.commit, w.fix, w.fork)
		}
	}
	if c := tab.Rows[4].Cells[0]; c.State != Conflict || c.Hunk != 1 || c.Line != 47 {
		t.Errorf("conflict cell %+v", c)
	}
	if r := tab.Rows[0]; len(r.Tags) != 1 || r.Tags[0] != "v1" || r.Date.Format("2006-01-02") != "2025-01-02" {
		t.Errorf("first row tags %v date %s", r.Tags, r.Date)
	}
	var got []string
	for _, b := range tab.Breaks {
		got = append(got, fmt.Sprintf("%s@%.7s after %.7s: %s", b.Set, b.At, b.After, b.Cell))
	}
	wantBreaks := []string{
		fmt.Sprintf("lib-fix@%.7s after %.7s: conflict f.txt:47", h.conflicted, h.applied),
		fmt.Sprintf("lib-fix@%.7s after %.7s: file gone f.txt (same name: src/f.txt)", h.renamed, tab.Rows[5].Commit),
		fmt.Sprintf("lib-fix@%.7s after %.7s: file gone f.txt", h.deleted, h.back),
		fmt.Sprintf("fork-change@%.7s after %.7s: conflict g.txt:1", h.head, h.deleted),
	}
	if strings.Join(got, "\n") != strings.Join(wantBreaks, "\n") {
		t.Errorf("breaks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantBreaks, "\n"))
	}
}

// TestDriftRanges: --commits A..B starts at A, --tags keeps tagged commits,
// --every keeps every Nth and the last; bad ranges are bad input.
func TestDriftRanges(t *testing.T) {
	h := newHistory(t)
	rows := func(opts Options) []string {
		rep := h.drift(t, opts)
		var out []string
		for _, r := range rep.Tables[0].Rows {
			out = append(out, r.Commit)
		}
		return out
	}
	if got := rows(Options{Commits: h.shifted + ".." + h.renamed}); len(got) != 5 || got[0] != h.shifted || got[4] != h.renamed {
		t.Errorf("A..B: %d rows %v", len(got), got)
	}
	// a short id the user typed, as git prints them
	if got := rows(Options{Commits: h.shifted[:7] + ".." + strings.ToUpper(h.renamed[:9])}); len(got) != 5 || got[0] != h.shifted || got[4] != h.renamed {
		t.Errorf("short A..B: %d rows %v", len(got), got)
	}
	if got := rows(Options{Commits: "v2.."}); len(got) != 8 || got[0] != h.shifted || got[7] != h.head {
		t.Errorf("v2..: %v", got)
	}
	if got := rows(Options{Commits: h.other}); len(got) != 2 || got[0] != h.base {
		t.Errorf("a single revision: %v", got)
	}
	if got := rows(Options{Tags: true}); len(got) != 2 || got[0] != h.base || got[1] != h.shifted {
		t.Errorf("--tags: %v", got)
	}
	if got := rows(Options{Every: 4}); len(got) != 4 || got[0] != h.base || got[1] != h.conflicted || got[2] != h.deleted || got[3] != h.head {
		t.Errorf("--every 4: %v", got)
	}

	res, _ := plan.NewResolver(recipes.NewLibrary())
	plan, err := res.Resolve(h.recipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := cache.Open(t.TempDir())
	src, _ := stage.NewSources(c, h.mirror, log.New(io.Discard), source.ProgressLines)
	for _, opts := range []Options{{Commits: "v1...v2"}, {Commits: "nope..v2"}, {Commits: "0000000.."}, {Commits: h.base[:6] + ".."}, {Component: "other"}, {Repos: map[string]string{"other": "https://example.invalid/x/lib"}}} {
		_, err := Run(context.Background(), plan, src, opts)
		var bad *BadInput
		if err == nil || !errors.As(err, &bad) {
			t.Errorf("%+v: want bad input, got %v", opts, err)
		}
	}
	// without a mirror there is no history
	nomirror, _ := stage.NewSources(c, "", log.New(io.Discard), source.ProgressLines)
	if _, err := Run(context.Background(), plan, nomirror, Options{}); err == nil || !strings.Contains(err.Error(), "give a mirror") {
		t.Errorf("no mirror: %v", err)
	}
}

// driftErr runs drift over h and returns its error.
func (h *history) driftErr(t *testing.T, opts Options) error {
	t.Helper()
	res, _ := plan.NewResolver(recipes.NewLibrary())
	plan, err := res.Resolve(h.recipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := cache.Open(t.TempDir())
	src, _ := stage.NewSources(c, h.mirror, log.New(io.Discard), source.ProgressLines)
	_, err = Run(context.Background(), plan, src, opts)
	return err
}

// A mirror whose history between the pin and HEAD is cut (a parent object gone,
// a shallow clone without the pin) or whose HEAD does not descend from the pin
// (an orphan branch) is not "clean up to HEAD": drift says it cannot tell, or
// that HEAD is not a descendant, and fails.
func TestDriftHistoryIncomplete(t *testing.T) {
	h := newHistory(t)
	lib := filepath.Join(h.mirror, "example.invalid", "x", "lib.git")
	bare := &git{t: t, dir: lib, day: 25}

	// an orphan HEAD: HEAD's tree, no parent
	orphan := bare.run("commit-tree", "-m", "orphan", h.head+"^{tree}")
	bare.run("update-ref", "refs/heads/main", orphan)
	err := h.driftErr(t, Options{})
	var bad *BadInput
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "does not descend from the pin") {
		t.Errorf("orphan HEAD: %v", err)
	}
	bare.run("update-ref", "refs/heads/main", h.head)
	if err := h.driftErr(t, Options{}); err != nil {
		t.Fatalf("HEAD restored: %v", err)
	}

	// a parent between the pin and HEAD gone from the object store
	obj := filepath.Join(lib, "objects", h.conflicted[:2], h.conflicted[2:])
	if err := os.Remove(obj); err != nil {
		t.Fatalf("the fixture's commits are not loose objects: %v", err)
	}
	err = h.driftErr(t, Options{})
	var inc *IncompleteHistory
	if !errors.As(err, &inc) || inc.ExitCode() != 3 || inc.Missing != h.conflicted ||
		!strings.Contains(err.Error(), "cannot tell: history between "+h.base+" and HEAD is incomplete (shallow or missing parent "+h.conflicted[:12]+")") {
		t.Errorf("a missing parent: %v", err)
	}
	// a range above the cut is whole
	if err := h.driftErr(t, Options{Commits: h.renamed + ".." + h.head}); err != nil {
		t.Errorf("a range above the cut: %v", err)
	}

	// a shallow clone that lacks the pin
	shallow := &git{t: t, dir: t.TempDir()}
	if err := os.RemoveAll(lib); err != nil {
		t.Fatal(err)
	}
	shallow.run("clone", "-q", "--bare", "--depth", "2", "file://"+h.src, lib)
	if err := h.driftErr(t, Options{}); !errors.As(err, &inc) || !strings.Contains(err.Error(), "cannot tell") {
		t.Errorf("a shallow mirror: %v", err)
	}
}

func TestMatchPrefix(t *testing.T) {
	ids := []string{"abcdef0123456789abcdef0123456789abcdef01", "abcdef0999999999999999999999999999999999", "1234567000000000000000000000000000000000"}
	if id, err := matchPrefix(ids, "1234567"); err != nil || id != ids[2] {
		t.Errorf("%s %v", id, err)
	}
	_, err := matchPrefix(ids, "ABCDEF0")
	var bad *BadInput
	if !errors.As(err, &bad) || !strings.Contains(err.Error(), "ambiguous") || !strings.Contains(err.Error(), ids[0]) || !strings.Contains(err.Error(), ids[1]) {
		t.Errorf("ambiguous: %v", err)
	}
}

// TestDriftFileTooLarge: a commit whose patched file is larger than MaxFileBytes gets a
// failed cell naming the file and its size, read from the object's header: the blob
// (64 MiB of zeros, a few KiB in the mirror) is not read, so drift's allocations stay
// far below its size. The other set, on another file, is tried as usual.
func TestDriftFileTooLarge(t *testing.T) {
	h := newHistory(t)
	lib := filepath.Join(h.mirror, "example.invalid", "x", "lib.git")
	const size = 64 << 20
	gitIn := func(stdin io.Reader, env []string, args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = lib
		cmd.Env = append(os.Environ(), append([]string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull,
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
			"GIT_AUTHOR_DATE=2025-02-01T00:00:00Z", "GIT_COMMITTER_DATE=2025-02-01T00:00:00Z"}, env...)...)
		cmd.Stdin = stdin
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	blob := gitIn(io.LimitReader(zeros{}, size), nil, "hash-object", "-w", "--stdin")
	index := []string{"GIT_INDEX_FILE=" + filepath.Join(t.TempDir(), "index")}
	gitIn(nil, index, "read-tree", h.head)
	gitIn(nil, index, "update-index", "--add", "--cacheinfo", "100644,"+blob+",f.txt")
	tree := gitIn(nil, index, "write-tree")
	big := gitIn(nil, nil, "commit-tree", "-p", h.head, "-m", "a huge f.txt", tree)
	gitIn(nil, nil, "update-ref", "refs/heads/main", big)

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rep := h.drift(t, Options{Commits: h.deleted + "..", MaxFileBytes: 1 << 20})
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > size/4 {
		t.Errorf("drift allocated %d bytes over a %d-byte file it should not read", n, size)
	}
	rows := rep.Tables[0].Rows
	last := rows[len(rows)-1]
	want := fmt.Sprintf("failed: file too large f.txt (%d bytes)", size)
	if last.Commit != big || last.Cells[0].String() != want || last.Cells[0].File != "f.txt" || last.Cells[1].State != Conflict {
		t.Errorf("the last row %.7s: %s | %s, want %.7s: %s | conflict", last.Commit, last.Cells[0], last.Cells[1], big, want)
	}
}

// zeros reads as an endless run of zero bytes.
type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
