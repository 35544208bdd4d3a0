package inspect

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeNCCL builds dir/libnccl.so.2: ncclGetVersion stores code, and the communicator
// entry point torch calls is a stub.
func fakeNCCL(t *testing.T, dir string, code int) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "nccl.c")
	writeFile(t, src, []byte(fmt.Sprintf(`int ncclGetVersion(int *v) { *v = %d; return 0; }
int ncclCommInitRankConfig(void *comm, int n, char id[128], int rank, void *config) { return 5; }
`, code)))
	lib := filepath.Join(dir, "libnccl.so.2")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, dir, "gcc", "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", lib, src)
	return lib
}

// torch.cuda.nccl.version() is the nccl.h torch was compiled with (2.27.7 here); the NCCL
// that runs is the one libtorch_cuda.so's ncclCommInitRankConfig binds to: its own
// (DT_NEEDED, found through DT_RPATH, loaded RTLD_LOCAL) or a preloaded one.
func TestNCCLReadsTheBoundLibrary(t *testing.T) {
	needTool(t, "gcc")
	python := needTool(t, "python3")
	site := t.TempDir()
	linked := fakeNCCL(t, filepath.Join(site, "nvidia", "nccl", "lib"), 22809)
	preloaded := fakeNCCL(t, t.TempDir(), 22803)
	src := filepath.Join(t.TempDir(), "torch.c")
	writeFile(t, src, []byte("int ncclCommInitRankConfig(void *, int, char *, int, void *);\nint new_comm(void) { char id[128] = {0}; return ncclCommInitRankConfig(0, 1, id, 0, 0); }\n"))
	lib := filepath.Join(site, "torch", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, lib, "gcc", "-shared", "-fPIC", "-o", filepath.Join(lib, "libtorch_cuda.so"), src, linked,
		"-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/../../nvidia/nccl/lib")
	writeFile(t, filepath.Join(site, "torch", "__init__.py"), []byte(`import ctypes, os, types
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libtorch_cuda.so"))
cuda = types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: (2, 27, 7)))
`))
	env := []string{"PATH=" + os.Getenv("PATH"), "PYTHONPATH=" + site}
	read := func(env ...string) NCCLProcess {
		t.Helper()
		n, err := NCCL(context.Background(), python, env)
		if err != nil {
			t.Fatal(err)
		}
		if n.TorchHeader != "2.27.7" {
			t.Errorf("torch's header version: %+v", n)
		}
		return n
	}
	n := read(env...)
	if b := n.Bound; b == nil || b.Code != 22809 || b.Version != "2.28.9" || b.Site != "nvidia/nccl/lib/libnccl.so.2" ||
		b.How != "dlsym(libtorch_cuda.so, ncclCommInitRankConfig)" {
		t.Errorf("no preload: want the linked 2.28.9, got %+v (%s)", b, n.BoundError)
	}
	n = read(append(env, "LD_PRELOAD="+preloaded)...)
	if b := n.Bound; b == nil || b.Code != 22803 || b.Path != preloaded || b.Site != "" || b.How != "dlsym(RTLD_DEFAULT, ncclCommInitRankConfig)" {
		t.Errorf("LD_PRELOAD: want the preloaded 2.28.3, got %+v (%s)", b, n.BoundError)
	}
	// a torch with no libtorch_cuda loaded and no NCCL in the global scope: not read, said why
	writeFile(t, filepath.Join(site, "torch", "__init__.py"), []byte("import types\ncuda = types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: (2, 27, 7)))\n"))
	if err := os.Remove(filepath.Join(lib, "libtorch_cuda.so")); err != nil {
		t.Fatal(err)
	}
	if n = read(env...); n.Bound != nil || !strings.Contains(n.BoundError, "no ncclCommInitRank") {
		t.Errorf("nothing bound: %+v", n)
	}
}
