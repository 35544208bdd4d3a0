package source

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFetchGitBySHA(t *testing.T) {
	fx := newFixture(t, 0)
	srv := newGitServer(t, fx.root, 0)
	f := newTestFetcher(t, "", "")
	ctx := context.Background()
	url := srv.url(fx.name)

	if err := f.FetchGit(ctx, Git{URL: url, Commit: fx.c2}); err != nil {
		t.Fatal(err)
	}
	repo := f.Cache().GitDir(strings.TrimPrefix(srv.URL, "http://") + "/org/proj.git")
	if got := runGit(t, repo, "rev-parse", "refs/epbuild/"+fx.c2); got != fx.c2 {
		t.Fatalf("refs/epbuild/%s = %s", fx.c2, got)
	}
	// Exactly the pinned commit: its whole tree, not its parent.
	runGit(t, repo, "rev-list", "--objects", fx.c2)
	if got := runGit(t, repo, "rev-parse", "--is-shallow-repository"); got != "true" {
		t.Errorf("cache repository is not shallow")
	}
	if out, err := gitOut(repo, nil, "cat-file", "-e", fx.c1); err == nil {
		t.Errorf("parent commit %s was fetched too: %s", fx.c1, out)
	}
	if out, err := gitOut(repo, nil, "fsck", "--no-dangling"); err != nil {
		t.Errorf("git fsck on the cache repository: %v\n%s", err, out)
	}
	if n := srv.fetches.Load(); n != 1 {
		t.Errorf("%d object transfers, want 1", n)
	}
	assertNoTemp(t, f)

	// Warm: nothing is asked of the server.
	before := srv.requests.Load()
	if err := f.FetchGit(ctx, Git{URL: url + ".git", Commit: strings.ToUpper(fx.c2)}); err != nil {
		t.Fatal(err)
	}
	if n := srv.requests.Load() - before; n != 0 {
		t.Errorf("warm fetch made %d requests", n)
	}
	es, err := f.Cache().List()
	if err != nil || len(es) != 1 || es[0].URL != url || es[0].Size == 0 {
		t.Errorf("cache entries %+v, %v", es, err)
	}
}

