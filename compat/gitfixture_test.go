package compat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The DeepEP commits the rules and recipes name, by their real ids.
const (
	cEbfe47e = "ebfe47e46fa86a5b41be96c326a92f62ed6721da"
	cE995aa2 = "e995aa22db1f5d204e5841cc8e73c670c772494b"
	cA84a248 = "a84a24808fb0ea732f49b874cc456a69dde69076"
	cC6051f3 = "c6051f388003f8d9fa60b43fced1475ad5d099af"
	cDf4debe = "df4debe30c257b2ed186ec209ea76ea70b39cf75"
	cA16af40 = "a16af40531f6c5dabfd7f0b22b835ecfe3e43464"
	c441833d = "441833d3b1938146b0257be8ea1710e84d20f6d9"
	cB6ce310 = "b6ce310bb0b75079682d09bc2ebc063a074fbd58"
	c9af0e0d = "9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee"
	c29d31c0 = "29d31c095796f3c8ece47ee9cdcc167051bbeed9"
	c8a07e7e = "8a07e7e7ed57cfc63005f670d64d410cb30b061b"
	c5de69c1 = "5de69c1979510100ff86709a45089975f5f25e6b"
	cB306af0 = "b306af06afd412c88e51e71802951606e40b7358"
	c723716f = "723716fc11ee44cbd87035fe9c3a360feca33528"
	cDd758ca = "dd758caf451848bd150e1046af3d0a73e5fff38d"
	c94a9f8f = "94a9f8f6b146c07d97ec58f67cd6d303296d6098" // branch hybrid-ep

	deepepURL  = "https://github.com/deepseek-ai/DeepEP"
	nvshmemURL = "https://github.com/NVIDIA/nvshmem"
)

// gitAncestry decides ancestry with `git merge-base --is-ancestor` in a repository on
// disk. Alias maps commit ids as rules and recipes write them (DeepEP's real ids) to the
// fixture's commits, which have the same topology; a commit neither aliased nor in the
// repository is unknown, as it would be in a cache that lacks it.
type gitAncestry struct {
	repoKey string
	dir     string
	alias   map[string]string
}

func (g *gitAncestry) IsAncestor(ctx context.Context, repo, ancestor, commit string) (bool, error) {
	if RepoKey(repo) != g.repoKey {
		return false, &UnknownCommitError{Repo: repo, Commit: commit, Source: "git fixture (other repository)"}
	}
	resolve := func(c string) string {
		if a, ok := g.alias[c]; ok {
			return a
		}
		return c
	}
	a, c := resolve(ancestor), resolve(commit)
	if _, err := gitOut(ctx, g.dir, "rev-parse", "--end-of-options", a+"^{commit}", c+"^{commit}"); err != nil {
		// a repository that cannot be read is a failure; a commit it lacks is unknown
		if _, err := gitOut(ctx, g.dir, "rev-parse", "--git-dir"); err != nil {
			return false, fmt.Errorf("open repository %s: %w", g.dir, err)
		}
		return false, &UnknownCommitError{Repo: repo, Commit: commit, Source: "git fixture"}
	}
	cmd := exec.CommandContext(ctx, "git", "-C", g.dir, "merge-base", "--is-ancestor", a, c)
	cmd.Env = gitEnv(g.dir)
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return false, nil
	}
	return false, fmt.Errorf("git merge-base --is-ancestor %s %s: %w", a, c, err)
}

func gitEnv(dir string) []string {
	return append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "HOME="+dir,
		"GIT_AUTHOR_NAME=epbuild test", "GIT_AUTHOR_EMAIL=test@example.invalid",
		"GIT_COMMITTER_NAME=epbuild test", "GIT_COMMITTER_EMAIL=test@example.invalid",
		"GIT_AUTHOR_DATE=2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2025-01-01T00:00:00Z")
}

func gitOut(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
	cmd.Env = gitEnv(dir)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
		}
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// deepepFixture builds a repository whose commits have DeepEP's topology for the commits
// that matter: the first-parent line from the initial commit to 29d31c0, then PR #466,
// PR #574 and EPv2 as three branches off 29d31c0, EPv2's line on to 723716f and
// main (dd758ca), and the hybrid-ep branch off b6ce310 (TestFixtureMatchesHistory checks it
// against history.yaml, TestUpstreamHistory history.yaml against DeepEP itself).
func deepepFixture(t *testing.T) *gitAncestry {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("these tests need the git CLI: %v", err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := gitOut(ctx, dir, "init", "-q"); err != nil {
		t.Fatal(err)
	}
	tree, err := gitOut(ctx, dir, "write-tree")
	if err != nil {
		t.Fatal(err)
	}
	alias := map[string]string{}
	commit := func(name, parent string) string {
		args := []string{"commit-tree", tree, "-m", name}
		if parent != "" {
			args = append(args, "-p", alias[parent])
		}
		c, err := gitOut(ctx, dir, args...)
		if err != nil {
			t.Fatal(err)
		}
		alias[name] = c
		return c
	}
	line := []string{cEbfe47e, cE995aa2, cA84a248, cC6051f3, cDf4debe, cA16af40, c441833d, cB6ce310, c9af0e0d, c29d31c0}
	prev := ""
	for _, c := range line {
		commit(c, prev)
		prev = c
	}
	for _, c := range []string{c8a07e7e, c5de69c1, cB306af0} {
		commit(c, c29d31c0)
	}
	commit(c723716f, cB306af0)
	commit(c94a9f8f, cB6ce310) // off the v1 line before 29d31c0
	commit(cDd758ca, c723716f)
	return &gitAncestry{repoKey: RepoKey(deepepURL), dir: dir, alias: alias}
}

// mirrorRepo gives the bare repository of url in an EPBUILD_TEST_MIRROR directory
// (laid out by URL: DIR/github.com/deepseek-ai/DeepEP.git), or skips.
func mirrorRepo(t *testing.T, url string) string {
	t.Helper()
	root := os.Getenv("EPBUILD_TEST_MIRROR")
	if root == "" {
		t.Skip("EPBUILD_TEST_MIRROR is unset: no upstream mirror to check against")
	}
	p := filepath.Join(root, filepath.FromSlash(RepoKey(url))+".git")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("the mirror has no %s (%v)", url, err)
	}
	return p
}
