package source

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
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

// TestCompareFetch measures a cold fetch + checkout from a local mirror against git clone +
// checkout of the same commit, a warm fetch against a cold one, and a fetch's peak RSS.
func TestCompareFetch(t *testing.T) {
	if os.Getenv("EPBUILD_BENCH") == "" {
		t.Skip("set EPBUILD_BENCH=1 to measure")
	}
	var mirror, url, commit string
	if m := os.Getenv("EPBUILD_TEST_MIRROR"); m != "" {
		mirror, url, commit = m, deepEP, "29d31c095796f3c8ece47ee9cdcc167051bbeed9"
	} else {
		mirror, url, commit = genMirror(t, 300, 2000)
	}
	key, _ := RepoKey(url)
	mrepo := filepath.Join(mirror, filepath.FromSlash(key))
	nfiles := len(strings.Split(runGit(t, mrepo, "ls-tree", "-r", "--name-only", commit), "\n"))
	ncommits := runGit(t, mrepo, "rev-list", "--count", "--all")
	ctx := context.Background()
	g := Git{URL: url, Commit: commit}

	const rounds = 9
	var ours, anchor, cold, warm []float64
	for i := 0; i < rounds; i++ {
		f := newTestFetcher(t, "", mirror)
		dest := filepath.Join(t.TempDir(), "ws")
		start := time.Now()
		if err := f.FetchGit(ctx, g); err != nil {
			t.Fatal(err)
		}
		fetched := time.Since(start)
		if err := f.CheckoutGit(ctx, g, dest); err != nil {
			t.Fatal(err)
		}
		ours = append(ours, time.Since(start).Seconds())
		cold = append(cold, fetched.Seconds())
		start = time.Now()
		if err := f.FetchGit(ctx, g); err != nil {
			t.Fatal(err)
		}
		warm = append(warm, time.Since(start).Seconds())

		d := filepath.Join(t.TempDir(), "d")
		start = time.Now()
		if out, err := exec.Command("git", "clone", "-q", "--no-checkout", mrepo, d).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		if out, err := exec.Command("git", "-C", d, "checkout", "-q", commit).CombinedOutput(); err != nil {
			t.Fatalf("git checkout: %v\n%s", err, out)
		}
		anchor = append(anchor, time.Since(start).Seconds())
	}
	o, a := median(ours), median(anchor)
	fmt.Printf("BENCH fetch ratio=%.2f epbuild_s=%.3f anchor_s=%.3f files=%d commits=%s\n", o/a, o, a, nfiles, ncommits)
	fmt.Printf("BENCH fetch-warm ratio=%.3f warm_s=%.4f cold_s=%.3f\n", median(warm)/median(cold), median(warm), median(cold))

	cmd := helperCmd("rss", "HELPER_CACHE="+t.TempDir(), "HELPER_MIRROR="+mirror, "HELPER_URL="+url,
		"HELPER_COMMIT="+commit, "HELPER_DEST="+filepath.Join(t.TempDir(), "ws"))
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
	fmt.Printf("BENCH fetch-rss maxrss_mb=%.1f spawner_mb=%.1f\n", float64(kb)/1024, float64(base)/1024) // Linux reports KiB
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
