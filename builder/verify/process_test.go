package verify

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// nvshmemHostLib builds dir/lib/libnvshmem_host.so.VERSION (SONAME libnvshmem_host.so.3)
// with its libnvshmem_host.so.3 link, as NVSHMEM installs it; its
// nvshmemx_vendor_get_version_info reports version. extra is more C source (symbols a
// newer release adds). It returns the link.
func nvshmemHostLib(t *testing.T, dir, version, extra string) string {
	t.Helper()
	var major, minor, patch int
	if _, err := fmt.Sscanf(version, "%d.%d.%d", &major, &minor, &patch); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "host.c")
	fixture.WriteFile(t, src, fmt.Sprintf(`void nvshmemx_vendor_get_version_info(int *a, int *b, int *c) { *a = %d; *b = %d; *c = %d; }
int nvshmemid_hostlib_init_attr(unsigned v, void *attr) { return 0; }
void *nvshmem_malloc(unsigned long n) { return 0; }
%s`, major, minor, patch, extra))
	lib := filepath.Join(dir, "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-Wl,-soname,libnvshmem_host.so.3", "-o", filepath.Join(lib, "libnvshmem_host.so."+version), src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	if err := os.Symlink("libnvshmem_host.so."+version, filepath.Join(lib, "libnvshmem_host.so.3")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(lib, "libnvshmem_host.so.3")
}

// sharedObject compiles src into out, linked with args (libraries, rpaths).
func sharedObject(t *testing.T, out, src string, args ...string) {
	t.Helper()
	c := filepath.Join(t.TempDir(), "obj.c")
	fixture.WriteFile(t, c, src)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if o, err := exec.Command("gcc", append([]string{"-shared", "-fPIC", "-o", out, c}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, o)
	}
}

// A job's process as measured with the efa-aws install: NVSHMEM built here and preloaded,
// torch's nvidia-nvshmem wheel opened by its full path (RTLD_GLOBAL, as torch loads its
// CUDA wheels), DeepEP's extension with DT_NEEDED libnvshmem_host.so.3. Two files are
// mapped and DeepEP's symbols bind to the preloaded one: the check passes, saying so.
// The preload swapped for the wheel's, DeepEP binds to the wheel's: a device/host
// mismatch, which fails.
func TestNVSHMEMProcessBinding(t *testing.T) {
	fixture.NeedTools(t, "gcc", "python3")
	inst := t.TempDir()
	ours := nvshmemHostLib(t, filepath.Join(inst, "nvshmem"), "3.4.5", "")
	ext := filepath.Join(inst, "deepep", "python", "deep_ep_cpp.so")
	// nvshmem_init, which no library defines, a weak reference here (torch 2.11's
	// libtorch_nvshmem.so leaves it unbound too): nothing binds it, and nothing fails for it
	sharedObject(t, ext, "int nvshmemid_hostlib_init_attr(unsigned, void *);\nvoid *nvshmem_malloc(unsigned long);\n"+
		"__attribute__((weak)) int nvshmem_init(void);\n"+
		"int deep_ep_fixture_init(void) { return nvshmemid_hostlib_init_attr(nvshmem_init ? nvshmem_init() : 0, nvshmem_malloc(8)); }\n",
		ours, "-Wl,-rpath,$ORIGIN/../../nvshmem/lib")
	fixture.WriteFile(t, filepath.Join(inst, "deepep", "python", "deep_ep", "__init__.py"), `import ctypes, os, torch
_cpp = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "..", "deep_ep_cpp.so"))
`)
	// torch and its wheel: wheelVersion's libnvshmem_host in nvidia/nvshmem/lib, and
	// torch's lib/libtorch_nvshmem.so linking it (DT_RPATH), which takes newer symbols
	// where the wheel has them
	site := func(wheelVersion string, newer bool) string {
		s := t.TempDir()
		extra, use := "", ""
		if newer {
			extra = "int nvshmemx_fixture_newer_api(void) { return 0; }\n"
			use = "int nvshmemx_fixture_newer_api(void);\nint torch_fixture_newer(void) { return nvshmemx_fixture_newer_api(); }\n"
		}
		wheel := nvshmemHostLib(t, filepath.Join(s, "nvidia", "nvshmem"), wheelVersion, extra)
		sharedObject(t, filepath.Join(s, "torch", "lib", "libtorch_nvshmem.so"), "void *nvshmem_malloc(unsigned long);\n"+
			"void *torch_fixture_alloc(void) { return nvshmem_malloc(8); }\n"+use, wheel, "-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/../../nvidia/nvshmem/lib")
		fixture.WriteFile(t, filepath.Join(s, "torch", "__init__.py"), `import ctypes, os
_here = os.path.dirname(__file__)
_nvshmem = ctypes.CDLL(os.path.join(_here, "..", "nvidia", "nvshmem", "lib", "libnvshmem_host.so.3"), mode=ctypes.RTLD_GLOBAL)
_lib = ctypes.CDLL(os.path.join(_here, "lib", "libtorch_nvshmem.so"))
`)
		return s
	}
	real := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// the NVSHMEM the recipe takes: built here (git), patched, or the wheel torch loads
	// (recorded at build with its version, wheel)
	verifyFrom := func(s string, patched bool, wheel string, env ...string) (CheckResult, *verifier) {
		t.Helper()
		nv := plan.PlanComponent{Component: recipes.Component{Name: "nvshmem", Version: "3.4.5-0",
			Source: recipes.Source{Git: &recipes.GitSource{URL: "https://example.invalid/nvshmem", Commit: strings.Repeat("b", 40)}}}}
		if patched {
			nv.Patches = []string{"p"}
		}
		var tc *toolchain.Toolchain
		prefixes := map[string]string{"nvshmem": filepath.Join(inst, "nvshmem"), "deepep": filepath.Join(inst, "deepep")}
		if wheel != "" {
			nv.Version, nv.Source = "", recipes.Source{Python: &recipes.PythonSource{Package: "nvidia-nvshmem-cu13"}}
			tc = &toolchain.Toolchain{PythonPackages: map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu13": {Version: wheel}}}
			delete(prefixes, "nvshmem")
		}
		p := &plan.Plan{Recipe: "t", Components: []plan.PlanComponent{nv, {Component: recipes.Component{Name: "deepep", Version: "1.2.1",
			Source: recipes.Source{Git: &recipes.GitSource{URL: "https://example.invalid/deepep", Commit: strings.Repeat("c", 40)}},
			Checks: []recipes.Check{{Import: &recipes.ImportCheck{Module: "deep_ep"}}}}}}}
		v := &verifier{opts: VerifyOptions{Python: "python3"}, prefix: inst, m: &manifest.Manifest{Plan: p, Toolchain: tc}, prefixes: prefixes,
			env: append(CleanEnviron(os.Getenv), append([]string{"PYTHONPATH=" + s + ":" + filepath.Join(inst, "deepep", "python")}, env...)...), mapped: -1}
		r, ok := check.Find(v.oneCopy(context.Background(), processLibs()), "process.single-nvshmem")
		if !ok {
			t.Fatal("no process.single-nvshmem")
		}
		return r, v
	}
	verify := func(s string, patched bool, env ...string) (CheckResult, *verifier) {
		t.Helper()
		return verifyFrom(s, patched, "", env...)
	}

	same := site("3.4.5", false)
	r, v := verify(same, false, "LD_PRELOAD="+ours)
	if r.Status != check.Pass || !strings.Contains(r.Found, "2 libnvshmem_host files are mapped") ||
		!strings.Contains(r.Found, "deepep/python/deep_ep_cpp.so binds its NVSHMEM host symbols to "+real(ours)+" (NVSHMEM 3.4.5; 2 symbols)") ||
		!strings.Contains(r.Found, "DeepEP runs only "+real(ours)) || !strings.Contains(r.Found, "no library provides 1 NVSHMEM symbol (nvshmem_init)") || !strings.Contains(r.Found, "torch binds to the same NVSHMEM") || r.Fix != "" ||
		strings.Contains(r.Why+r.Found, "fail") {
		t.Errorf("the install's NVSHMEM preloaded, the wheel's mapped too: %+v", r)
	}
	if v.mapped != 2 || !slices.Equal(v.loaded, []string{real(ours)}) {
		t.Errorf("the facts the host rules read: mapped %d, loaded %v", v.mapped, v.loaded)
	}
	// the wheel's preloaded instead: DeepEP's DT_NEEDED libnvshmem_host.so.3 is the wheel's
	newer := site("3.7.2", false)
	wheel := filepath.Join(newer, "nvidia", "nvshmem", "lib", "libnvshmem_host.so.3")
	r, _ = verify(newer, false, "LD_PRELOAD="+wheel)
	if r.Status != check.Fail || !strings.Contains(r.Found, "deep_ep_cpp.so binds its NVSHMEM host symbols to "+real(wheel)+" (NVSHMEM 3.7.2") ||
		!strings.Contains(r.Found, "is not the install's NVSHMEM under "+filepath.Join(inst, "nvshmem")) || !strings.Contains(r.Fix, manifest.EnvName) ||
		!strings.Contains(r.Fix, "remove "+wheel+" from the job's LD_PRELOAD") {
		t.Errorf("the wheel's NVSHMEM preloaded: %+v", r)
	}
	// torch 2.15's case: it takes a symbol the preloaded NVSHMEM lacks from its wheel's
	// copy (global scope), so its symmetric memory runs another NVSHMEM than DeepEP's
	r, _ = verify(site("3.7.2", true), false, "LD_PRELOAD="+ours)
	if r.Status != check.Warn || !strings.Contains(r.Found, "torch binds to another NVSHMEM than DeepEP") ||
		!strings.Contains(r.Found, "torch's lib/libtorch_nvshmem.so binds its NVSHMEM host symbols to") || strings.Contains(r.Found, "fail") {
		t.Errorf("torch on another NVSHMEM than DeepEP: %+v", r)
	}
	// a patched NVSHMEM preloaded: DeepEP binds to it, and so does torch, built against
	// stock headers (R9)
	if r, _ := verify(same, true, "LD_PRELOAD="+ours); r.Status != check.Warn || !strings.Contains(r.Found, "R9") {
		t.Errorf("a patched NVSHMEM that torch binds to: %+v", r)
	}
	// the wheel's NVSHMEM, as the recipe takes it: no preload, DeepEP binds to the copy
	// torch loaded first, of the version recorded at build, or of another one
	if r, _ := verifyFrom(same, false, "3.4.5"); r.Status != check.Pass || !strings.Contains(r.Expected, "NVSHMEM 3.4.5, the nvidia-nvshmem-cu13") {
		t.Errorf("the wheel's NVSHMEM, as recorded: %+v", r)
	}
	if r, _ := verifyFrom(same, false, "3.3.20"); r.Status != check.Fail || !strings.Contains(r.Found, "is NVSHMEM 3.4.5, the build recorded 3.3.20") ||
		!strings.Contains(r.Fix, "pip install nvidia-nvshmem-cu13==3.3.20") {
		t.Errorf("the wheel's NVSHMEM of another version than recorded: %+v", r)
	}
}
