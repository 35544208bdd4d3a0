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

	"github.com/epbuild/epbuild/builder/matrix"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// demoMatrix runs the demo recipe's matrix over one axis with a test command, in cache,
// with sets applied to every cell.
func demoMatrix(t *testing.T, cache, axis, test string, sets ...string) *matrix.Report {
	t.Helper()
	a, err := compat.ParseAxis(axis)
	if err != nil {
		t.Fatal(err)
	}
	run, err := RunMatrix(context.Background(), MatrixRunOptions{
		MatrixOptions: MatrixOptions{Options: Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: cache, Sets: sets, Log: log.New(io.Discard)},
			Axes: []compat.Axis{a}},
		Run: matrix.Options{Out: filepath.Join(t.TempDir(), "out"), Test: test, Metrics: []string{`channels: ([0-9]+)`, `(?P<lanes>[0-9]+) lanes`},
			Version: "test", Environ: os.Environ(), Getenv: os.Getenv},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range run.Cells {
		if c.Build == matrix.StepMissing {
			t.Skipf("the demo cannot build here: %s", c.Error)
		}
	}
	return run
}

func metric(c matrix.Cell, name string) []float64 {
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
	if a.Build != matrix.StepOK || a.Verify != matrix.StepPass || a.Test != matrix.StepPass || !a.OK() {
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
	if b.Build != matrix.StepOK || b.Verify != matrix.StepPass || b.Test != matrix.StepFail || b.TestExit != 3 || b.OK() || !strings.Contains(b.Error, "exited 3") {
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
	if bad.Build != matrix.StepFail || bad.Verify != matrix.StepSkipped || bad.Test != matrix.StepSkipped || !strings.Contains(bad.Error, "build libdemo") {
		t.Errorf("the failing cell: %+v", bad)
	}
	if good.Build != matrix.StepOK || good.Test != matrix.StepPass || !slices.Contains(good.Reused, "build libdemo") || !slices.Equal(metric(good, "m1"), []float64{4}) {
		t.Errorf("the cell after it: %+v", good)
	}
}

// A test command with a template it cannot use, and a metric that does not compile, are
// bad input before any work (matrix.Run checks them; see its tests).
func TestMatrixRunOptions(t *testing.T) {
	for _, o := range []MatrixRunOptions{{Run: matrix.Options{Test: "{{x.y}}", Out: "o"}}, {Run: matrix.Options{Metrics: []string{"("}, Out: "o"}}, {}} {
		o.Library, o.Recipe = recipes.NewLibrary(), "demo"
		var ue *plan.UsageError
		if _, err := RunMatrix(context.Background(), o); err == nil || !errors.As(err, &ue) {
			t.Errorf("%+v: %v", o, err)
		}
	}
}
