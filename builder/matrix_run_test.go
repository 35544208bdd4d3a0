package builder

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// demoMatrix runs the demo recipe's matrix over one axis with a test command, in cache,
// with sets applied to every cell.
func demoMatrix(t *testing.T, cache, axis, test string, sets ...string) *MatrixRun {
	t.Helper()
	a, err := compat.ParseAxis(axis)
	if err != nil {
		t.Fatal(err)
	}
	run, err := RunMatrix(context.Background(), MatrixRunOptions{
		MatrixOptions: MatrixOptions{Options: Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: cache, Sets: sets, Log: log.New(io.Discard)},
			Axes: []compat.Axis{a}},
		Out: filepath.Join(t.TempDir(), "out"), Test: test, Metrics: []string{`channels: ([0-9]+)`, `(?P<lanes>[0-9]+) lanes`},
		Version: "test", Environ: os.Environ(), Getenv: os.Getenv,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range run.Cells {
		if c.Build == StepMissing {
			t.Skipf("the demo cannot build here: %s", c.Error)
		}
	}
	return run
}

func metric(c MatrixCellResult, name string) []float64 {
	for _, m := range c.Metrics {
		if m.Name == name {
			return m.Values
		}
	}
	return nil
}

// matrix run over the demo: each cell built, installed, verified and tested with the
// install's env and the cell's; the numbers the test prints are read back; the second
// cell rebuilds only the component its value changes; a failing cell (a test that fails,
// a build that fails) is reported and the cells after it still run.
func TestMatrixRunDemo(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	// the test reads the install through env.sh's PYTHONPATH and the cell's name; cell b fails
	test := `case "$EPBUILD_CELL" in *DEMO_TAG=b*) echo "channels: 0"; exit 3;; esac
cd / && python3 -c 'import pydemo; c = pydemo.Channel(1); print("channels:", c.channels); print(c.describe())'`
	run := demoMatrix(t, cache, "pydemo.env.DEMO_TAG=a,b", test)
	if len(run.Cells) != 2 || !run.Failed() {
		t.Fatalf("cells %+v", run.Cells)
	}
	a, b := run.Cells[0], run.Cells[1]
	if a.Build != StepOK || a.Verify != StepPass || a.Test != StepPass || !a.OK() {
		t.Errorf("cell a: %+v", a)
	}
	if got := metric(a, "m1"); !slices.Equal(got, []float64{4}) {
		t.Errorf("cell a: channels %v", got)
	}
	if got := metric(a, "lanes"); !slices.Equal(got, []float64{1}) {
		t.Errorf("cell a: lanes (a named group) %v", got)
	}
	if !slices.Contains(a.Built, "build libdemo") || !slices.Contains(a.Built, "build pydemo") || a.Counts["fail"] != 0 || a.Counts["pass"] == 0 {
		t.Errorf("cell a built %v, verify %v", a.Built, a.Counts)
	}
	// b changes only pydemo's build env: libdemo is reused, pydemo rebuilt
	for _, s := range []string{"patch libdemo", "build libdemo", "check libdemo", "patch pydemo"} {
		if !slices.Contains(b.Reused, s) {
			t.Errorf("cell b did not reuse %s: reused %v, built %v", s, b.Reused, b.Built)
		}
	}
	if !slices.Contains(b.Built, "build pydemo") || slices.Contains(b.Built, "build libdemo") {
		t.Errorf("cell b built %v", b.Built)
	}
	if b.Build != StepOK || b.Verify != StepPass || b.Test != StepFail || b.TestExit != 3 || b.OK() || !strings.Contains(b.Error, "exited 3") {
		t.Errorf("cell b: %+v", b)
	}
	if got := metric(b, "m1"); !slices.Equal(got, []float64{0}) {
		t.Errorf("cell b: channels %v", got)
	}
	if log, err := os.ReadFile(b.TestLog); err != nil || !strings.Contains(string(log), "channels: 0") {
		t.Errorf("cell b's test log %s: %v %q", b.TestLog, err, log)
	}

	// a cell whose build fails comes first; the next one still runs (it is cell a again,
	// -O2 being the recipe's flags: found made, not built again)
	run = demoMatrix(t, cache, "libdemo.options.CMAKE_C_FLAGS=-fno-such-option-epbuild,-O2", test, "pydemo.env.DEMO_TAG=a")
	if len(run.Cells) != 2 || !run.Failed() {
		t.Fatalf("cells %+v", run.Cells)
	}
	bad, good := run.Cells[0], run.Cells[1]
	if bad.Build != StepFail || bad.Verify != StepSkipped || bad.Test != StepSkipped || !strings.Contains(bad.Error, "build libdemo") {
		t.Errorf("the failing cell: %+v", bad)
	}
	if good.Build != StepOK || good.Test != StepPass || !slices.Contains(good.Reused, "build libdemo") || !slices.Equal(metric(good, "m1"), []float64{4}) {
		t.Errorf("the cell after it: %+v", good)
	}
}

// Test commands name the install and the patched trees by template; a template they
// cannot use, and a metric that does not compile, are bad input before any work.
func TestMatrixRunOptions(t *testing.T) {
	tree := map[string]string{"prefix": "/opt/x y", "deepep.src": "/store/tree", "deepep.prefix": "/opt/x y/deepep"}
	got, err := expandTest("cd {{deepep.src}}/tests && python3 test.py {{ prefix }}", func(r string) (string, bool) { v, ok := tree[r]; return v, ok })
	if err != nil || got != "cd '/store/tree'/tests && python3 test.py '/opt/x y'" {
		t.Errorf("expand: %q %v", got, err)
	}
	if _, err := expandTest("{{deepep.version}} {{cuda.home}}", func(string) (string, bool) { return "x", true }); err == nil || !strings.Contains(err.Error(), "{{deepep.version}}, {{cuda.home}}") {
		t.Errorf("unusable templates: %v", err)
	}
	for _, o := range []MatrixRunOptions{{Test: "{{x.y}}", Out: "o"}, {Metrics: []string{"("}, Out: "o"}, {}} {
		o.Library, o.Recipe = recipes.NewLibrary(), "demo"
		var ue *UsageError
		if _, err := RunMatrix(context.Background(), o); err == nil || !errors.As(err, &ue) {
			t.Errorf("%+v: %v", o, err)
		}
	}
	res, err := compileMetrics([]string{`bw: ([0-9.]+)`})
	if err != nil {
		t.Fatal(err)
	}
	m := readMetrics(res, []byte("[rank 0] bw: 12.5 GB/s\n[rank 1] bw: 13 GB/s\nbw: x\n"))
	if len(m) != 1 || m[0].Name != "m1" || !slices.Equal(m[0].Values, []float64{12.5, 13}) {
		t.Errorf("metrics %+v", m)
	}
}

// single-node's cells over NCCL share DeepEP's build: its key does not depend on which
// NCCL the job loads (DeepEP v1 does not link NCCL), nor on the Python packages the probe
// was asked for; NCCL built from source has a build of its own per release.
func TestNCCLCellsShareDeepEPBuild(t *testing.T) {
	tc := &toolchain.Toolchain{OS: "linux", Arch: "amd64", CUDA: "13.0", Torch: "2.11.0+cu130", GCC: "13.3.0",
		PythonPackages: map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu13": {Version: "3.4.5", Dir: "/site/nvidia/nvshmem"}}}
	withNCCL := *tc
	withNCCL.PythonPackages = map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu13": tc.PythonPackages["nvidia-nvshmem-cu13"],
		"nvidia-nccl-cu13": {Version: "2.28.9", Dir: "/site/nvidia/nccl"}}
	withNCCL.NCCL = &toolchain.NCCLRuntime{Version: "2.28.9"}
	base := []string{"nvshmem.package=nvidia-nvshmem-cu13", "nccl.package=nvidia-nccl-cu13"}
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	keys := func(tc *toolchain.Toolchain, sets ...string) map[string]compKeys {
		p, err := res.Resolve("single-node", append(base, sets...))
		if err != nil {
			t.Fatal(err)
		}
		return (&Runner{Toolchain: tc}).keys(p)
	}
	bundled, v2283, v2213 := keys(&withNCCL, "nccl.source=python"), keys(tc, "nccl.version=2.28.3-1"), keys(tc, "nccl.version=2.21.5-1")
	if bundled["deepep"].build == "" || bundled["deepep"].build != v2283["deepep"].build || v2283["deepep"].build != v2213["deepep"].build {
		t.Errorf("DeepEP's build differs between NCCL cells: %s %s %s", bundled["deepep"].build, v2283["deepep"].build, v2213["deepep"].build)
	}
	if v2283["nccl"].build == "" || v2283["nccl"].build == v2213["nccl"].build || bundled["nccl"].patch != "" {
		t.Errorf("NCCL's builds: bundled %+v, 2.28.3-1 %+v, 2.21.5-1 %+v", bundled["nccl"], v2283["nccl"], v2213["nccl"])
	}
}
