package acceptance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epbuild/epbuild/recipes"
)

// recipePatterns are the bandwidth patterns a shipped recipe declares for a test.
func recipePatterns(t *testing.T, recipe, component, test string) []Pattern {
	t.Helper()
	doc, err := recipes.NewLibrary().Load(recipe)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := doc.Recipe.Component(component)
	if !ok || c.Tests == nil {
		t.Fatalf("recipe %s declares no tests on %s", recipe, component)
	}
	for _, r := range c.Tests.Run {
		if r.Name == test {
			out, err := Patterns(r.Bandwidth)
			if err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	t.Fatalf("recipe %s: %s declares no test %s", recipe, component, test)
	return nil
}

func read(p []Pattern, text string) map[string]Bandwidth {
	m := NewMeter(p)
	for _, l := range strings.Split(text, "\n") {
		m.Line(l)
	}
	out := map[string]Bandwidth{}
	for _, b := range m.Bandwidths() {
		out[b.Name] = b
	}
	return out
}

// The recipes' patterns read DeepEP's lines as its tests at 29d31c0 print them (the
// f-strings of tests/test_intranode.py, test_low_latency.py and test_internode.py, with
// numbers put in), and nothing from the lines around them (each tuning step, the
// send/recv times).
func TestDeepEPBandwidthLines(t *testing.T) {
	intranode := `[config] num_tokens=4096, hidden=7168, num_topk=8
[tuning] SMs 24, NVL chunk 4: 201.17 GB/s (NVL), 512.30 us
[tuning] SMs 24, NVL chunk 32, 247.48 GB/s (NVL), t: 417.10 us
[tuning] Best dispatch (FP8): SMs 24, NVL chunk 32, 247.48 GB/s (NVL), t: 417.10 us
[tuning] SMs 24, NVL chunk default: 150.02 GB/s (NVL), 700.00 us
[tuning] Best dispatch (BF16): SMs 24, NVL chunk 16, 310.05 GB/s (NVL), t: 650.12 us
[tuning] Best combine: SMs 24, NVL chunk 8: 289.90 GB/s (NVL), t: 690.33 us`
	got := read(recipePatterns(t, "single-node", "deepep", "intranode"), intranode)
	want := map[string]float64{"dispatch-fp8-nvl": 247.48, "dispatch-bf16-nvl": 310.05, "combine-nvl": 289.90}
	for n, v := range want {
		if got[n].GBps != v || got[n].Samples != 1 {
			t.Errorf("intranode %s: %+v, want %.2f GB/s from one line", n, got[n], v)
		}
	}
	lowLatency := `[rank 0] Dispatch + combine bandwidth: 150.50 GB/s, avg_t=301.20 us, min_t=290.00 us, max_t=320.00 us
[rank 1] Dispatch + combine bandwidth: 149.50 GB/s, avg_t=303.20 us, min_t=291.00 us, max_t=322.00 us
[rank 0] Dispatch bandwidth: 120.00 GB/s, avg_t=95.10 us | Combine bandwidth: 170.00 GB/s, avg_t=160.20 us
[rank 1] Dispatch bandwidth: 100.00 GB/s, avg_t=114.00 us | Combine bandwidth: 160.00 GB/s, avg_t=170.00 us
[rank 0] Dispatch send/recv time: 20.10 + 30.20 us | Combine send/recv time: 40.30 + 50.40 us`
	got = read(recipePatterns(t, "single-node", "deepep", "low-latency"), lowLatency)
	for n, w := range map[string]Bandwidth{
		"dispatch-combine": {Name: "dispatch-combine", GBps: 150, MinGBps: 149.5, Samples: 2},
		"dispatch":         {Name: "dispatch", GBps: 110, MinGBps: 100, Samples: 2},
		"combine":          {Name: "combine", GBps: 165, MinGBps: 160, Samples: 2},
	} {
		if got[n] != w {
			t.Errorf("low-latency %s: %+v, want %+v", n, got[n], w)
		}
	}
	internode := `[tuning] SMs 24, NVL chunk 4, RDMA chunk 16: 12 + 480 us, 41.00 GB/s (RDMA), 133.00 GB/s (NVL) 
[tuning] Best dispatch (FP8): SMs 24, NVL chunk 4, RDMA chunk 16: 12 + 470 us, 45.20 GB/s (RDMA), 146.60 GB/s (NVL)
[tuning] Best combine: SMs 24, NVL chunk 4, RDMA chunk 12, 13.00 + 500.00 us, 43.10 GB/s (RDMA), 140.70 GB/s (NVL)`
	got = read(recipePatterns(t, "single-node", "deepep", "internode"), internode)
	for n, v := range map[string]float64{"dispatch-fp8-rdma": 45.2, "dispatch-fp8-nvl": 146.6, "combine-rdma": 43.1, "combine-nvl": 140.7} {
		if got[n].GBps != v || got[n].Samples != 1 {
			t.Errorf("internode %s: %+v, want %.2f GB/s from one line", n, got[n], v)
		}
	}
}

// script writes an executable sh script into dir.
func script(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func env(dir string) []string { return []string{"PATH=" + dir + ":/usr/bin:/bin"} }

// alive reports whether the process whose pid the file holds still runs.
func alive(t *testing.T, pidFile string) bool {
	t.Helper()
	// SIGKILL is queued when kill returns; the process leaves /proc's running states only
	// once the kernel schedules it, which a loaded machine may take a moment to do
	deadline := time.Now().Add(5 * time.Second)
	for aliveNow(t, pidFile) {
		if time.Now().After(deadline) {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func aliveNow(t *testing.T, pidFile string) bool {
	t.Helper()
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the test did not write its child's pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// a zombie is gone for this purpose; reaped ones answer ESRCH
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// A test that passes, one that fails with its last lines, one that hangs (killed at its
// deadline with what it started), one the node count leaves out and one whose program is
// missing, in one run.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	script(t, dir, "pass.sh", `echo "[rank 0] copy bandwidth: 2.00 GB/s"; echo "[rank 1] copy bandwidth: 4.00 GB/s"; echo "procs $1"
sleep 300 & echo $! > left.pid`)
	script(t, dir, "fail.sh", "for i in $(seq 1 30); do echo line $i; done; echo 'boom: expected 2 lanes' >&2; exit 3\n")
	script(t, dir, "hang.sh", "sleep 300 & echo $! > hang.pid; echo started; wait\n")
	bw := []Pattern{{Name: "copy", Re: regexp.MustCompile(`copy bandwidth: (?P<gbps>[0-9.]+) GB/s`)}}
	tests := []Test{
		{Component: "c", Name: "pass", Dir: dir, Argv: []string{"./pass.sh", "{{procs}}"}, Timeout: time.Minute, Bandwidth: bw},
		{Component: "c", Name: "fail", Dir: dir, Argv: []string{"fail.sh"}, Timeout: time.Minute},
		{Component: "c", Name: "hang", Dir: dir, Argv: []string{"hang.sh"}, Timeout: 500 * time.Millisecond},
		{Component: "c", Name: "multi", Dir: dir, Argv: []string{"fail.sh"}, Nodes: 2, Timeout: time.Minute},
		{Component: "c", Name: "missing", Dir: dir, Argv: []string{"no-such-program-here"}, Timeout: time.Minute},
	}
	rs := Run(context.Background(), tests, Options{Procs: 3, Env: env(dir)})
	if len(rs) != len(tests) {
		t.Fatalf("%d results for %d tests", len(rs), len(tests))
	}
	pass, fail, hang, multi, missing := rs[0], rs[1], rs[2], rs[3], rs[4]
	if pass.Status != Pass || pass.ExitCode != 0 || !slices.Equal(pass.Argv, []string{"./pass.sh", "3"}) ||
		len(pass.Bandwidths) != 1 || pass.Bandwidths[0] != (Bandwidth{Name: "copy", GBps: 3, MinGBps: 2, Samples: 2}) || pass.Tail != nil {
		t.Errorf("pass: %+v", pass)
	}
	if alive(t, filepath.Join(dir, "left.pid")) {
		t.Errorf("what the passed test left running outlived it")
	}
	if fail.Status != Fail || fail.ExitCode != 3 || fail.Reason != "exited 3" || len(fail.Tail) != 20 ||
		fail.Tail[19] != "boom: expected 2 lanes" || fail.Tail[0] != "line 12" {
		t.Errorf("fail: %+v", fail)
	}
	if hang.Status != Fail || !hang.TimedOut || !strings.Contains(hang.Reason, "ran past its timeout of 500ms") || !slices.Equal(hang.Tail, []string{"started"}) {
		t.Errorf("hang: %+v", hang)
	}
	if alive(t, filepath.Join(dir, "hang.pid")) {
		t.Errorf("the hung test's child outlived its deadline")
	}
	if multi.Status != NotRun || !strings.Contains(multi.Reason, "needs 2 nodes") {
		t.Errorf("multi: %+v", multi)
	}
	if missing.Status != Fail || missing.Missing != "no-such-program-here" || !strings.Contains(missing.Reason, "not found on the install's PATH") {
		t.Errorf("missing: %+v", missing)
	}
	// --nodes 2 runs the multi-node test
	if rs := Run(context.Background(), tests[3:4], Options{Nodes: 2, Env: env(dir)}); rs[0].Status != Fail || rs[0].ExitCode != 3 {
		t.Errorf("multi with 2 nodes: %+v", rs[0])
	}
	// a test that needs what the node lacks is not run, with the node's reason; one the
	// node can give it, or a run that knows nothing of the node, runs
	needy := Test{Component: "c", Name: "ll", Dir: dir, Argv: []string{"fail.sh"}, Needs: []string{"rdma"}, Timeout: time.Minute}
	none := func(need string) string { return "needs " + need + "; this node has none" }
	if rs := Run(context.Background(), []Test{needy}, Options{Env: env(dir), Lacks: none}); rs[0].Status != NotRun || rs[0].Reason != "needs rdma; this node has none" {
		t.Errorf("needs rdma on a node without: %+v", rs[0])
	}
	if rs := Run(context.Background(), tests[1:2], Options{Env: env(dir), Lacks: none}); rs[0].Status != Fail {
		t.Errorf("a test that needs nothing on that node: %+v", rs[0])
	}
	for _, o := range []Options{{Env: env(dir), Lacks: func(string) string { return "" }}, {Env: env(dir)}} {
		if rs := Run(context.Background(), []Test{needy}, o); rs[0].Status != Fail || rs[0].ExitCode != 3 {
			t.Errorf("needs rdma where it may run: %+v", rs[0])
		}
	}
	// a test's own env is added to the install's and wins over the same key
	script(t, dir, "code.sh", "exit $CODE\n")
	own := Test{Component: "c", Name: "own-env", Dir: dir, Argv: []string{"code.sh"}, Env: []string{"CODE=0"}, Timeout: time.Minute}
	if rs := Run(context.Background(), []Test{own}, Options{Env: append(env(dir), "CODE=5")}); rs[0].Status != Pass {
		t.Errorf("a test's own env: %+v", rs[0])
	}
	// a cancelled run runs nothing more
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rs := Run(ctx, tests[:1], Options{Env: env(dir)}); rs[0].Status != NotRun {
		t.Errorf("after cancel: %+v", rs[0])
	}
}

// A test's output is read a line at a time within a bound: a line without end does not
// grow the memory, and the numbers of the lines after it are still read.
func TestSinkBoundsLines(t *testing.T) {
	s := newSink([]Pattern{{Name: "x", Re: regexp.MustCompile(`x=(?P<gbps>[0-9.]+)`)}}, 3)
	chunk := strings.Repeat("y", 1<<20)
	for range 8 {
		s.Write([]byte(chunk))
	}
	s.Write([]byte("\nx=1.5\nx=2.5"))
	s.flush()
	if cap(s.partial) > 2*maxLine {
		t.Errorf("a line without end holds %d bytes", cap(s.partial))
	}
	tail := s.tail()
	if len(tail) != 3 || len(tail[0]) != maxLine || tail[1] != "x=1.5" || tail[2] != "x=2.5" {
		t.Errorf("tail: %d lines, first %d bytes: %q", len(tail), len(tail[0]), tail[1:])
	}
	if b := s.bandwidths(); len(b) != 1 || b[0].GBps != 2 || b[0].Samples != 2 {
		t.Errorf("bandwidths: %+v", b)
	}
}

// The default process count is one per GPU: CUDA_VISIBLE_DEVICES where set, else the
// lines of nvidia-smi -L, else 1.
func TestGPUs(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	if n, from := GPUs(ctx, []string{"PATH=" + dir}); n != 1 || !strings.Contains(from, "no nvidia-smi") {
		t.Errorf("no nvidia-smi: %d (%s)", n, from)
	}
	script(t, dir, "nvidia-smi", `[ "$1" = -L ] || exit 9
echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)"
echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)"
echo "  MIG 1g.10gb Device 0: (UUID: MIG-3)"
echo "GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-4)"
`)
	if n, from := GPUs(ctx, []string{"PATH=/usr/bin:/bin:" + dir}); n != 3 || from != "nvidia-smi -L" {
		t.Errorf("nvidia-smi: %d (%s)", n, from)
	}
	if n, from := GPUs(ctx, []string{"PATH=" + dir, "CUDA_VISIBLE_DEVICES=2,3"}); n != 2 || from != "CUDA_VISIBLE_DEVICES" {
		t.Errorf("CUDA_VISIBLE_DEVICES: %d (%s)", n, from)
	}
}

// nccl-ep's patterns read NCCL EP's ep_bench summary as rank 0 prints it at
// nccl-ep-v0.1.0 (ep_bench.cu's printf formats, numbers put in), fed through the sink
// `epbuild test` reads a test's output with, in pieces that split lines: each figure
// from the line after its name, and nothing from the lines of another figure that look
// the same (the same "throughput:" line under each name, recv and send under both).
func TestNCCLEPBenchLabelledLines(t *testing.T) {
	ll := `
=== Summary (Low Latency, across 8 ranks) ===

--- Host-observed performance ---
Dispatch (BF16):  avg=45.10 us, min=40.02 us, max=51.77 us
                  throughput: avg=163.42 GB/s, min=142.37 GB/s (rank 5), max=184.10 GB/s (rank 2)
Combine (BF16):   avg=70.31 us, min=66.00 us, max=75.90 us
                  throughput: avg=209.88 GB/s, min=194.41 GB/s (rank 7), max=223.60 GB/s (rank 0)
Total (D+C):      avg=118.25 us, min=110.30 us, max=127.00 us
                  throughput: avg=187.12 GB/s, min=174.23 GB/s (rank 3), max=200.61 GB/s (rank 1)

--- Kernel-only performance ---
  NOTE: CUPTI support was not compiled.

Byte counts: dispatch=7.37 MB (BF16), combine=14.76 MB (BF16), selections=1024
`
	ht := `
=== Summary (High Throughput BF16, across 8 ranks) ===
NOTE: total time = kernel time + memcpyD2D + misc
--- BW based on total time ---
Dispatch:    total=812.40 us (min=790.11, max=840.73)
             recv: total_bw=301.55  nvl_bw=301.55  rdma_bw=0.00 GB/s
             send: total_bw=298.02  nvl_bw=298.02  rdma_bw=0.00 GB/s
Combine:     total=1402.66 us (min=1380.00, max=1431.25)
             send: total_bw=174.65  nvl_bw=174.65  rdma_bw=0.00 GB/s
             recv: total_bw=172.61  nvl_bw=172.61  rdma_bw=0.00 GB/s
Total (D+C): avg=2230.12 us, min=2201.00 us, max=2262.40 us

--- BW based on kernel time ---
  NOTE: CUPTI support was not compiled.
`
	for _, c := range []struct {
		test, out string
		want      map[string]float64
	}{
		{"ll-bench", ll, map[string]float64{"dispatch": 163.42, "combine": 209.88, "dispatch-combine": 187.12}},
		{"ht-bench", ht, map[string]float64{"dispatch-nvl": 301.55, "combine-nvl": 174.65}},
	} {
		s := newSink(recipePatterns(t, "nccl-ep", "nccl-ep", c.test), 0)
		for out := c.out; out != ""; {
			n := min(7, len(out))
			if _, err := s.Write([]byte(out[:n])); err != nil {
				t.Fatal(err)
			}
			out = out[n:]
		}
		s.flush()
		got := map[string]Bandwidth{}
		for _, b := range s.bandwidths() {
			got[b.Name] = b
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: read %+v, want %v", c.test, got, c.want)
		}
		for n, v := range c.want {
			if w := (Bandwidth{Name: n, GBps: v, MinGBps: v, Samples: 1}); got[n] != w {
				t.Errorf("%s %s: %+v, want %+v", c.test, n, got[n], w)
			}
		}
	}
}

// A labelled pattern reads its value from the line right after the label's and from no
// other: not from a value line further down, nor from one before any label.
func TestLabelReadsTheNextLineOnly(t *testing.T) {
	p := []Pattern{{Name: "x", Label: regexp.MustCompile(`^X:`), Re: regexp.MustCompile(`v=(?P<gbps>[0-9.]+)`)}}
	got := read(p, "v=1\nX:\nv=10 v=99\nv=2\nX:\nnoise\nv=3\nX: v=4\nX:\nv=20")
	if w := (Bandwidth{Name: "x", GBps: 15, MinGBps: 10, Samples: 2}); got["x"] != w {
		t.Errorf("read %+v, want %+v (10 and 20 only)", got["x"], w)
	}
}
