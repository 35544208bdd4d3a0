package verify

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/inspect"
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// The decision the recipes take, shown on the fixture: a library found through DT_RPATH
// (torch's NCCL) is not replaced by LD_LIBRARY_PATH, and is by LD_PRELOAD, which then
// leaves one copy mapped.
func TestPreloadNotLibraryPathReplacesTorchsNCCL(t *testing.T) {
	fixture.NeedTools(t, "gcc", "python3")
	site := fixture.TorchSite(t, "2.28.9", "2.28.9", nil)
	ours := fixture.NCCLLib(t, t.TempDir(), "2.28.3")
	base := append(CleanEnviron(os.Getenv), "PYTHONPATH="+site)
	mapped := func(env ...string) []string {
		t.Helper()
		paths, err := inspect.MappedLibs(context.Background(), "python3", []string{"torch"}, append(base, env...), `libnccl\.so`)
		if err != nil {
			t.Fatal(err)
		}
		return paths
	}
	if got := mapped("LD_LIBRARY_PATH=" + filepath.Dir(ours)); len(got) != 1 || !strings.HasPrefix(got[0], site) {
		t.Errorf("with LD_LIBRARY_PATH torch should still load its wheel's NCCL (DT_RPATH comes first): %v", got)
	}
	got := mapped("LD_PRELOAD=" + ours)
	if len(got) != 1 || !withinResolved(got[0], filepath.Dir(ours)) {
		t.Errorf("with LD_PRELOAD only the preloaded NCCL should be mapped: %v", got)
	}
	v := toolchain.ProbeNCCL(context.Background(), "python3", append(base, "LD_PRELOAD="+ours), nil)
	if v.Version != "2.28.3" || !strings.Contains(v.Source, "dlsym(RTLD_DEFAULT, ncclCommInitRankConfig)") {
		t.Errorf("the NCCL torch's communicator binds to: %+v", v)
	}
}

// The NCCL that runs is the library libtorch_cuda.so's ncclCommInitRank* binds to, not
// the nccl.h version torch was compiled with (torch.cuda.nccl.version(), 2.27.7 here):
// its own linked copy (the wheel's, 2.28.9) without a preload, the preloaded one (2.28.3)
// with it. The probe the manifest records and verify-install's process check both read it.
func TestNCCLThatRunsIsTheBoundLibrary(t *testing.T) {
	fixture.NeedTools(t, "gcc", "python3")
	site := fixture.TorchSite(t, "2.28.9", "2.27.7", nil)
	inst := t.TempDir()
	other := fixture.NCCLLib(t, filepath.Join(inst, "nccl"), "2.28.3")
	otherFile, err := filepath.EvalSymlinks(other)
	if err != nil {
		t.Fatal(err)
	}
	base := append(CleanEnviron(os.Getenv), "PYTHONPATH="+site)
	got := toolchain.ProbeNCCL(context.Background(), "python3", base, nil)
	if got.Version != "2.28.9" || got.Path != "nvidia/nccl/lib/libnccl.so.2.28.9" || got.TorchHeader != "2.27.7" ||
		!strings.Contains(got.Source, "dlsym(libtorch_cuda.so, ncclCommInitRankConfig)") {
		t.Errorf("no preload: want the wheel's 2.28.9 that libtorch_cuda.so links, got %+v", got)
	}
	got = toolchain.ProbeNCCL(context.Background(), "python3", append(base, "LD_PRELOAD="+other), nil)
	if got.Version != "2.28.3" || got.Path != otherFile || got.TorchHeader != "2.27.7" ||
		!strings.Contains(got.Source, "dlsym(RTLD_DEFAULT, ncclCommInitRankConfig)") {
		t.Errorf("LD_PRELOAD: want the preloaded 2.28.3, got %+v", got)
	}

	verify := func(p *plan.Plan, tc *toolchain.Toolchain, env ...string) CheckResult {
		t.Helper()
		v := &verifier{opts: VerifyOptions{Python: "python3"}, prefix: inst, m: &manifest.Manifest{Plan: p, Toolchain: tc},
			prefixes: map[string]string{"nccl": filepath.Join(inst, "nccl")}, env: append(base, env...), mapped: -1}
		r, ok := check.Find(v.oneCopy(context.Background(), processLibs()), "process.single-nccl")
		if !ok {
			t.Fatal("no process.single-nccl")
		}
		return r
	}
	built := &plan.Plan{Recipe: "t", Components: []plan.PlanComponent{{Component: recipes.Component{Name: "nccl", Version: "2.28.3-1",
		Source: recipes.Source{Git: &recipes.GitSource{URL: "https://example.invalid/nccl", Commit: strings.Repeat("a", 40)}}}}}}
	// the preloaded copy has libtorch_cuda's DT_NEEDED soname: the only one mapped
	if r := verify(built, nil, "LD_PRELOAD="+other); r.Status != check.Pass || !strings.Contains(r.Found, "torch calls "+otherFile+": NCCL 2.28.3") ||
		!strings.Contains(r.Found, "torch was compiled with nccl.h 2.27.7") {
		t.Errorf("the built NCCL preloaded: %+v", r)
	}
	if r := verify(built, nil); r.Status != check.Fail || !strings.Contains(r.Found, "NCCL 2.28.9") || !strings.Contains(r.Fix, manifest.EnvName) {
		t.Errorf("the built NCCL not preloaded: %+v", r)
	}
	torchs := &plan.Plan{Recipe: "t", Components: []plan.PlanComponent{{Component: recipes.Component{Name: "nccl",
		Source: recipes.Source{Python: &recipes.PythonSource{Package: "nvidia-nccl-cu12"}}}}}}
	if r := verify(torchs, &toolchain.Toolchain{NCCL: &toolchain.NCCLRuntime{Version: "2.28.9"}}); r.Status != check.Pass {
		t.Errorf("torch's NCCL as recorded: %+v", r)
	}
	// what torch.cuda.nccl.version() said at build is not what runs
	if r := verify(torchs, &toolchain.Toolchain{NCCL: &toolchain.NCCLRuntime{Version: "2.27.7"}}); r.Status != check.Fail ||
		!strings.Contains(r.Found, "NCCL 2.28.9, the build recorded 2.27.7") || !strings.Contains(r.Fix, "nvidia-nccl-cu12==2.27.7") {
		t.Errorf("the header version recorded: %+v", r)
	}
}

