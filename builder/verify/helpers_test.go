package verify

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
)

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the NCCL fixture needs %s: %v", tool, err)
		}
	}
}

// torchSite is a Python site directory that loads NCCL the way torch's CUDA wheels do:
// an nvidia-nccl-cu12 wheel of version wheel (its dist-info as pip writes it, the library
// in nvidia/nccl/lib), and a torch package whose lib/libtorch_cuda.so calls NCCL's
// communicator (DT_NEEDED libnccl.so.2, found through DT_RPATH
// $ORIGIN/../../nvidia/nccl/lib, as torch's wheels are patched with --force-rpath) and is
// loaded by torch's import with ctypes (RTLD_LOCAL, as a dependency of torch's
// extension). torch.cuda.nccl.version() returns header, as torch returns the nccl.h it
// was compiled with, whatever library is loaded. Extra modules (name → Python source) go
// beside torch.
func torchSite(t *testing.T, wheel, header string, modules map[string]string) string {
	t.Helper()
	site := t.TempDir()
	wheelLib := ncclLib(t, filepath.Join(site, "nvidia", "nccl"), wheel)
	di := "nvidia_nccl_cu12-" + wheel + ".dist-info/"
	writeFile(t, filepath.Join(site, di+"METADATA"), "Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: "+wheel+"\n")
	writeFile(t, filepath.Join(site, di+"RECORD"), "nvidia/nccl/lib/libnccl.so.2,,\n"+di+"METADATA,,\n")
	torchLib := filepath.Join(site, "torch", "lib", "libtorch_cuda.so")
	src := filepath.Join(t.TempDir(), "torch.c")
	writeFile(t, src, "int ncclCommInitRankConfig(void *, int, char *, int, void *);\n"+
		"int torch_fixture_new_comm(void) { char id[128] = {0}; return ncclCommInitRankConfig(0, 1, id, 0, 0); }\n")
	if err := os.MkdirAll(filepath.Dir(torchLib), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", torchLib, src, wheelLib,
		"-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/../../nvidia/nccl/lib").CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	var major, minor, patch int
	if _, err := fmt.Sscanf(header, "%d.%d.%d", &major, &minor, &patch); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(site, "torch", "__init__.py"), fmt.Sprintf(`import ctypes, os, types
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libtorch_cuda.so"))
cuda = types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: (%d, %d, %d)))
`, major, minor, patch))
	for name, body := range modules {
		writeFile(t, filepath.Join(site, name+".py"), body)
	}
	return site
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A stand-in for NCCL, our own code: the version entry point NCCL exports (ncclGetVersion
// stores NCCL_VERSION_CODE) and nothing else, built by a src/Makefile with NCCL's targets
// and output layout (../build/lib/libnccl.so.X.Y.Z with its links, ../build/include/nccl.h),
// so that the recipes' own NCCL steps build it.
const (
	ncclFixtureC = `/* stands in for NCCL: ncclGetVersion as NCCL defines it, and the communicator
   entry points torch calls (stubs that create nothing) */
int ncclGetVersion(int *version) {
  if (version == 0) return 4; /* ncclInvalidArgument */
  *version = NCCL_FIXTURE_CODE;
  return 0;
}
int ncclCommInitRankConfig(void *comm, int nranks, char id[128], int rank, void *config) { return 5; }
int ncclCommInitRank(void *comm, int nranks, char id[128], int rank) { return 5; }
`
	ncclFixtureMakefile = `include ../makefiles/version.mk
BUILDDIR ?= $(abspath ../build)
CODE := $(shell printf "%d%02d%02d" $(NCCL_MAJOR) $(NCCL_MINOR) $(NCCL_PATCH))
LIBTARGET := libnccl.so.$(NCCL_MAJOR).$(NCCL_MINOR).$(NCCL_PATCH)

lib: $(BUILDDIR)/include/nccl.h $(BUILDDIR)/lib/$(LIBTARGET)

$(BUILDDIR)/include/nccl.h: ../makefiles/version.mk
	mkdir -p $(BUILDDIR)/include
	printf '#define NCCL_MAJOR %s\n#define NCCL_MINOR %s\n#define NCCL_PATCH %s\n#define NCCL_VERSION_CODE %s\n' $(NCCL_MAJOR) $(NCCL_MINOR) $(NCCL_PATCH) $(CODE) > $@

$(BUILDDIR)/lib/$(LIBTARGET): nccl.c ../makefiles/version.mk
	mkdir -p $(BUILDDIR)/lib
	gcc -shared -fPIC -DNCCL_FIXTURE_CODE=$(CODE) -Wl,-soname,libnccl.so.$(NCCL_MAJOR) -o $@ nccl.c
	ln -sf $(LIBTARGET) $(BUILDDIR)/lib/libnccl.so.$(NCCL_MAJOR)
	ln -sf libnccl.so.$(NCCL_MAJOR) $(BUILDDIR)/lib/libnccl.so
`
)

// result returns the result with that id, failing the test when it is absent.
func result(t *testing.T, rs []CheckResult, id string) CheckResult {
	t.Helper()
	r, ok := check.Find(rs, id)
	if !ok {
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		t.Fatalf("no result %s among %s", id, strings.Join(ids, ", "))
	}
	return r
}