func TestFetchGitRefs(t *testing.T) {
	fx := newFixture(t, 0)
	srv := newGitServer(t, fx.root, 0)
	f := newTestFetcher(t, "", "")
	ctx := context.Background()
	url := srv.url(fx.name)

	// An annotated tag is peeled to its commit, and kept (as the tag object) in the cache.
	if err := f.FetchGit(ctx, Git{URL: url, Commit: fx.c1, Ref: "v1"}); err != nil {
		t.Fatal(err)
	}
	repo := f.Cache().GitDir(strings.TrimPrefix(srv.URL, "http://") + "/org/proj.git")
	if got := runGit(t, repo, "rev-parse", "refs/tags/v1"); got != fx.tagObj {
		t.Errorf("cached refs/tags/v1 = %s, want the tag object %s", got, fx.tagObj)
	}
	if err := f.FetchGit(ctx, Git{URL: url, Commit: fx.c2, Ref: "release"}); err != nil {
		t.Fatal(err)
	}
	// A pull-style ref, as the pin's own ref and as an extra ref with its own commit.
	if err := f.FetchGit(ctx, Git{URL: url, Commit: fx.c4, Ref: "refs/pull/7/head"}); err != nil {
		t.Fatal(err)
	}
	if err := f.FetchGit(ctx, Git{URL: url, Commit: fx.c3, ExtraRefs: []string{"main", "refs/pull/7/head=" + fx.c4}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{fx.c1, fx.c2, fx.c3, fx.c4} {
		runGit(t, repo, "rev-list", "--objects", c)
	}

	for _, tc := range []struct {
		name string
		g    Git
		want []string
	}{
		{"tag elsewhere", Git{URL: url, Commit: fx.c2, Ref: "v1"}, []string{"refs/tags/v1", fx.c1, fx.c2}},
		{"branch elsewhere", Git{URL: url, Commit: fx.c3, Ref: "release"}, []string{"refs/heads/release", fx.c2, fx.c3}},
		{"extra ref elsewhere", Git{URL: url, Commit: fx.c3, ExtraRefs: []string{"refs/pull/7/head"}}, []string{"refs/pull/7/head", fx.c4, fx.c3}},
		{"no such ref", Git{URL: url, Commit: fx.c3, Ref: "v9"}, []string{`"v9" not found`, "refs/tags/v9", "refs/heads/v9"}},
		{"bad ref name", Git{URL: url, Commit: fx.c3, Ref: "../../x"}, []string{`ref "../../x" is not a valid git ref name: it holds ..`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFetcher(t, "", "")
			err := f.FetchGit(ctx, tc.g)
			if !errors.Is(err, ErrBadPin) {
				t.Fatalf("got %v, want a bad pin", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			assertNoRepo(t, f)
		})
	}
}

// assertNoRepo fails if the cache holds anything after a failure (lock files aside).
func assertNoRepo(t *testing.T, f *Fetcher) {
	t.Helper()
	es, err := f.Cache().List()
	if err != nil || len(es) > 0 {
		t.Errorf("cache holds %+v after a failure (%v)", es, err)
	}
	for _, d := range []string{"git", "meta"} {
		if des, _ := os.ReadDir(filepath.Join(f.Cache().Dir(), d)); len(des) > 0 {
			t.Errorf("cache %s/ holds %v after a failure", d, des)
		}
	}
	assertNoTemp(t, f)
}

func TestFetchGitBadInput(t *testing.T) {
	fx := newFixture(t, 0)
	srv := newGitServer(t, fx.root, 0)
	ctx := context.Background()
	url := srv.url(fx.name)

	t.Run("short SHA", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		err := f.FetchGit(ctx, Git{URL: url, Commit: fx.c2[:12]})
		if !errors.Is(err, ErrBadPin) || !strings.Contains(err.Error(), "full 40-hex commit is required") || !strings.Contains(err.Error(), fx.c2[:12]) {
			t.Fatalf("got %v", err)
		}
		if srv.requests.Load() != 0 {
			t.Errorf("a bad pin reached the network")
		}
		assertNoRepo(t, f)
	})
	t.Run("branch name as commit", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		err := f.FetchGit(ctx, Git{URL: url, Commit: "main"})
		if !errors.Is(err, ErrBadPin) || !strings.Contains(err.Error(), "not a commit id") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("tag object as commit", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		err := f.FetchGit(ctx, Git{URL: url, Commit: fx.tagObj})
		if !errors.Is(err, ErrBadPin) || !strings.Contains(err.Error(), "is a tag, not a commit") {
			t.Fatalf("got %v", err)
		}
		assertNoRepo(t, f)
	})
	t.Run("commit absent", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		absent := strings.Repeat("ab", 20)
		err := f.FetchGit(ctx, Git{URL: url, Commit: absent})
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), absent) || !strings.Contains(err.Error(), url) {
			t.Fatalf("got %v", err)
		}
		assertNoRepo(t, f)
	})
	t.Run("unreachable", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		u := closedPortURL(t, "/org/proj.git")
		err := f.FetchGit(ctx, Git{URL: u, Commit: fx.c2})
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), u) {
			t.Fatalf("got %v", err)
		}
		assertUnreachable(t, err)
		assertNoRepo(t, f)
	})
	t.Run("cancelled", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := f.FetchGit(cctx, Git{URL: url, Commit: fx.c2}); err == nil {
			t.Fatal("fetch with a cancelled context succeeded")
		}
		assertNoRepo(t, f)
	})
}

func TestFetchGitFileURL(t *testing.T) {
	fx := newFixture(t, 0)
	f := newTestFetcher(t, "", "")
	dest := filepath.Join(t.TempDir(), "ws")
	if err := f.CheckoutGit(context.Background(), Git{URL: "file://" + fx.bare, Commit: fx.c3, Ref: "main"}, dest); err != nil {
		t.Fatal(err)
	}
	if got := runGit(t, dest, "rev-parse", "HEAD"); got != fx.c3 {
		t.Errorf("HEAD = %s, want %s", got, fx.c3)
	}
	if _, err := os.Stat(filepath.Join(f.Cache().Dir(), "git", "file", filepath.FromSlash(strings.TrimPrefix(fx.bare, "/")))); err != nil {
		t.Errorf("file:// repository not cached under git/file/: %v", err)
	}
}
