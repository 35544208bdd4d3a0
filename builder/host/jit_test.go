package host

import (
	"context"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/recipes"
)

// recipeNVCC is a shipped recipe's runtime.nvcc.
func recipeNVCC(t *testing.T, name string) *recipes.NVCC {
	t.Helper()
	doc, err := recipes.NewLibrary().Load(name)
	if err != nil {
		t.Fatal(err)
	}
	if doc.Recipe.Runtime.NVCC == nil {
		t.Fatalf("recipe %s declares no runtime.nvcc", name)
	}
	return doc.Recipe.Runtime.NVCC
}

func jitCheck(t *testing.T, root string, n *recipes.NVCC, env map[string]string) check.Result {
	t.Helper()
	cfg := Config{Transport: TransportNone, GIDIndex: -1, Env: env, NVCC: n}
	return mustCheck(t, Run(context.Background(), sysroot.New(root), cfg), "host.jit.nvcc")
}

// host.jit.nvcc follows each recipe's lookup on nodes with and without nvcc: NCCL EP's
// (its own variables, then CUDA_HOME where it has one, then PATH), Hybrid-EP's
// ($CUDA_HOME/bin/nvcc only) and EPv2's (the default); a node without one fails with the
// fix, one without the CUDA headers beside its nvcc warns.
func TestJITNVCCCheck(t *testing.T) {
	t.Parallel()
	with := hostfixture.New(t)
	with.CUDAToolkit("/usr/local/cuda-13.0")
	with.Link("/usr/local/cuda", "/usr/local/cuda-13.0")
	with.Executable("/opt/bare/bin/nvcc") // no include/ beside it
	without := hostfixture.New(t)
	without.Mkdir("/usr/local/cuda-13.0/bin")
	ncclEP, hybridEP, epv2 := recipeNVCC(t, "nccl-ep"), recipeNVCC(t, "hybrid-ep"), recipeNVCC(t, "deepep-v2")
	for _, c := range []struct {
		name string
		root string
		n    *recipes.NVCC
		env  map[string]string
		want check.Status
		read string // in Read (pass, warn) or Fix (fail)
	}{
		{"nccl-ep CUDA_HOME", with.Root(), ncclEP, map[string]string{"CUDA_HOME": "/usr/local/cuda-13.0"}, check.Pass, "/usr/local/cuda-13.0/bin/nvcc (headers /usr/local/cuda-13.0/include/cuda_runtime.h)"},
		{"nccl-ep PATH", with.Root(), ncclEP, map[string]string{"PATH": "/usr/bin:/usr/local/cuda/bin"}, check.Pass, "/usr/local/cuda/bin/nvcc"},
		// CUDA_HOME without nvcc: NCCL EP goes on to PATH
		{"nccl-ep CUDA_HOME empty, PATH", with.Root(), ncclEP, map[string]string{"CUDA_HOME": "/opt/empty", "PATH": "/usr/local/cuda-13.0/bin"}, check.Pass, "/usr/local/cuda-13.0/bin/nvcc"},
		// its own variable, set and wrong: the lookup ends there
		{"nccl-ep NCCL_EP_JIT_NVCC wrong", with.Root(), ncclEP, map[string]string{"NCCL_EP_JIT_NVCC": "/opt/none/nvcc", "CUDA_HOME": "/usr/local/cuda-13.0"}, check.Fail, "set NCCL_EP_JIT_NVCC to an nvcc"},
		{"nccl-ep no headers", with.Root(), ncclEP, map[string]string{"NVCC": "/opt/bare/bin/nvcc"}, check.Warn, "no CUDA headers beside it"},
		{"nccl-ep none", without.Root(), ncclEP, map[string]string{"CUDA_HOME": "/usr/local/cuda-13.0", "PATH": "/usr/bin"}, check.Fail, "install the CUDA toolkit (nvcc and its headers) on every node, or ship it in the job's container, and set CUDA_HOME to it; or set NCCL_EP_JIT_NVCC to an nvcc"},
		{"hybrid-ep CUDA_HOME", with.Root(), hybridEP, map[string]string{"CUDA_HOME": "/usr/local/cuda"}, check.Pass, "$CUDA_HOME/bin/nvcc"},
		// Hybrid-EP reads CUDA_HOME alone: nvcc on PATH does not help it
		{"hybrid-ep no CUDA_HOME", with.Root(), hybridEP, map[string]string{"PATH": "/usr/local/cuda/bin"}, check.Fail, "and set CUDA_HOME to it"},
		{"deepep-v2 /usr/local/cuda", with.Root(), epv2, nil, check.Pass, "/usr/local/cuda/bin/nvcc"},
		{"deepep-v2 none", without.Root(), epv2, nil, check.Fail, "set EP_JIT_NVCC_COMPILER to an nvcc"},
	} {
		r := jitCheck(t, c.root, c.n, c.env)
		text := r.Read
		if r.Status == check.Fail {
			text = r.Fix
		}
		if r.Status != c.want || !strings.Contains(text, c.read) {
			t.Errorf("%s: %s %q (fix %q), want %s with %q", c.name, r.Status, r.Read, r.Fix, c.want, c.read)
		}
		if r.Rule != "R29/nvcc-missing" {
			t.Errorf("%s: rule %q: the check judges R29's nvcc-missing too", c.name, r.Rule)
		}
	}
	if r := jitCheck(t, with.Root(), nil, nil); r.Status != check.Skip {
		t.Errorf("no runtime.nvcc: %s %q", r.Status, r.Read)
	}
}

// LacksNVCC is what epbuild test says of a test that needs nvcc: nothing where the JIT
// finds one, the reason and the fix where it does not.
func TestLacksNVCC(t *testing.T) {
	t.Parallel()
	with := hostfixture.New(t)
	with.CUDAToolkit("/usr/local/cuda-13.0")
	without := hostfixture.New(t)
	n := recipeNVCC(t, "nccl-ep")
	env := map[string]string{"CUDA_HOME": "/usr/local/cuda-13.0"}
	if why := LacksNVCC(sysroot.New(with.Root()), env, n); why != "" {
		t.Errorf("a node with nvcc lacks it: %q", why)
	}
	why := LacksNVCC(sysroot.New(without.Root()), env, n)
	for _, w := range []string{"needs nvcc: nccl-ep compiles its kernels at run time", "$NCCL_EP_JIT_NVCC, else $NVCC, else $CUDA_HOME/bin/nvcc, else $CUDA_PATH/bin/nvcc, else nvcc on PATH", "set CUDA_HOME"} {
		if !strings.Contains(why, w) {
			t.Errorf("reason %q lacks %q", why, w)
		}
	}
	if why := LacksNVCC(sysroot.New(with.Root()), env, nil); !strings.Contains(why, "runtime.nvcc") {
		t.Errorf("no runtime.nvcc: %q", why)
	}
}
