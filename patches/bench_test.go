package patches

import (
	"bytes"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/epbuild/epbuild/patches/internal/patchgen"
)

var benchConfig = patchgen.Config{Files: 240, Lines: 400, HunksPerFile: 10, Seed: 42}

// benchSeries generates a synthetic tree and a format-patch series of 8
// commits that turns it into the head tree.
func benchSeries(t testing.TB) (base, head patchgen.Tree, mbox []byte) {
	t.Helper()
	base, head = patchgen.Generate(benchConfig)
	f := newFixture(t)
	writeTree(t, f.dir, base)
	git(t, f.dir, "add", "-A")
	git(t, f.dir, "commit", "-q", "-m", "base")
	baseID := git(t, f.dir, "rev-parse", "HEAD")
	// Each commit takes the files whose base name falls in its group, so a
	// renamed file moves in one commit.
	group := func(p string) int {
		h := fnv.New32a()
		h.Write([]byte(filepath.Base(p)))
		return int(h.Sum32() % 8)
	}
	for g := range 8 {
		for p, data := range head {
			if group(p) == g {
				writeTree(t, f.dir, patchgen.Tree{p: data})
			}
		}
		for p := range base {
			if _, kept := head[p]; !kept && group(p) == g {
				if err := os.Remove(filepath.Join(f.dir, p)); err != nil {
					t.Fatal(err)
				}
			}
		}
		git(t, f.dir, "add", "-A")
		git(t, f.dir, "commit", "-q", "-m", fmt.Sprintf("change group %d", g))
	}
	mbox = []byte(git(t, f.dir, "format-patch", "--stdout", "--full-index", "-M", baseID[:40]+"..HEAD"))
	return base, head, mbox
}

func writeTree(t testing.TB, root string, tree patchgen.Tree) {
	t.Helper()
	for p, data := range tree {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func countHunks(t testing.TB, mbox []byte) int {
	t.Helper()
	msgs, err := parsePatch("bench", mbox)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, files := range msgs {
		for _, f := range files {
			n += len(f.TextFragments)
		}
	}
	return n
}

func maxRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	if runtime.GOOS == "darwin" {
		return float64(ru.Maxrss) / (1 << 20)
	}
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}

// TestComparePatch measures the engine against git apply on the same
// synthetic series, after checking that both give the head tree.
func TestComparePatch(t *testing.T) {
	if os.Getenv("EPBUILD_BENCH") == "" {
		t.Skip("set EPBUILD_BENCH=1 to measure")
	}
	base, head, mbox := benchSeries(t)
	hunks := countHunks(t, mbox)
	if len(base) < 200 || hunks < 2000 {
		t.Fatalf("series too small: %d files, %d hunks", len(base), hunks)
	}
	set := fileSet(t, 0, "bench", string(mbox))
	want := t.TempDir()
	writeTree(t, want, head)
	wantSnap := snapshot(t, want)

	const runs = 3
	var ours, theirs time.Duration
	for i := range runs {
		dir := t.TempDir()
		writeTree(t, dir, base)
		start := time.Now()
		if _, err := apply(t, dir, set, Options{}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); i == 0 || d < ours {
			ours = d
		}
		sameTrees(t, "engine vs head", wantSnap, snapshot(t, dir))

		// git apply at the top of a fresh repository of its own.
		ref := t.TempDir()
		writeTree(t, ref, base)
		git(t, ref, "init", "-q")
		cmd := exec.Command("git", "apply", "-")
		cmd.Dir = ref
		cmd.Stdin = bytes.NewReader(mbox)
		start = time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git apply: %v: %s", err, out)
		}
		if d := time.Since(start); i == 0 || d < theirs {
			theirs = d
		}
		if err := os.RemoveAll(filepath.Join(ref, ".git")); err != nil {
			t.Fatal(err)
		}
		sameTrees(t, "git apply vs head", wantSnap, snapshot(t, ref))
	}
	fmt.Printf("BENCH patch ratio=%.2f epbuild_s=%.3f anchor_s=%.3f hunks=%d files=%d maxrss_mb=%.0f\n",
		ours.Seconds()/theirs.Seconds(), ours.Seconds(), theirs.Seconds(), hunks, len(base), maxRSSMiB())
}

// BenchmarkApply applies the synthetic series to a fresh copy of the base tree.
func BenchmarkApply(b *testing.B) {
	base, _, mbox := benchSeries(b)
	set := fileSet(b, 0, "bench", string(mbox))
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		writeTree(b, dir, base)
		b.StartTimer()
		if _, err := apply(b, dir, set, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