// nccl-version reads ncclGetVersion of the library and nccl.h, against the plan's version.
func TestNCCLVersionCheck(t *testing.T) {
	fixture.NeedTools(t, "gcc", "python3")
	prefix := t.TempDir()
	fixture.NCCLLib(t, prefix, "2.21.5")
	run := func(version string) []CheckResult {
		pc := &plan.PlanComponent{Component: recipes.Component{Name: "nccl", Version: version}}
		return checkNCCLVersion(context.Background(), &Subject{Component: pc, Root: prefix, Python: "python3"}, "lib/libnccl.so.2")
	}
	rs := run("2.21.5-1")
	if len(rs) != 1 || rs[0].Status != check.Pass || rs[0].Found != "ncclGetVersion 22105 (2.21.5); include/nccl.h 2.21.5" {
		t.Errorf("2.21.5-1 built: %+v", rs)
	}
	if rs := run("2.22.3-1"); len(rs) != 1 || rs[0].Status != check.Fail || !strings.Contains(rs[0].Why, "another release") {
		t.Errorf("a 2.21.5 library where the plan names 2.22.3-1: %+v", rs)
	}
	// a header from another release than the library fails too
	fixture.WriteFile(t, filepath.Join(prefix, "include", "nccl.h"), "#define NCCL_MAJOR 2\n#define NCCL_MINOR 22\n#define NCCL_PATCH 3\n")
	if rs := run("2.21.5-1"); rs[0].Status != check.Fail || !strings.Contains(rs[0].Why, "nccl.h") {
		t.Errorf("nccl.h of 2.22.3 beside a 2.21.5 library: %+v", rs)
	}
	if rs := checkNCCLVersion(context.Background(), &Subject{Component: &plan.PlanComponent{Component: recipes.Component{Name: "nccl", Version: "2.21.5-1"}},
		Root: prefix, Python: "python3"}, "lib/libnone.so"); rs[0].Status != check.Fail {
		t.Errorf("no library: %+v", rs)
	}
}

