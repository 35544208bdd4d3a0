package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/acceptance"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/recipes"
)

// testPrefix gives the test the demo artifact's install, as install left it.
func testPrefix(t *testing.T) string {
	t.Helper()
	return pristineInstall(t)
}

// runningIn lists the processes whose working directory is dir.
func runningIn(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, p := range procs {
		if d, err := os.Readlink(p); err == nil && d == dir {
			out = append(out, filepath.Base(filepath.Dir(p)))
		}
	}
	return out
}

// The demo carries its test in pydemo/tests/ (in the manifest like every file): it runs
// with --procs 2, each process reading its bandwidth; one that fails shows its last
// lines; one that hangs is killed at --timeout with everything it started; --json is the
// envelope's document.
func TestTestCommand(t *testing.T) {
	prefix := testPrefix(t)
	tests := filepath.Join(prefix, "pydemo", "tests")
	manifest, err := os.ReadFile(filepath.Join(prefix, "manifest.json"))
	if err != nil || !strings.Contains(string(manifest), `"pydemo/tests/lanes_test.py"`) {
		t.Errorf("the manifest does not list pydemo/tests/lanes_test.py (%v)", err)
	}

	code, out, errs := run(t, nodeEnv(), "test", prefix, "--procs", "2")
	if code != 0 || !strings.Contains(out, "2 processes (--procs)") || !strings.Contains(out, "pydemo/lanes  pass") ||
		!strings.Contains(out, "copy=") || !strings.Contains(out, "PASS: 1 passed, 0 failed, 0 not run") {
		t.Errorf("test --procs 2: exit %d\n%s\n%s", code, out, errs)
	}

	t.Setenv("PYDEMO_TEST_MODE", "fail")
	code, out, errs = run(t, nodeEnv(), "test", prefix, "--procs", "2")
	if code != 1 || !strings.Contains(out, "pydemo/lanes: fail: exited 1") || !strings.Contains(out, "  | [rank 0] channel 0: expected 2 lanes, found 0") ||
		!strings.Contains(errs, "failed: pydemo/lanes") {
		t.Errorf("a failing test: exit %d\n%s\n%s", code, out, errs)
	}

	t.Setenv("PYDEMO_TEST_MODE", "hang")
	code, out, errs = run(t, nodeEnv(), "test", prefix, "--procs", "2", "--timeout", "1500ms")
	if code != 1 || !strings.Contains(out, "ran past its timeout of 1.5s: its processes were killed") {
		t.Errorf("a hanging test: exit %d\n%s\n%s", code, out, errs)
	}
	if left := runningIn(tests); len(left) > 0 {
		t.Errorf("processes %v of the killed test still run in %s", left, tests)
	}

	t.Setenv("PYDEMO_TEST_MODE", "")
	code, out, errs = run(t, nodeEnv("EPBUILD_HOSTNAME", "gpu-a"), "test", prefix, "--procs", "2", "--json")
	checkEnvelope(t, envelopeSchema(t), "test --json", out)
	var doc testReport
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || len(doc.Tests) != 1 || doc.Procs != 2 ||
		doc.Tests[0].Status != "pass" || len(doc.Tests[0].Bandwidths) != 1 || doc.Tests[0].Bandwidths[0].Samples != 2 {
		t.Errorf("test --json: exit %d, %+v (%v)\n%s\n%s", code, doc, err, out, errs)
	}
}

// Bad input is exit 2 and names the fix; a node without the test's program is exit 3.
func TestTestCommandExits(t *testing.T) {
	prefix := testPrefix(t)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"test", prefix, "--only", "nope"}, 2, "--only nope: the install at " + prefix + " carries no such test; it carries: pydemo/lanes"},
		{[]string{"test", t.TempDir()}, 2, "give the --prefix of epbuild install"},
		{[]string{"test", prefix, "--procs", "0"}, 2, "--procs 0: give 1 to"},
		{[]string{"test", prefix, "--timeout", "-1s"}, 2, "--timeout -1s"},
	} {
		if code, out, errs := run(t, nodeEnv(), c.args...); code != c.code || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d, want %d and %q\n%s\n%s", c.args, code, c.code, c.want, out, errs)
		}
	}
	t.Setenv("PATH", t.TempDir()) // no python3
	if code, out, errs := run(t, nodeEnv(), "test", prefix, "--procs", "1"); code != 3 || !strings.Contains(errs, "this node lacks python3") ||
		!strings.Contains(out, "python3 not found on the install's PATH") {
		t.Errorf("no python3: exit %d\n%s\n%s", code, out, errs)
	}
}

