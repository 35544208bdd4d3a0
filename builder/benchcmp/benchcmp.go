// Package benchcmp runs the comparisons that `make bench` prints: epbuild against the tool
// it replaces, on the same bytes, with the same threads. The two sides run one after the
// other, never at once, alternating which goes first, for several rounds; the line printed
// gives the median and the minimum of each side. A shared or busy machine slows both sides
// of a round alike, so the median ratio holds where single timings do not.
//
// It depends on nothing of epbuild, so that the tests of any package can use it. Nothing
// here asserts a time: the numbers are printed, not checked.
package benchcmp

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Enabled says whether comparisons should run (EPBUILD_BENCH is set); tests skip otherwise.
func Enabled() bool { return os.Getenv("EPBUILD_BENCH") != "" }

// Skip skips tb unless comparisons are enabled.
func Skip(tb testing.TB) {
	tb.Helper()
	if !Enabled() {
		tb.Skip("set EPBUILD_BENCH=1 to measure (make bench)")
	}
}

// Mirror is EPBUILD_BENCH_MIRROR: a mirror directory (laid out by URL) holding the real
// upstream repositories; empty when the comparisons run on generated data only.
func Mirror() string { return os.Getenv("EPBUILD_BENCH_MIRROR") }

// Workers is how many threads epbuild's hashing uses; anchors get as many processes.
func Workers() int { return max(1, runtime.NumCPU()) }

// Rounds is how many times each side runs: EPBUILD_BENCH_ROUNDS, else def.
func Rounds(def int) int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("EPBUILD_BENCH_ROUNDS"), &n); err == nil && n > 0 {
		return n
	}
	return def
}

// A Side runs its work once and returns how long the part that counts took (set-up, such
// as copying a fresh tree, stays outside).
type Side func(tb testing.TB) time.Duration

// Result holds every timing of a comparison.
type Result struct {
	Ours, Anchor []time.Duration
}

// Compare runs ours and anchor rounds times each, alternating which goes first, after one
// untimed warm-up run of each (so both read from the page cache).
func Compare(tb testing.TB, rounds int, ours, anchor Side) Result {
	tb.Helper()
	return CompareMany(tb, rounds, ours, anchor)[0]
}

// CompareMany is Compare with several anchors: each round runs every side once, the order
// rotated by one from the round before. It returns one Result per anchor, each holding
// every timing of ours.
func CompareMany(tb testing.TB, rounds int, ours Side, anchors ...Side) []Result {
	tb.Helper()
	sides := append([]Side{ours}, anchors...)
	for _, s := range sides {
		s(tb)
	}
	times := make([][]time.Duration, len(sides))
	for i := range rounds {
		for k := range sides {
			j := (i + k) % len(sides)
			times[j] = append(times[j], sides[j](tb))
		}
	}
	out := make([]Result, len(anchors))
	for i := range anchors {
		out[i] = Result{Ours: times[0], Anchor: times[i+1]}
	}
	return out
}

// Median of ds (the upper one of an even count).
func Median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// Min of ds.
func Min(ds []time.Duration) time.Duration { return slices.Min(ds) }

// Ratio is median(ours) over median(anchor).
func (r Result) Ratio() float64 {
	return Median(r.Ours).Seconds() / Median(r.Anchor).Seconds()
}

// Line is the BENCH line for the result: the ratio of the medians first, then the ratio of
// the minimums, each side's median and minimum, and extra "key=value" fields.
func (r Result) Line(name string, extra ...string) string {
	f := []string{
		"BENCH " + name,
		fmt.Sprintf("ratio=%.3f", r.Ratio()),
		fmt.Sprintf("min_ratio=%.3f", Min(r.Ours).Seconds()/Min(r.Anchor).Seconds()),
		fmt.Sprintf("epbuild_med_s=%.4f", Median(r.Ours).Seconds()),
		fmt.Sprintf("epbuild_min_s=%.4f", Min(r.Ours).Seconds()),
		fmt.Sprintf("anchor_med_s=%.4f", Median(r.Anchor).Seconds()),
		fmt.Sprintf("anchor_min_s=%.4f", Min(r.Anchor).Seconds()),
		fmt.Sprintf("rounds=%d", len(r.Ours)),
	}
	return strings.Join(append(f, extra...), " ")
}

// Print writes the BENCH line to stdout, where `make bench` picks it up.
func (r Result) Print(name string, extra ...string) {
	fmt.Println(r.Line(name, extra...))
}

// Time runs f and returns how long it took, failing tb on an error.
func Time(tb testing.TB, f func() error) time.Duration {
	tb.Helper()
	start := time.Now()
	if err := f(); err != nil {
		tb.Fatal(err)
	}
	return time.Since(start)
}

// Shell runs a bash script (with pipefail) with args as $1...; it fails tb on an error,
// with the script's output.
func Shell(tb testing.TB, dir, script string, args ...string) time.Duration {
	tb.Helper()
	cmd := exec.Command("bash", append([]string{"-c", "set -eo pipefail; " + script, "bash"}, args...)...)
	cmd.Dir = dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		tb.Fatalf("anchor %q: %v\n%s", script, err, out)
	}
	return d
}

// Need skips tb when a tool an anchor uses is missing.
func Need(tb testing.TB, tools ...string) {
	tb.Helper()
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			tb.Skipf("no %s here to compare with", t)
		}
	}
}

// MaxRSSMiB is the peak resident memory of this process so far.
func MaxRSSMiB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Maxrss) / 1024 // KiB on Linux
}
