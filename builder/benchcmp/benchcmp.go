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

// A Sample is one timed run: its wall time and the CPU time (user and system) it used,
// in this process for epbuild's side, in the child processes for an anchor's. On a shared,
// busy machine the wall times of both sides stretch; the CPU times say what work each did.
type Sample struct {
	Wall, CPU time.Duration
}

// A Side runs its work once and returns the sample of the part that counts (set-up, such
// as copying a fresh tree, stays outside): see Time and Shell.
type Side func(tb testing.TB) Sample

// Result holds every sample of a comparison.
type Result struct {
	Ours, Anchor []Sample
}

// Compare runs ours and anchor rounds times each, alternating which goes first, after one
// untimed warm-up run of each (so both read from the page cache).
func Compare(tb testing.TB, rounds int, ours, anchor Side) Result {
	tb.Helper()
	return CompareMany(tb, rounds, ours, anchor)[0]
}

// CompareMany is Compare with several anchors: each round runs every side once, the order
// rotated by one from the round before. It returns one Result per anchor, each holding
// every sample of ours.
func CompareMany(tb testing.TB, rounds int, ours Side, anchors ...Side) []Result {
	tb.Helper()
	sides := append([]Side{ours}, anchors...)
	for _, s := range sides {
		s(tb)
	}
	samples := make([][]Sample, len(sides))
	for i := range rounds {
		for k := range sides {
			j := (i + k) % len(sides)
			samples[j] = append(samples[j], sides[j](tb))
		}
	}
	out := make([]Result, len(anchors))
	for i := range anchors {
		out[i] = Result{Ours: samples[0], Anchor: samples[i+1]}
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

func walls(ss []Sample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.Wall
	}
	return out
}

func cpus(ss []Sample) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = s.CPU
	}
	return out
}

// Ratio is the median wall time of ours over the anchor's.
func (r Result) Ratio() float64 {
	return Median(walls(r.Ours)).Seconds() / Median(walls(r.Anchor)).Seconds()
}

// Line is the BENCH line for the result: the ratio of the median wall times first, then
// the ratio of the minimums, each side's median and minimum, the ratio of the median CPU
// times with each side's, and extra "key=value" fields.
func (r Result) Line(name string, extra ...string) string {
	ow, aw := walls(r.Ours), walls(r.Anchor)
	oc, ac := Median(cpus(r.Ours)), Median(cpus(r.Anchor))
	f := []string{
		"BENCH " + name,
		fmt.Sprintf("ratio=%.3f", r.Ratio()),
		fmt.Sprintf("min_ratio=%.3f", Min(ow).Seconds()/Min(aw).Seconds()),
		fmt.Sprintf("epbuild_med_s=%.4f", Median(ow).Seconds()),
		fmt.Sprintf("epbuild_min_s=%.4f", Min(ow).Seconds()),
		fmt.Sprintf("anchor_med_s=%.4f", Median(aw).Seconds()),
		fmt.Sprintf("anchor_min_s=%.4f", Min(aw).Seconds()),
		fmt.Sprintf("cpu_ratio=%.3f", oc.Seconds()/max(ac.Seconds(), 1e-6)),
		fmt.Sprintf("epbuild_cpu_s=%.4f", oc.Seconds()),
		fmt.Sprintf("anchor_cpu_s=%.4f", ac.Seconds()),
		fmt.Sprintf("rounds=%d", len(r.Ours)),
	}
	return strings.Join(append(f, extra...), " ")
}

// Print writes the BENCH line to stdout, where `make bench` picks it up.
func (r Result) Print(name string, extra ...string) {
	fmt.Println(r.Line(name, extra...))
}

// Time runs f in this process and returns its sample, failing tb on an error.
func Time(tb testing.TB, f func() error) Sample {
	tb.Helper()
	cpu0 := cpuTime(syscall.RUSAGE_SELF)
	start := time.Now()
	err := f()
	s := Sample{Wall: time.Since(start), CPU: cpuTime(syscall.RUSAGE_SELF) - cpu0}
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Shell runs a bash script (with pipefail) with args as $1... and returns its sample (the
// CPU time of the processes it ran); it fails tb on an error, with the script's output.
func Shell(tb testing.TB, dir, script string, args ...string) Sample {
	tb.Helper()
	cmd := exec.Command("bash", append([]string{"-c", "set -eo pipefail; " + script, "bash"}, args...)...)
	cmd.Dir = dir
	start := time.Now()
	out, err := cmd.CombinedOutput()
	s := Sample{Wall: time.Since(start)}
	if err != nil {
		tb.Fatalf("anchor %q: %v\n%s", script, err, out)
	}
	// bash's own rusage holds its children's, once it has waited for them.
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		s.CPU = time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
	}
	return s
}

// Add sums samples: a side made of several timed steps.
func (s Sample) Add(o Sample) Sample { return Sample{Wall: s.Wall + o.Wall, CPU: s.CPU + o.CPU} }

func cpuTime(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
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