// epbuild test --json of three nodes goes to fleet report, which shows each node's
// bandwidth and flags the node below 0.9× the median; names from the documents reach the
// terminal escaped.
func TestTestToFleetReport(t *testing.T) {
	prefix := testPrefix(t)
	dir := t.TempDir()
	for _, node := range []string{"gpu-a", "gpu-b", "gpu-c"} {
		code, out, errs := run(t, nodeEnv("EPBUILD_HOSTNAME", node), "test", prefix, "--procs", "2", "--json")
		if code != 0 {
			t.Fatalf("test on %s: exit %d\n%s\n%s", node, code, out, errs)
		}
		var doc map[string]any
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatal(err)
		}
		// the same machine thrice: give the nodes bandwidths of their own
		bw := doc["tests"].([]any)[0].(map[string]any)["bandwidths"].([]any)[0].(map[string]any)
		bw["gbps"] = map[string]float64{"gpu-a": 10, "gpu-b": 9.8, "gpu-c": 5}[node]
		bw["name"] = "copy\x1b]0;owned\x07"
		b, _ := json.Marshal(doc)
		if err := os.WriteFile(filepath.Join(dir, node+".json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := run(t, nodeEnv(), "fleet", "report", dir)
	for _, want := range []string{"BANDWIDTH (GB/s; SLOW: below 0.90× the nodes' median)", "pydemo/lanes  copy\\x1b]0;owned\\x07  gpu-a  10.00  1.02",
		"gpu-b  9.80   1.00", "gpu-c  5.00   0.51     SLOW", "DIFFER: gpu-c"} {
		if !strings.Contains(out, want) {
			t.Errorf("fleet report lacks %q: exit %d\n%s\n%s", want, code, out, errs)
		}
	}
	if code != 1 || strings.Contains(out, "\x1b") {
		t.Errorf("fleet report: exit %d, escapes raw: %v\n%s", code, strings.Contains(out, "\x1b"), out)
	}
	if code, out, _ := run(t, nodeEnv(), "fleet", "report", dir, "--slow-below", "0.4"); code != 0 || strings.Contains(out, "SLOW\n") {
		t.Errorf("--slow-below 0.4: exit %d\n%s", code, out)
	}
	if code, _, errs := run(t, nodeEnv(), "fleet", "report", dir, "--slow-below", "1.5"); code != 2 || !strings.Contains(errs, "--slow-below 1.5") {
		t.Errorf("--slow-below 1.5: exit %d\n%s", code, errs)
	}
	os.Remove(filepath.Join(dir, "gpu-c.json"))
	if code, out, errs := run(t, nodeEnv(), "fleet", "report", dir, "--json"); code != 0 || !strings.Contains(out, `"median_gbps": 9.9`) {
		t.Errorf("two agreeing nodes: exit %d\n%s\n%s", code, out, errs)
	}
}

// A test that needs an RDMA device is judged by the node's /sys/class/infiniband, read
// through the sysroot: a node without one lacks it, a node with one does not.
func TestNodeLacksRDMA(t *testing.T) {
	f := hostfixture.New(t)
	f.GPU("pci0000:00/0000:00:01.0", 0)
	lacks := nodeLacks(sysroot.New(f.Root()), &install.InstallTests{})
	if why := lacks(recipes.NeedRDMA); !strings.Contains(why, "needs an RDMA device") || !strings.Contains(why, "this node has none") {
		t.Errorf("no RDMA device: %q", why)
	}
	if why := lacks("gpu-direct"); !strings.Contains(why, `needs "gpu-direct"`) {
		t.Errorf("an unknown need: %q", why)
	}
	f.IBDevice("mlx5_0", "pci0000:00/0000:00:02.0", "mlx5_core", hostfixture.ActiveRoCE([4]byte{10, 0, 0, 1}))
	if why := lacks(recipes.NeedRDMA); why != "" {
		t.Errorf("with mlx5_0: %q", why)
	}
}

// A test that needs nvcc (needs: [nvcc]) is judged by the recipe's runtime.nvcc, in the
// tests' environment, on the node read through the sysroot: not run without one, with
// the reason and the fix; run with one.
func TestNodeLacksNVCC(t *testing.T) {
	doc, err := recipes.NewLibrary().Load("nccl-ep")
	if err != nil {
		t.Fatal(err)
	}
	it := &install.InstallTests{Env: []string{"PATH=/usr/bin", "CUDA_HOME=/usr/local/cuda-13.0"}, NVCC: doc.Recipe.Runtime.NVCC}
	f := hostfixture.New(t)
	why := nodeLacks(sysroot.New(f.Root()), it)(recipes.NeedNVCC)
	if !strings.Contains(why, "needs nvcc: nccl-ep compiles its kernels at run time") || !strings.Contains(why, "set CUDA_HOME") {
		t.Errorf("no nvcc: %q", why)
	}
	rs := acceptance.Run(context.Background(), []acceptance.Test{{Component: "nccl-ep", Name: "ht", Argv: []string{"./ep_test"}, Needs: []string{recipes.NeedNVCC}}},
		acceptance.Options{Lacks: nodeLacks(sysroot.New(f.Root()), it)})
	if len(rs) != 1 || rs[0].Status != acceptance.NotRun || !strings.HasPrefix(rs[0].Reason, "needs nvcc") {
		t.Errorf("the test without nvcc: %+v", rs)
	}
	f.CUDAToolkit("/usr/local/cuda-13.0")
	if why := nodeLacks(sysroot.New(f.Root()), it)(recipes.NeedNVCC); why != "" {
		t.Errorf("with /usr/local/cuda-13.0/bin/nvcc: %q", why)
	}
}

// show says which component compiles kernels on the node, and where its JIT looks for
// nvcc, as verify-install --host and epbuild test look.
func TestShowRuntimeNVCC(t *testing.T) {
	for recipe, want := range map[string]string{
		"nccl-ep":   "runtime nvcc\n  nccl-ep compiles its kernels on the node, with the nvcc at $NCCL_EP_JIT_NVCC, else $NVCC, else $CUDA_HOME/bin/nvcc,",
		"hybrid-ep": "runtime nvcc\n  deepep compiles its kernels on the node, with the nvcc at $CUDA_HOME/bin/nvcc (verify-install --host checks it)",
		"deepep-v2": "with the nvcc at $EP_JIT_NVCC_COMPILER, else $CUDA_HOME/bin/nvcc",
	} {
		if code, out, errs := run(t, nil, "show", recipe); code != 0 || !strings.Contains(out, want) {
			t.Errorf("show %s: exit %d, want %q\n%s\n%s", recipe, code, want, out, errs)
		}
	}
	if _, out, _ := run(t, nil, "show", "single-node"); strings.Contains(out, "runtime nvcc") {
		t.Errorf("show single-node: a runtime nvcc it does not declare\n%s", out)
	}
}
