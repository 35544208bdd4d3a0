package source

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCacheObjectsNotCopiedAgain: from a mirror, a checkout writes its tree as it copies;
// a diff to a pull request's head afterwards copies only the objects the head adds, in one
// fetch; a checkout of another commit reads the blobs the cache has from it, and the
// workspaces are the commits' trees, clean for git.
func TestCacheObjectsNotCopiedAgain(t *testing.T) {
	fx := newFixture(t, 0)
	mirror := t.TempDir()
	url := "https://example.com/org/proj"
	mrepo := filepath.Join(mirror, "example.com", "org", "proj.git")
	runGit(t, "", "clone", "-q", "--mirror", fx.bare, mrepo)
	f := newTestFetcher(t, "", mirror)
	ctx := context.Background()
	cacheRepo := f.Cache().GitDir("example.com/org/proj.git")
	packs := func() []string {
		p, err := filepath.Glob(filepath.Join(cacheRepo, "objects", "pack", "pack-*.pack"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	checkout := func(commit string) {
		t.Helper()
		dest := filepath.Join(t.TempDir(), "ws")
		if err := f.CheckoutGit(ctx, Git{URL: url, Commit: commit}, dest); err != nil {
			t.Fatal(err)
		}
		if got := runGit(t, dest, "status", "--porcelain"); got != "" {
			t.Errorf("%s: git status:\n%s", commit[:7], got)
		}
		if a, b := runGit(t, dest, "write-tree"), runGit(t, mrepo, "rev-parse", commit+"^{tree}"); a != b {
			t.Errorf("%s: tree %s, want %s", commit[:7], a, b)
		}
	}

	checkout(fx.c2)
	before := packs()
	if _, err := f.Diff(ctx, DiffSpec{Repo: url, Base: fx.c2, Head: fx.c4, Ref: "refs/pull/7/head"}); err != nil {
		t.Fatal(err)
	}
	var added []string
	for _, p := range packs() {
		if !strings.Contains(strings.Join(before, " "), p) {
			added = append(added, p)
		}
	}
	if len(added) != 1 {
		t.Fatalf("the diff added %d packs, want 1", len(added))
	}
	// The commit and what it changes (src/main.c, its tree, the root tree), and the base
	// commit again, which the fetch pins with it: nothing of the base's tree.
	want := len(strings.Fields(runGit(t, mrepo, "rev-list", "--objects", "--no-object-names", fx.c4, "^"+fx.c2))) + 1
	idx, err := os.ReadFile(strings.TrimSuffix(added[0], ".pack") + ".idx")
	if err != nil {
		t.Fatal(err)
	}
	out, err := gitOut("", idx, "show-index")
	if err != nil {
		t.Fatalf("git show-index: %v\n%s", err, out)
	}
	if got := len(strings.Split(strings.TrimSpace(out), "\n")); got != want {
		t.Errorf("the diff copied %d objects, want %d", got, want)
	}

	checkout(fx.c3)
	checkout(fx.c4)
	if n := len(packs()); n != 3 {
		t.Errorf("%d packs in the cache, want 3 (c4 was fetched already)", n)
	}
	if _, err := os.Stat(filepath.Join(cacheRepo, "refs", "epbuild", fx.c4)); err != nil {
		t.Errorf("pin ref of the pull request's head: %v", err)
	}
}
