package source

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/cache"
)

func TestCheckoutGit(t *testing.T) {
	fx := newFixture(t, 0)
	srv := newGitServer(t, fx.root, 0)
	f := newTestFetcher(t, "", "")
	ctx := context.Background()
	g := Git{URL: srv.url(fx.name), Commit: fx.c3}
	dest := filepath.Join(t.TempDir(), "ws", "proj")

	if err := f.CheckoutGit(ctx, g, dest); err != nil {
		t.Fatal(err)
	}
	if got := runGit(t, dest, "rev-parse", "HEAD"); got != fx.c3 {
		t.Errorf("git rev-parse HEAD = %s, want %s", got, fx.c3)
	}
	if got := runGit(t, dest, "rev-parse", "--short", "HEAD"); !strings.HasPrefix(fx.c3, got) || len(got) < 7 {
		t.Errorf("git rev-parse --short HEAD = %q", got)
	}
	if out, err := gitOut(dest, nil, "symbolic-ref", "-q", "HEAD"); err == nil {
		t.Errorf("HEAD is not detached: %s", out)
	}
	if got := runGit(t, dest, "status", "--porcelain", "--ignored", "--untracked-files=all"); got != "" {
		t.Errorf("git status is not clean:\n%s", got)
	}
	// The index matches the commit's tree entry for entry (modes, symlinks, blobs).
	if a, b := runGit(t, dest, "ls-files", "-s"), runGit(t, fx.bare, "ls-tree", "-r", "--format=%(objectmode) %(objectname) 0\t%(path)", fx.c3); a != b {
		t.Errorf("index:\n%s\ntree:\n%s", a, b)
	}
	if out, err := gitOut(dest, nil, "diff", "--quiet", "HEAD"); err != nil {
		t.Errorf("work tree differs from HEAD: %s", out)
	}
	if fi, err := os.Stat(filepath.Join(dest, "tools", "build.sh")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("tools/build.sh not executable: %v %v", fi, err)
	}
	if target, err := os.Readlink(filepath.Join(dest, "main-link.c")); err != nil || target != "src/main.c" {
		t.Errorf("main-link.c: %q, %v", target, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "noeol.txt")); string(b) != "no newline at the end" {
		t.Errorf("noeol.txt = %q", b)
	}
	if out, err := gitOut(dest, nil, "fsck", "--no-dangling"); err != nil {
		t.Errorf("git fsck in the workspace: %v\n%s", err, out)
	}
	// Nothing but dest appeared next to it.
	if des, _ := os.ReadDir(filepath.Dir(dest)); len(des) != 1 {
		t.Errorf("left next to the workspace: %v", des)
	}

	// The workspace owns its objects: it survives the cache's removal.
	if _, err := f.Cache().GC(ctx, func(cache.Entry) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if out, err := gitOut(dest, nil, "rev-list", "--objects", "HEAD"); err != nil {
		t.Errorf("workspace objects gone with the cache: %v\n%s", err, out)
	}

	if err := f.CheckoutGit(ctx, g, dest); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("checkout over an existing workspace: %v", err)
	}
}

func TestCheckoutGitFailureLeavesNothing(t *testing.T) {
	fx := newFixture(t, 0)
	srv := newGitServer(t, fx.root, 0)
	f := newTestFetcher(t, "", "")
	parent := t.TempDir()
	err := f.CheckoutGit(context.Background(), Git{URL: srv.url(fx.name), Commit: strings.Repeat("cd", 20)}, filepath.Join(parent, "ws"))
	if !errors.Is(err, ErrFetch) {
		t.Fatalf("got %v", err)
	}
	if des, _ := os.ReadDir(parent); len(des) != 0 {
		t.Errorf("failed checkout left %v", des)
	}
}

func TestDiffAndFile(t *testing.T) {
	fx := newFixture(t, 3000)
	srv := newGitServer(t, fx.root, 0)
	f := newTestFetcher(t, "", "")
	ctx := context.Background()
	url := srv.url(fx.name)

	for _, tc := range []struct{ base, head, ref string }{
		{fx.c1, fx.c3, ""}, // binary files added (bulk/)
		{fx.c2, fx.c4, "refs/pull/7/head"},
		{fx.c4, fx.c1, ""},
		{fx.c3, fx.c1, ""}, // binary files deleted
	} {
		got, err := f.Diff(ctx, DiffSpec{Repo: url, Base: tc.base, Head: tc.head, Ref: tc.ref})
		if err != nil {
			t.Fatal(err)
		}
		// Byte for byte what git prints, except the zlib bytes of binary literals.
		want := runGit(t, fx.bare, "diff", "--full-index", "--no-renames", "--binary", tc.base, tc.head) + "\n"
		if g, w := maskBinary(string(got)), maskBinary(want); g != w {
			t.Errorf("diff %s..%s differs from git diff:\n--- got\n%s\n--- want\n%s", tc.base[:7], tc.head[:7], g, w)
		}
		// And git applies it, binary files included, to give the head's tree.
		ws := filepath.Join(t.TempDir(), "ws")
		if err := f.CheckoutGit(ctx, Git{URL: url, Commit: tc.base}, ws); err != nil {
			t.Fatal(err)
		}
		if out, err := gitOut(ws, got, "apply", "--index", "-"); err != nil {
			t.Fatalf("git apply %s..%s: %v\n%s", tc.base[:7], tc.head[:7], err, out)
		}
		if a, b := runGit(t, ws, "write-tree"), runGit(t, fx.bare, "rev-parse", tc.head+"^{tree}"); a != b {
			t.Errorf("%s..%s applied gives tree %s, head has %s", tc.base[:7], tc.head[:7], a, b)
		}
	}
	if _, err := f.Diff(ctx, DiffSpec{Repo: url, Base: fx.c2, Head: fx.c3, Ref: "refs/pull/7/head"}); !errors.Is(err, ErrBadPin) {
		t.Errorf("diff with a ref that points elsewhere: %v", err)
	}

	b, err := f.File(ctx, FileSpec{Repo: url, Commit: fx.c3, Path: "deep_ep/buffer.py"})
	if err != nil || !bytes.Contains(b, []byte("def _setup(self)")) {
		t.Errorf("File: %q, %v", b, err)
	}
	if _, err := f.File(ctx, FileSpec{Repo: url, Commit: fx.c3, Path: "src/util.c"}); !errors.Is(err, ErrBadPin) || !strings.Contains(err.Error(), "src/util.c") {
		t.Errorf("File of a deleted path: %v", err)
	}
}

// maskBinary replaces the payload lines of binary literals (zlib output differs between
// implementations) with a marker.
func maskBinary(d string) string {
	var out []string
	in := false
	for _, l := range strings.Split(d, "\n") {
		switch {
		case strings.HasPrefix(l, "literal ") || strings.HasPrefix(l, "delta "):
			in = true
			out = append(out, "literal")
		case in && l != "":
		case in:
			in = false
			out = append(out, "<payload>", "")
		default:
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
