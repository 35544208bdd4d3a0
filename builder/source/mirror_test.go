package source

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteMirrorThenAirGapped writes a mirror from live servers, then forbids the network
// and builds the same workspaces from the mirror alone, with a fresh cache.
func TestWriteMirrorThenAirGapped(t *testing.T) {
	fx := newFixture(t, 0)
	gsrv := newGitServer(t, fx.root, 0)
	fsrv := newFileServer(t, 0)
	body := tarGz(t, "nvshmem_src", map[string]string{"README": "nvshmem\n"})
	aurl := fsrv.put("/compute/redist/nvshmem/3.2.5/source/nvshmem_src_3.2.5-1.tar.gz", body)
	url := gsrv.url(fx.name) + ".git"
	gits := []Git{
		{URL: url, Commit: fx.c1, Ref: "v1"},
		{URL: url, Commit: fx.c4, Ref: "refs/pull/7/head"},
		{URL: url, Commit: fx.c3, ExtraRefs: []string{"main"}},
	}
	archives := []Archive{{URL: aurl, SHA256: sha256hex(body), Strip: 1}}
	ctx := context.Background()

	mirror := t.TempDir()
	online := newTestFetcher(t, "", "")
	if err := online.WriteMirror(ctx, mirror, gits, archives); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimPrefix(gsrv.URL, "http://")
	mrepo := filepath.Join(mirror, host, "org", "proj.git")
	// The mirror is an ordinary (shallow) bare repository that git itself accepts.
	if out, err := gitOut(mrepo, nil, "fsck", "--no-dangling"); err != nil {
		t.Fatalf("git fsck on the mirror: %v\n%s", err, out)
	}
	if got := runGit(t, mrepo, "rev-parse", "refs/tags/v1", "refs/pull/7/head^{commit}", "refs/heads/main"); got != fx.tagObj+"\n"+fx.c4+"\n"+fx.c3 {
		t.Errorf("mirror refs:\n%s", got)
	}
	// Exactly what the sources need: c2, an ancestor nobody pinned, is not there.
	if _, err := gitOut(mrepo, nil, "cat-file", "-e", fx.c2); err == nil {
		t.Errorf("mirror holds the unpinned commit %s", fx.c2)
	}
	if b, err := os.ReadFile(filepath.Join(mirror, strings.TrimPrefix(fsrv.URL, "http://"), "compute/redist/nvshmem/3.2.5/source/nvshmem_src_3.2.5-1.tar.gz")); err != nil || !bytes.Equal(b, body) {
		t.Errorf("archive in the mirror: %v", err)
	}
	// Writing it again changes nothing and does not fail.
	if err := online.WriteMirror(ctx, mirror, gits, archives); err != nil {
		t.Fatal(err)
	}

	gsrv.forbid.Store(true)
	fsrv.forbid.Store(true)
	offline := newTestFetcher(t, "", mirror)
	for i, g := range gits {
		dest := filepath.Join(t.TempDir(), "ws")
		if err := offline.CheckoutGit(ctx, g, dest); err != nil {
			t.Fatalf("source %d: %v", i, err)
		}
		if got := runGit(t, dest, "rev-parse", "HEAD"); got != g.Commit {
			t.Errorf("HEAD %s, want %s", got, g.Commit)
		}
		if got := runGit(t, dest, "status", "--porcelain"); got != "" {
			t.Errorf("status not clean: %s", got)
		}
		// The same tree as the upstream commit, byte for byte.
		if a, b := runGit(t, dest, "write-tree"), runGit(t, fx.bare, "rev-parse", g.Commit+"^{tree}"); a != b {
			t.Errorf("tree %s, upstream %s", a, b)
		}
	}
	dest := filepath.Join(t.TempDir(), "nv")
	if err := offline.ExtractArchive(ctx, archives[0], dest); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "README")); string(b) != "nvshmem\n" {
		t.Errorf("README = %q", b)
	}
	d, err := offline.Diff(ctx, DiffSpec{Repo: url, Base: fx.c1, Head: fx.c3})
	if err != nil || !bytes.Contains(d, []byte("+line four")) {
		t.Errorf("diff from the mirror: %v\n%s", err, d)
	}
	if gsrv.requests.Load() == 0 {
		t.Errorf("the git server was never used online: the test proves nothing")
	}
}

