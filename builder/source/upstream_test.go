package source

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func upstreamMirror(t *testing.T) string {
	m := os.Getenv("EPBUILD_TEST_MIRROR")
	if m == "" {
		t.Skip("set EPBUILD_TEST_MIRROR to a mirror of the upstream repositories to run")
	}
	return m
}

const (
	deepEP    = "https://github.com/deepseek-ai/DeepEP"
	nvshmem   = "https://github.com/NVIDIA/nvshmem"
	infraDual = "https://github.com/Infrawaves/DeepEP_ibrc_dual-ports_multiQP"
)

// TestUpstreamFetchCheckout fetches and checks out the recipes' real pins from the mirror.
func TestUpstreamFetchCheckout(t *testing.T) {
	m := upstreamMirror(t)
	f := newTestFetcher(t, "", m)
	ctx := context.Background()
	for _, g := range []Git{
		{URL: deepEP, Commit: "29d31c095796f3c8ece47ee9cdcc167051bbeed9"},
		{URL: deepEP, Commit: "8a07e7e7ed57cfc63005f670d64d410cb30b061b", Ref: "refs/pull/466/head"},
		{URL: deepEP, Commit: "a84a24808fb0ea732f49b874cc456a69dde69076"},
		{URL: nvshmem, Commit: "131da55f643ac87c810ba0bc51d359258bf433a1", Ref: "v3.4.5-0"},
		{URL: infraDual, Commit: "c6a53918fed34c7cb8a281f24712d9e8475dc166"},
	} {
		t.Run(g.Commit[:7], func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "ws")
			if err := f.CheckoutGit(ctx, g, dest); err != nil {
				t.Fatal(err)
			}
			if got := runGit(t, dest, "rev-parse", "HEAD"); got != g.Commit {
				t.Errorf("HEAD %s", got)
			}
			if got := runGit(t, dest, "status", "--porcelain"); got != "" {
				t.Errorf("status:\n%s", got)
			}
			mrepo, _ := RepoKey(g.URL)
			if a, b := runGit(t, dest, "write-tree"), runGit(t, filepath.Join(m, mrepo), "rev-parse", g.Commit+"^{tree}"); a != b {
				t.Errorf("tree %s, upstream %s", a, b)
			}
		})
	}
	// NVSHMEM v3.5.19-1 is not in this mirror: a clear fetch failure, not a bad pin.
	err := f.FetchGit(ctx, Git{URL: nvshmem, Commit: "919760f413fb834e76382d129ba9c3314ce722be"})
	want := "commit 919760f413fb834e76382d129ba9c3314ce722be not in the mirror " + filepath.Join(m, "github.com", "NVIDIA", "nvshmem.git")
	if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), want) {
		t.Errorf("v3.5.19-1: %v\nwant %q", err, want)
	}
	// The tag pins what the recipes say; a wrong pair is a bad pin.
	if err := f.FetchGit(ctx, Git{URL: nvshmem, Commit: "919760f413fb834e76382d129ba9c3314ce722be", Ref: "v3.4.5-0"}); !errors.Is(err, ErrBadPin) {
		t.Errorf("v3.4.5-0 with another commit: %v", err)
	}
}

// TestUpstreamDiff computes PR #466 (29d31c0..8a07e7e) and checks that git applies it to
// the base and gives the head's tree. (Hunks can differ from git diff's where the diff
// algorithms choose differently; the fixtures test byte equality.)
func TestUpstreamDiff(t *testing.T) {
	m := upstreamMirror(t)
	f := newTestFetcher(t, "", m)
	ctx := context.Background()
	for _, d := range []DiffSpec{
		{Repo: deepEP, Base: "29d31c095796f3c8ece47ee9cdcc167051bbeed9", Head: "8a07e7e7ed57cfc63005f670d64d410cb30b061b", Ref: "refs/pull/466/head"},
		{Repo: deepEP, Base: "a84a24808fb0ea732f49b874cc456a69dde69076", Head: "29d31c095796f3c8ece47ee9cdcc167051bbeed9"},
	} {
		patch, err := f.Diff(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		ws := filepath.Join(t.TempDir(), "ws")
		if err := f.CheckoutGit(ctx, Git{URL: d.Repo, Commit: d.Base}, ws); err != nil {
			t.Fatal(err)
		}
		if out, err := gitOut(ws, patch, "apply", "--index", "-"); err != nil {
			t.Fatalf("git apply %s..%s: %v\n%s", d.Base[:7], d.Head[:7], err, out)
		}
		if a, b := runGit(t, ws, "write-tree"), runGit(t, filepath.Join(m, "github.com/deepseek-ai/DeepEP.git"), "rev-parse", d.Head+"^{tree}"); a != b {
			t.Errorf("%s..%s applied gives tree %s, head has %s", d.Base[:7], d.Head[:7], a, b)
		}
	}
	b, err := f.File(ctx, FileSpec{Repo: infraDual, Commit: "c6a53918fed34c7cb8a281f24712d9e8475dc166", Path: "nvshmem_ibrc.patch"})
	if err != nil {
		t.Fatal(err)
	}
	if got := sha256hex(b); got != "032c9c1373aab75530a35872e2a8adec3732e59b9d155c9f8f6eebf09ce06e95" {
		t.Errorf("nvshmem_ibrc.patch sha256 %s", got)
	}
}
