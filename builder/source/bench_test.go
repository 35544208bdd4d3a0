package source

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/epbuild/epbuild/builder/benchcmp"
)

// genMirror writes a mirror holding one repository of about files files and commits
// commits, made with git fast-import (thousands of git commit calls would take minutes),
// and returns the mirror, the URL and the last commit.
func genMirror(t *testing.T, files, commits int) (mirror, url, head string) {
	mirror = t.TempDir()
	url = "https://example.com/bench/repo"
	repo := filepath.Join(mirror, "example.com", "bench", "repo.git")
	runGit(t, "", "init", "-q", "--bare", "-b", "main", repo)
	rng := rand.New(rand.NewSource(42))
	words := strings.Fields("int void return if else for while static const auto template struct class namespace buffer rank token expert dispatch combine kernel stream event tensor size num_sms hidden")
	content := func() string {
		var b strings.Builder
		for n := 40 + rng.Intn(160); n > 0; n-- {
			for w := 3 + rng.Intn(8); w > 0; w-- {
				b.WriteString(words[rng.Intn(len(words))])
				b.WriteByte(' ')
			}
			b.WriteString(";\n")
		}
		return b.String()
	}
	paths := make([]string, files)
	for i := range paths {
		paths[i] = fmt.Sprintf("csrc/dir%02d/file%03d.cu", i%17, i)
	}
	var s bytes.Buffer
	for c := 1; c <= commits; c++ {
		msg := fmt.Sprintf("commit %d\n", c)
		fmt.Fprintf(&s, "commit refs/heads/main\nmark :%d\ncommitter Bench <bench@example.com> %d +0000\ndata %d\n%s", c, 1700000000+c*60, len(msg), msg)
		if c > 1 {
			fmt.Fprintf(&s, "from :%d\n", c-1)
		}
		touch := paths
		if c > 1 {
			touch = []string{paths[rng.Intn(files)], paths[rng.Intn(files)], paths[rng.Intn(files)]}
		}
		for _, p := range touch {
			body := content()
			fmt.Fprintf(&s, "M 100644 inline %s\ndata %d\n%s\n", p, len(body), body)
		}
	}
	if out, err := gitOut(repo, s.Bytes(), "fast-import", "--quiet"); err != nil {
		t.Fatalf("git fast-import: %v\n%s", err, out)
	}
	runGit(t, repo, "repack", "-adq")
	return mirror, url, runGit(t, repo, "rev-parse", "main")
}

// benchRepo is one repository and commit that the fetch comparison checks out.
type benchRepo struct {
	name, mirror, url, commit string
}

func (r benchRepo) bare() string {
	key, _ := RepoKey(r.url)
	return filepath.Join(r.mirror, filepath.FromSlash(key))
}

// benchRepos are a generated repository and, with EPBUILD_BENCH_MIRROR, the recipes' real
// DeepEP and NVSHMEM pins.
func benchRepos(t *testing.T) []benchRepo {
	mirror, url, head := genMirror(t, 4000, 200)
	repos := []benchRepo{{"synthetic", mirror, url, head}}
	if m := benchcmp.Mirror(); m != "" {
		for _, r := range []benchRepo{
			{"deepep@29d31c0", m, deepEP, "29d31c095796f3c8ece47ee9cdcc167051bbeed9"},
			{"nvshmem@v3.4.5-0", m, nvshmem, "131da55f643ac87c810ba0bc51d359258bf433a1"},
		} {
			if why := lacks(r.bare(), r.commit); why != "" {
				fmt.Printf("BENCH fetch skipped: data=%s: %s\n", r.name, why)
				continue
			}
			repos = append(repos, r)
		}
	}
	return repos
}

// lacks says which of commits the repository bare does not hold (empty: none), for a
// real-data case the mirror cannot give: `make bench` goes on without it.
func lacks(bare string, commits ...string) string {
	for _, c := range commits {
		if err := exec.Command("git", "--git-dir="+bare, "cat-file", "-e", c+"^{commit}").Run(); err != nil {
			return fmt.Sprintf("%s does not hold commit %s", bare, c)
		}
	}
	return ""
}

// cloneCommits is the anchor's fetch, by hand, of the commits "$2"... of the repository
// "$1" into d: git clone --no-checkout, then, for a commit the clone did
// not bring, git fetch --depth 1 of it by hash. A mirror made by `epbuild mirror` keeps
// its pins under refs/epbuild/, where clone does not look (it clones an empty
// repository), and in shallow history, which only a shallow fetch may take from.
const cloneCommits = `git clone -q --no-checkout "$1" d 2>/dev/null && for c in "${@:2}"; do ` +
	`git -C d cat-file -e "$c^{commit}" 2>/dev/null || git -C d fetch -q --depth 1 origin "$c" || exit 1; done`