func TestMirrorMissing(t *testing.T) {
	fx := newFixture(t, 0)
	mirror := t.TempDir()
	ctx := context.Background()
	// A mirror with the repository but only c1 in it, served for another URL.
	url := "https://example.com/org/proj"
	src := newTestFetcher(t, "", "")
	partial := filepath.Join(t.TempDir(), "m")
	if err := src.WriteMirror(ctx, partial, []Git{{URL: "file://" + fx.bare, Commit: fx.c1}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(mirror, "example.com", "org"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(partial, "file", strings.TrimPrefix(fx.bare, "/")), filepath.Join(mirror, "example.com", "org", "proj.git")); err != nil {
		t.Fatal(err)
	}

	f := newTestFetcher(t, "", mirror)
	t.Run("no repository", func(t *testing.T) {
		err := f.FetchGit(ctx, Git{URL: "https://example.com/other/repo", Commit: fx.c1})
		want := filepath.Join(mirror, "example.com", "other", "repo.git")
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "https://example.com/other/repo") {
			t.Fatalf("got %v, want a fetch error naming %s", err, want)
		}
	})
	t.Run("commit not in the mirror", func(t *testing.T) {
		err := f.FetchGit(ctx, Git{URL: url, Commit: fx.c3})
		want := "commit " + fx.c3 + " not in the mirror " + filepath.Join(mirror, "example.com", "org", "proj.git")
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want %q", err, want)
		}
		assertNoRepo(t, f)
	})
	t.Run("ref not in the mirror", func(t *testing.T) {
		err := f.FetchGit(ctx, Git{URL: url, Commit: fx.c1, Ref: "v1"})
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), `ref "v1" not in the mirror`) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("archive", func(t *testing.T) {
		_, err := f.FetchArchive(ctx, Archive{URL: "https://example.com/dl/x.tar.gz", SHA256: strings.Repeat("1", 64)})
		want := filepath.Join(mirror, "example.com", "dl", "x.tar.gz")
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), want) {
			t.Fatalf("got %v, want a fetch error naming %s", err, want)
		}
	})
	t.Run("archive changed in the mirror", func(t *testing.T) {
		p := filepath.Join(mirror, "example.com", "dl", "y.tar.gz")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("tampered"), 0o644)
		_, err := f.FetchArchive(ctx, Archive{URL: "https://example.com/dl/y.tar.gz", SHA256: strings.Repeat("1", 64)})
		if !errors.Is(err, ErrBadPin) || !strings.Contains(err.Error(), sha256hex([]byte("tampered"))) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("corrupt pack", func(t *testing.T) {
		bad := t.TempDir()
		w := newTestFetcher(t, "", "")
		if err := w.WriteMirror(ctx, bad, []Git{{URL: "file://" + fx.bare, Commit: fx.c3}}, nil); err != nil {
			t.Fatal(err)
		}
		packs, _ := filepath.Glob(filepath.Join(bad, "file", strings.TrimPrefix(fx.bare, "/"), "objects", "pack", "*.pack"))
		if len(packs) != 1 {
			t.Fatalf("packs %v", packs)
		}
		b, _ := os.ReadFile(packs[0])
		for i := len(b) / 3; i < len(b)/3+64; i++ {
			b[i] ^= 0xff // damage object data in the middle of the pack
		}
		os.WriteFile(packs[0], b, 0o644)
		r := newTestFetcher(t, "", bad)
		err := r.FetchGit(ctx, Git{URL: "file://" + fx.bare, Commit: fx.c3})
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), bad) {
			t.Fatalf("got %v, want a fetch error naming the mirror", err)
		}
		assertNoRepo(t, r)
	})
	t.Run("present", func(t *testing.T) {
		if err := f.FetchGit(ctx, Git{URL: url, Commit: fx.c1}); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRepoKey(t *testing.T) {
	for in, want := range map[string]string{
		"https://github.com/deepseek-ai/DeepEP":      "github.com/deepseek-ai/DeepEP.git",
		"https://github.com/deepseek-ai/DeepEP.git":  "github.com/deepseek-ai/DeepEP.git",
		"https://GitHub.com/NVIDIA/nvshmem/":         "github.com/NVIDIA/nvshmem.git",
		"git@github.com:NVIDIA/nvshmem.git":          "github.com/NVIDIA/nvshmem.git",
		"ssh://git@example.com:2222/a/b":             "example.com:2222/a/b.git",
		"file:///srv/git/x.git":                      "file/srv/git/x.git",
		"https://user:secret@example.com/a/repo.git": "example.com/a/repo.git",
	} {
		if got, err := RepoKey(in); err != nil || got != want {
			t.Errorf("RepoKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"https://example.com/../etc/x", "https://example.com/a/./b", "https://example.com/", "ftp://example.com/x", "https:///x", "https://example.com/a//b"} {
		if got, err := RepoKey(bad); !errors.Is(err, ErrBadPin) {
			t.Errorf("RepoKey(%q) = %q, %v; want a bad pin", bad, got, err)
		}
	}
	if got, err := ArchiveKey("https://developer.download.nvidia.com/compute/redist/nvshmem/3.2.5/source/nvshmem_src_3.2.5-1.txz"); err != nil || got != "developer.download.nvidia.com/compute/redist/nvshmem/3.2.5/source/nvshmem_src_3.2.5-1.txz" {
		t.Errorf("ArchiveKey: %q, %v", got, err)
	}
	if _, err := ArchiveKey("file:///etc/passwd"); !errors.Is(err, ErrBadPin) {
		t.Errorf("ArchiveKey(file://) = %v", err)
	}
}
