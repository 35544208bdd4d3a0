package verify

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/wheel"
	"github.com/epbuild/epbuild/recipes"
)

// The python-wheel route: the NCCL built here is installed into torch's environment as
// the nvidia-nccl package, and nothing preloads it. process.single-nccl passes when the
// library torch binds is byte for byte the install's and the only libnccl mapped; it
// fails, naming both files and the pip command, when torch's environment still holds
// the original wheel, and when a second libnccl is mapped beside the right one.
func TestNCCLWheelRoute(t *testing.T) {
	fixture.NeedTools(t, "gcc", "python3")
	inst := t.TempDir()
	ours := fixture.NCCLLib(t, filepath.Join(inst, "nccl"), "2.30.7")
	oursFile, err := filepath.EvalSymlinks(ours)
	if err != nil {
		t.Fatal(err)
	}
	// a module of the recipe that maps the install's own copy by its path, as a library
	// linked against it with a RUNPATH would
	ep := map[string]string{"fake_ep": fmt.Sprintf("import ctypes\nctypes.CDLL(%q)\n", ours)}
	// installs the wheel into site: its libnccl.so.2 becomes a regular file of ours' bytes
	install := func(site string) string {
		t.Helper()
		lib := filepath.Join(site, "nvidia", "nccl", "lib", "libnccl.so.2")
		b, err := os.ReadFile(ours)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(lib); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(lib, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return lib
	}
	whl := "nvidia_nccl_cu12-2.30.7+epbuild.0123456789ab-py3-none-linux_x86_64.whl"
	verify := func(site string, imports ...string) CheckResult {
		t.Helper()
		p := &plan.Plan{Recipe: "t", Components: []plan.PlanComponent{{Component: recipes.Component{Name: "nccl", Version: "2.30.7-1",
			Source:      recipes.Source{Git: &recipes.GitSource{URL: "https://example.invalid/nccl", Commit: strings.Repeat("a", 40)}},
			PythonWheel: &recipes.PythonWheel{Package: "nvidia-nccl-cu12", Dir: "nvidia/nccl", Files: []string{"lib/libnccl.so.2", "include"}}}}}}
		for _, m := range imports {
			p.Components = append(p.Components, plan.PlanComponent{Component: recipes.Component{Name: "ep", Checks: []recipes.Check{{Import: &recipes.ImportCheck{Module: m}}}}})
		}
		m := &manifest.Manifest{Plan: p, Wheels: []manifest.WheelFile{{Component: "nccl", Info: wheel.Info{File: whl},
			Replaces: &manifest.Replaced{Package: "nvidia-nccl-cu12", Version: "2.28.9"}}}}
		v := &verifier{opts: VerifyOptions{Python: "python3"}, prefix: inst, m: m,
			prefixes: map[string]string{"nccl": filepath.Join(inst, "nccl")}, env: append(CleanEnviron(os.Getenv), "PYTHONPATH="+site), mapped: -1}
		r, ok := check.Find(v.oneCopy(context.Background(), processLibs()), "process.single-nccl")
		if !ok {
			t.Fatal("no process.single-nccl")
		}
		return r
	}
	fix := "python3 -m pip install --no-deps --force-reinstall " + whl

	// the wheel installed: torch's own RPATH loads the built NCCL, the only copy
	site := fixture.TorchSite(t, "2.28.9", "2.28.9", ep)
	lib := install(site)
	if r := verify(site); r.Status != check.Pass || !strings.Contains(r.Found, "torch calls "+lib+": NCCL 2.30.7") ||
		!strings.Contains(r.Found, "byte for byte the install's "+ours) || !strings.Contains(r.Found, "the only libnccl mapped") {
		t.Errorf("the wheel installed: %+v", r)
	}

	// the original wheel still there: torch runs its 2.28.9, not the install's bytes
	orig := fixture.TorchSite(t, "2.28.9", "2.28.9", ep)
	origFile, err := filepath.EvalSymlinks(filepath.Join(orig, "nvidia", "nccl", "lib", "libnccl.so.2"))
	if err != nil {
		t.Fatal(err)
	}
	if r := verify(orig); r.Status != check.Fail || !strings.Contains(r.Found, origFile+" (sha256 ") ||
		!strings.Contains(r.Found, "is not the install's "+ours) || !strings.Contains(r.Fix, fix) {
		t.Errorf("the original wheel: %+v", r)
	}

	// the wheel installed, and the install's copy mapped too: the bound one is right,
	// but two are mapped
	if r := verify(site, "fake_ep"); r.Status != check.Fail || !strings.Contains(r.Found, "2 libnccl files are mapped") ||
		!strings.Contains(r.Found, lib) || !strings.Contains(r.Found, oursFile) || !strings.Contains(r.Found, "one NCCL per process") ||
		!strings.Contains(r.Fix, fix) {
		t.Errorf("two copies mapped: %+v", r)
	}
}