// anchorRoute says how cloneCommits gets the commits from bare: by the clone alone
// (which hard-links the local objects), or by a shallow fetch after it, whose pack git
// makes anew each time; the two differ several times over, so the BENCH line says which.
// It asks the way the anchor does: a clone, then which commits it lacks.
func anchorRoute(t *testing.T, bare string, commits ...string) string {
	d := filepath.Join(t.TempDir(), "d")
	runGit(t, "", "clone", "-q", "--no-checkout", bare, d)
	for _, c := range commits {
		if err := exec.Command("git", "-C", d, "cat-file", "-e", c+"^{commit}").Run(); err != nil {
			return "anchor_route=clone+fetch-depth-1"
		}
	}
	return "anchor_route=clone"
}

// TestCompareFetch measures a cold fetch + checkout from a mirror against `git clone
// --no-checkout` + `git checkout` of the same commit from the same mirror, a warm fetch
// against a cold one, and a checkout's peak RSS.
func TestCompareFetch(t *testing.T) {
	benchcmp.Skip(t)
	ctx := context.Background()
	for _, r := range benchRepos(t) {
		nfiles := len(strings.Split(runGit(t, r.bare(), "ls-tree", "-r", "--name-only", r.commit), "\n"))
		g := Git{URL: r.url, Commit: r.commit}
		ours := func(tb testing.TB) benchcmp.Sample {
			f := newTestFetcher(tb, "", r.mirror)
			dest := filepath.Join(tb.TempDir(), "ws")
			return benchcmp.Time(tb, func() error { return f.CheckoutGit(ctx, g, dest) })
		}
		anchor := func(tb testing.TB) benchcmp.Sample {
			return benchcmp.Shell(tb, tb.TempDir(), cloneCommits+` && git -C d checkout -q "$2"`, r.bare(), r.commit)
		}
		benchcmp.Compare(t, benchcmp.Rounds(9), ours, anchor).Print("fetch", "data="+r.name, fmt.Sprintf("files=%d", nfiles), anchorRoute(t, r.bare(), r.commit))

		// Warm: the commit is in the cache already.
		f := newTestFetcher(t, "", r.mirror)
		warm := func(tb testing.TB) benchcmp.Sample {
			return benchcmp.Time(tb, func() error { return f.FetchGit(ctx, g) })
		}
		cold := func(tb testing.TB) benchcmp.Sample {
			f := newTestFetcher(tb, "", r.mirror)
			return benchcmp.Time(tb, func() error { return f.FetchGit(ctx, g) })
		}
		benchcmp.Compare(t, benchcmp.Rounds(9), warm, cold).Print("fetch-warm", "data="+r.name)

		cmd := helperCmd("rss", "HELPER_CACHE="+t.TempDir(), "HELPER_MIRROR="+r.mirror, "HELPER_URL="+r.url,
			"HELPER_COMMIT="+r.commit, "HELPER_DEST="+filepath.Join(t.TempDir(), "ws"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helper: %v\n%s", err, out)
		}
		var kb int64
		if _, err := fmt.Sscanf(string(out), "maxrss_kb=%d", &kb); err != nil {
			t.Fatalf("helper output %q: %v", out, err)
		}
		// The spawning helper's own peak, for scale: the checkout's number includes at most that.
		base := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		fmt.Printf("BENCH fetch-rss maxrss_mb=%.1f spawner_mb=%.1f data=%s\n", float64(kb)/1024, float64(base)/1024, r.name) // Linux reports KiB
	}
}

// TestCompareFetchPR measures what a recipe with an upstream pull request needs from a
// cold cache, a checkout of the base and the diff from the base to the pull request's head,
// against git doing the same: a clone, a checkout and a git diff.
func TestCompareFetchPR(t *testing.T) {
	benchcmp.Skip(t)
	m := benchcmp.Mirror()
	if m == "" {
		t.Skip("set EPBUILD_BENCH_MIRROR to a mirror of the upstream repositories to measure")
	}
	ctx := context.Background()
	base, head, ref := "29d31c095796f3c8ece47ee9cdcc167051bbeed9", "8a07e7e7ed57cfc63005f670d64d410cb30b061b", "refs/pull/466/head"
	bare := benchRepo{mirror: m, url: deepEP}.bare()
	if why := lacks(bare, base, head); why != "" {
		fmt.Printf("BENCH fetch-pr skipped: %s\n", why)
		return
	}
	ours := func(tb testing.TB) benchcmp.Sample {
		f := newTestFetcher(tb, "", m)
		dest := filepath.Join(tb.TempDir(), "ws")
		return benchcmp.Time(tb, func() error {
			if err := f.CheckoutGit(ctx, Git{URL: deepEP, Commit: base}, dest); err != nil {
				return err
			}
			_, err := f.Diff(ctx, DiffSpec{Repo: deepEP, Base: base, Head: head, Ref: ref})
			return err
		})
	}
	anchor := func(tb testing.TB) benchcmp.Sample {
		return benchcmp.Shell(tb, tb.TempDir(), cloneCommits+` && git -C d checkout -q "$2" && git -C d diff --full-index --binary "$2" "$3" > diff`,
			bare, base, head)
	}
	benchcmp.Compare(t, benchcmp.Rounds(9), ours, anchor).Print("fetch-pr", "data=deepep@29d31c0+pr466", anchorRoute(t, bare, base, head))
}
