package verify

import (
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
)

// A python.import the dynamic loader stopped gets a fix that names the missing function
// and the library to load, not a reinstall of the same files.
func TestImportUndefinedSymbolFix(t *testing.T) {
	v := &verifier{prefix: t.TempDir()}
	why := "import deep_ep with python3: exit status 1: ImportError: /env/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so: undefined symbol: ncclDevCommDestroy"
	c := v.recipeCheck(CheckResult{ID: "python.import:deep_ep", Status: check.Fail, Why: why}, nil, v.prefix)
	for _, want := range []string{"libtorch_cuda.so", "ncclDevCommDestroy", "R53"} {
		if !strings.Contains(c.Fix, want) {
			t.Errorf("fix %q lacks %q", c.Fix, want)
		}
	}
	if strings.Contains(c.Fix, "reinstall") {
		t.Errorf("fix %q asks for a reinstall, which loads the same files", c.Fix)
	}
	other := v.recipeCheck(CheckResult{ID: "python.import:x", Status: check.Fail,
		Why: "import x with python3: exit status 1: ImportError: /p/x.so: undefined symbol: _ZN3fmt2v9vformatB5cxx11E"}, nil, v.prefix)
	if !strings.Contains(other.Fix, "x.so") || strings.Contains(other.Fix, "R53") {
		t.Errorf("fix of a non-NCCL symbol: %q", other.Fix)
	}
	missing := v.recipeCheck(CheckResult{ID: "python.import:x", Status: check.Fail, Why: "import x with python3: exit status 1: ModuleNotFoundError: No module named 'x'"}, nil, v.prefix)
	if !strings.Contains(missing.Fix, "reinstall") {
		t.Errorf("fix of a missing module: %q", missing.Fix)
	}
}
