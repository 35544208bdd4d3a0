package source

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/compat"
)

// A full clone in a mirror decides ancestry both ways; the cache, which a fetch fills with
// the pinned commit alone, decides only what it reaches and says why it cannot.
func TestHistoryFromMirrorAndCache(t *testing.T) {
	work := t.TempDir()
	runGit(t, work, "init", "-q", "-b", "main")
	var ids []string
	for _, s := range []string{"a", "b", "c"} {
		writeFile(t, filepath.Join(work, "f"), s+"\n", 0o644)
		runGit(t, work, "add", "f")
		runGit(t, work, "commit", "-q", "-m", s)
		ids = append(ids, runGit(t, work, "rev-parse", "HEAD"))
	}
	a, b, c := ids[0], ids[1], ids[2]
	runGit(t, work, "tag", "-a", "v1.2.3-1", "-m", "release", c)
	runGit(t, work, "tag", "light", c)
	runGit(t, work, "tag", "old", a)
	mirror := t.TempDir()
	runGit(t, work, "clone", "-q", "--bare", work, filepath.Join(mirror, "example.invalid", "lab", "deep.git"))
	const url = "https://example.invalid/lab/deep"
	ctx := context.Background()

	h := History{Mirror: mirror}
	for _, tc := range []struct {
		anc, commit string
		want        bool
	}{{a, c, true}, {b, c, true}, {c, c, true}, {c, a, false}, {b, a, false}} {
		got, err := h.IsAncestor(ctx, url, tc.anc, tc.commit)
		if err != nil || got != tc.want {
			t.Errorf("mirror: is %s an ancestor of %s: %v %v, want %v", tc.anc[:7], tc.commit[:7], got, err, tc.want)
		}
	}
	if tags := h.TagsAt(url, c); !slices.Equal(slices.Sorted(slices.Values(tags)), []string{"light", "v1.2.3-1"}) {
		t.Errorf("tags at c: %v", tags)
	}
	unknown := strings.Repeat("ab", 20)
	if _, err := h.IsAncestor(ctx, url, a, unknown); !errors.Is(err, compat.ErrUnknownCommit) || !strings.Contains(err.Error(), "is not there") {
		t.Errorf("a commit the mirror lacks: %v", err)
	}
	if _, err := h.IsAncestor(ctx, "https://example.invalid/other", a, c); !errors.Is(err, compat.ErrUnknownCommit) || !strings.Contains(err.Error(), "no mirror or cache holds") {
		t.Errorf("a repository nobody holds: %v", err)
	}

	// the cache after a fetch from that mirror: c without its parents
	f := newTestFetcher(t, "", mirror)
	if err := f.FetchGit(ctx, Git{URL: url, Commit: c}); err != nil {
		t.Fatal(err)
	}
	cached := History{Cache: f.Cache()}
	if ok, err := cached.IsAncestor(ctx, url, c, c); err != nil || !ok {
		t.Errorf("cache: c is c: %v %v", ok, err)
	}
	if _, err := cached.IsAncestor(ctx, url, a, c); !errors.Is(err, compat.ErrUnknownCommit) || !strings.Contains(err.Error(), "shallow") {
		t.Errorf("cache: a before the shallow edge: %v", err)
	}
	// the fetcher's own history asks the mirror first
	if ok, err := f.History().IsAncestor(ctx, url, a, c); err != nil || !ok {
		t.Errorf("fetcher: %v %v", ok, err)
	}
	os.RemoveAll(filepath.Join(mirror, "example.invalid"))
	if _, err := f.History().IsAncestor(ctx, url, a, c); !errors.Is(err, compat.ErrUnknownCommit) {
		t.Errorf("mirror gone, shallow cache: %v", err)
	}
}
