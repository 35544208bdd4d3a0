package drift

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/benchcmp"
	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/recipes"
)

// TestCompareDrift measures drift against a shell loop of `git apply --check`
// (each commit read into a scratch index, no checkout) over the same commits
// with the same patch, the two run alternately (benchcmp). With
// EPBUILD_BENCH_MIRROR holding DeepEP it is PR #466 (gcp-b200) over every
// commit of DeepEP main; without, a generated history of as many commits.
func TestCompareDrift(t *testing.T) {
	benchcmp.Skip(t)
	ctx := context.Background()
	var (
		name, recipe, mirror, rev string
		lib                       = recipes.NewLibrary()
	)
	m, why := benchcmp.Mirror(), ""
	if m != "" {
		why = historyMissing(m)
	}
	if why != "" {
		// `make bench` goes on: the synthetic history stands in, and the line says why
		fmt.Printf("BENCH drift skipped: %s; drift-synthetic runs instead\n", why)
	}
	if m != "" && why == "" {
		name, recipe, mirror, rev = "drift", "gcp-b200", m, "main"
	} else {
		h := syntheticHistory(t, 251)
		name, recipe, mirror, rev = "drift-synthetic", h.recipe, h.mirror, "main"
	}
	res, err := plan.NewResolver(lib)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := res.Resolve(recipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := stage.NewSources(c, mirror, log.New(io.Discard), source.ProgressLines)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Commits: rev}
	// the first run computes the upstream diff into the cache, as any first use would
	rep, err := Run(ctx, plan, src, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Tables) == 0 {
		// the mirror or the recipe gave drift nothing to try: say why instead of indexing
		t.Fatalf("drift over %s in %s made no table (skipped: %+v): the comparison needs the component's repository with its history", recipe, mirror, rep.Skipped)
	}
	tab := rep.Tables[0]
	commits := make([]string, len(tab.Rows))
	for i, r := range tab.Rows {
		commits[i] = r.Commit
	}
	// the component the table drifted (gcp-b200's last component is nccl, which has no
	// patch set), and the first of its sets
	pc, ok := plan.Component(tab.Component)
	if !ok || len(pc.PatchSets) == 0 {
		t.Fatalf("drift's table is for %q, which %s has no patch set for", tab.Component, recipe)
	}
	set := pc.PatchSets[0]
	var patch []byte
	if d := set.Patches[0].UpstreamDiff; d != nil {
		if patch, err = stage.Upstream(src).Diff(ctx, *d); err != nil {
			t.Fatal(err)
		}
	} else if patch, err = os.ReadFile(filepath.Join(set.Origin(), set.Patches[0].File)); err != nil {
		t.Fatal(err)
	}
	key, err := source.RepoKey(pc.Source.Git.URL)
	if err != nil {
		t.Fatal(err)
	}
	gitDir := filepath.Join(mirror, filepath.FromSlash(key))
	scratch := t.TempDir()
	patchFile := filepath.Join(scratch, "set.patch")
	list := filepath.Join(scratch, "commits")
	if err := os.WriteFile(patchFile, patch, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(list, []byte(strings.Join(commits, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// $1: the repository, $2: the scratch directory; a patch that does not apply is an
	// answer, not a failure of the loop
	loop := `export GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null GIT_INDEX_FILE="$2/index"
while read c; do
  git --git-dir="$1" read-tree "$c"
  git --git-dir="$1" apply --cached --check "$2/set.patch" 2>/dev/null || true
done < "$2/commits"`

	ours := func(tb testing.TB) benchcmp.Sample {
		return benchcmp.Time(tb, func() error {
			_, err := Run(ctx, plan, src, opts)
			return err
		})
	}
	anchor := func(tb testing.TB) benchcmp.Sample { return benchcmp.Shell(tb, scratch, loop, gitDir, scratch) }
	benchcmp.Compare(t, benchcmp.Rounds(5), ours, anchor).Print(name,
		fmt.Sprintf("commits=%d", len(commits)), fmt.Sprintf("sets=%d", len(tab.Sets)), fmt.Sprintf("threads=%d", runtime.GOMAXPROCS(0)))
}

// historyMissing says why mirror cannot give drift DeepEP's main (empty: it can). A
// mirror written by `epbuild mirror` holds the recipes' pins, not branches or history; a
// `git clone --mirror` of deepseek-ai/DeepEP under github.com/deepseek-ai/ has both.
func historyMissing(mirror string) string {
	repo := filepath.Join(mirror, "github.com", "deepseek-ai", "DeepEP.git")
	if fi, err := os.Stat(repo); err != nil || !fi.IsDir() {
		return repo + " is not there"
	}
	if err := exec.Command("git", "--git-dir="+repo, "rev-parse", "--verify", "-q", "refs/heads/main").Run(); err != nil {
		return repo + " has no branch main (a mirror of the pins alone, as epbuild mirror writes; drift needs git clone --mirror's history)"
	}
	return ""
}

// syntheticHistory writes, with git fast-import, a repository of n commits on
// main: a 3,000-line file whose every commit changes lines (now and then above
// the patched place, moving it), and a recipe whose local set patches it.
func syntheticHistory(t *testing.T, n int) *history {
	h := &history{mirror: t.TempDir()}
	gitDir := filepath.Join(h.mirror, "example.invalid", "x", "lib.git")
	g := &git{t: t, dir: t.TempDir()}
	g.run("init", "-q", "--bare", gitDir)
	file := strings.Split(numbered("line", 3000), "\n")
	file = file[:len(file)-1]
	var stream bytes.Buffer
	for i := range n {
		switch {
		case i%17 == 5:
			file = append([]string{fmt.Sprintf("inserted %d", i)}, file...)
		case i > 0:
			j := (i * 131) % len(file)
			file[j] += " changed"
		}
		data := strings.Join(file, "\n") + "\n"
		fmt.Fprintf(&stream, "commit refs/heads/main\nmark :%d\ncommitter t <t@example.com> %d +0000\ndata %d\n%s\n",
			i+1, 1735689600+i*3600, len(fmt.Sprint(i)), fmt.Sprint(i))
		if i > 0 {
			fmt.Fprintf(&stream, "from :%d\n", i)
		}
		fmt.Fprintf(&stream, "M 100644 inline f.txt\ndata %d\n%s\n", len(data), data)
	}
	cmd := exec.Command("git", "--git-dir="+gitDir, "fast-import", "--quiet")
	cmd.Stdin = &stream
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fast-import: %v\n%s", err, out)
	}
	g.dir = gitDir
	base := g.run("rev-list", "--max-parents=0", "main")
	// the patch: line 1500 of the first commit's file, changed
	h.patch = "diff --git a/f.txt b/f.txt\n--- a/f.txt\n+++ b/f.txt\n@@ -1497,7 +1497,7 @@\n line 1497\n line 1498\n line 1499\n-line 1500\n+line fifteen hundred\n line 1501\n line 1502\n line 1503\n"
	writeRecipe(t, h, base, "")
	return h
}