// The process check on the copies a job maps: one NCCL, the install's (built here) or the
// version recorded at build (torch's); two copies, or torch's where the install built its
// own, fail.
func TestOneNCCLInTheProcess(t *testing.T) {
	fixture.NeedTools(t, "gcc", "python3")
	// a module that also loads the wheel's NCCL by its path, as a second copy would come in
	second := map[string]string{"second_nccl": `import ctypes, glob, os, torch
ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(torch.__file__), "..", "nvidia", "nccl", "lib", "libnccl.so.2*"))[0])
`}
	site := fixture.TorchSite(t, "2.28.9", "2.28.9", second)
	inst := t.TempDir()
	ours := fixture.NCCLLib(t, filepath.Join(inst, "nccl"), "2.28.3")
	base := append(CleanEnviron(os.Getenv), "PYTHONPATH="+site)

	built := &plan.Plan{Recipe: "t", Components: []plan.PlanComponent{{Component: recipes.Component{Name: "nccl", Version: "2.28.3-1",
		Source: recipes.Source{Git: &recipes.GitSource{URL: "https://example.invalid/nccl", Commit: strings.Repeat("a", 40)}}}}}}
	torchs := &plan.Plan{Recipe: "t", Components: []plan.PlanComponent{{Component: recipes.Component{Name: "nccl",
		Source: recipes.Source{Python: &recipes.PythonSource{Package: "nvidia-nccl-cu12"}}}}}}
	verify := func(p *plan.Plan, tc *toolchain.Toolchain, modules []string, env ...string) CheckResult {
		t.Helper()
		for _, m := range modules {
			p.Components = append(p.Components, plan.PlanComponent{Component: recipes.Component{Name: "m" + m, Checks: []recipes.Check{{Import: &recipes.ImportCheck{Module: m}}}}})
		}
		v := &verifier{opts: VerifyOptions{Python: "python3"}, prefix: inst, m: &manifest.Manifest{Plan: p, Toolchain: tc},
			prefixes: map[string]string{}, env: append(base, env...), mapped: -1}
		if p.Components[0].Source.Python == nil {
			v.prefixes["nccl"] = filepath.Join(inst, "nccl")
		}
		rs := v.oneCopy(context.Background(), processLibs())
		r, ok := check.Find(rs, "process.single-nccl")
		if !ok {
			t.Fatalf("no process.single-nccl in %+v", rs)
		}
		if n, _ := check.Find(rs, "process.single-nvshmem"); n.Status != check.Skip {
			t.Errorf("no nvshmem component: %+v", n)
		}
		return r
	}
	if r := verify(built, nil, nil, "LD_PRELOAD="+ours); r.Status != check.Pass || !strings.Contains(r.Found, inst) {
		t.Errorf("the install's NCCL preloaded: %+v", r)
	}
	if r := verify(built, nil, nil, "LD_LIBRARY_PATH="+filepath.Dir(ours)); r.Status != check.Fail || !strings.Contains(r.Found, "not the install's nccl") || r.Fix == "" {
		t.Errorf("torch's NCCL where the install built its own: %+v", r)
	}
	// a module that also loads the wheel's NCCL by path: two copies mapped, and torch's
	// communicator binds to the preloaded install's, which comes first in the global scope
	oursFile, err := filepath.EvalSymlinks(ours)
	if err != nil {
		t.Fatal(err)
	}
	if r := verify(built, nil, []string{"second_nccl"}, "LD_PRELOAD="+ours); r.Status != check.Warn || !strings.Contains(r.Found, "2 libnccl files are mapped") ||
		!strings.Contains(r.Found, "only "+oursFile+" runs torch's communicator") {
		t.Errorf("two NCCLs mapped, torch bound to the install's: %+v", r)
	}
	// the same second copy when the install's is not preloaded: torch runs its own
	if r := verify(built, nil, []string{"second_nccl"}, "LD_LIBRARY_PATH="+filepath.Dir(ours)); r.Status != check.Fail {
		t.Errorf("two NCCLs mapped, torch bound to its own: %+v", r)
	}
	// a torch whose import opens its wheel's NCCL by path, through a handle of its own (as
	// once thought of torch 2.11): the preloaded copy still comes first in the global
	// scope, so that is the one a communicator runs, with both mapped
	init := filepath.Join(site, "torch", "__init__.py")
	body, err := os.ReadFile(init)
	if err != nil {
		t.Fatal(err)
	}
	fixture.WriteFile(t, init, `import ctypes, glob, os, types
_nccl = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(__file__), "..", "nvidia", "nccl", "lib", "libnccl.so.2"))[0])
cuda = types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: (2, 28, 9)))
`)
	if r := verify(built, nil, nil, "LD_PRELOAD="+ours); r.Status != check.Warn || !strings.Contains(r.Found, "2 libnccl files are mapped") ||
		!strings.Contains(r.Found, "torch calls "+oursFile+": NCCL 2.28.3") || strings.Contains(r.Found, "calls its own") {
		t.Errorf("two NCCLs mapped, the preloaded one bound: %+v", r)
	}
	fixture.WriteFile(t, init, string(body))
	recorded := &toolchain.Toolchain{NCCL: &toolchain.NCCLRuntime{Version: "2.28.9", Source: "ncclGetVersion"}}
	if r := verify(torchs, recorded, nil); r.Status != check.Pass || !strings.Contains(r.Found, ": NCCL 2.28.9 (ncclGetVersion 22809") {
		t.Errorf("torch's NCCL, as recorded: %+v", r)
	}
	older := &toolchain.Toolchain{NCCL: &toolchain.NCCLRuntime{Version: "2.27.3"}}
	if r := verify(torchs, older, nil); r.Status != check.Fail || !strings.Contains(r.Found, "the build recorded 2.27.3") {
		t.Errorf("torch's NCCL is not the one recorded at build: %+v", r)
	}
}
