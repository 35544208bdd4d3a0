package matrix

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/verify"
	"github.com/epbuild/epbuild/compat"
)

// Test commands name the install and the patched trees by template; a template they
// cannot use, and a metric that does not compile, are bad input before any work: the
// matrix is not made.
func TestOptions(t *testing.T) {
	tree := map[string]string{"prefix": "/opt/x y", "deepep.src": "/store/tree", "deepep.prefix": "/opt/x y/deepep"}
	got, err := expandTest("cd {{deepep.src}}/tests && python3 test.py {{ prefix }}", func(r string) (string, bool) { v, ok := tree[r]; return v, ok })
	if err != nil || got != "cd '/store/tree'/tests && python3 test.py '/opt/x y'" {
		t.Errorf("expand: %q %v", got, err)
	}
	if _, err := expandTest("{{deepep.version}} {{cuda.home}}", func(string) (string, bool) { return "x", true }); err == nil || !strings.Contains(err.Error(), "{{deepep.version}}, {{cuda.home}}") {
		t.Errorf("unusable templates: %v", err)
	}
	for _, o := range []Options{{Test: "{{x.y}}", Out: "o"}, {Metrics: []string{"("}, Out: "o"}, {}} {
		o.Matrix = func(context.Context) (*compat.Matrix, error) {
			t.Errorf("%+v: the matrix was made", o)
			return nil, errors.New("no matrix")
		}
		var ue *plan.UsageError
		if _, err := Run(context.Background(), o); err == nil || !errors.As(err, &ue) {
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

// A cell records the NVSHMEM its install's verify found DeepEP bound to: the process
// check's result, whatever its status; a skipped check (nothing binds NVSHMEM yet) or
// another check is not that.
func TestBoundLibrary(t *testing.T) {
	checks := []verify.VerifyCheck{
		{ID: "process.single-nccl", Status: check.Pass, Found: "libnccl.so.2 (2.28.9)"},
		{ID: "process.single-nvshmem", Status: check.Warn, Found: "deep_ep_cpp binds to prefix/nvshmem/lib/libnvshmem_host.so.3 (3.3.20); torch's maps its own"},
	}
	got := boundLibrary(checks, "process.single-nvshmem")
	if got == nil || got.Check != "process.single-nvshmem" || got.Status != "warn" || !strings.Contains(got.Found, "3.3.20") {
		t.Errorf("bound: %+v", got)
	}
	checks[1].Status = check.Skip
	if got := boundLibrary(checks, "process.single-nvshmem"); got != nil {
		t.Errorf("a skipped check recorded: %+v", got)
	}
	if got := boundLibrary(nil, "process.single-nvshmem"); got != nil {
		t.Errorf("no checks: %+v", got)
	}
}
