package verify

import (
	"context"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/smoke"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// What the build recorded is the version the ranks' NVSHMEM must have: the built
// component's, or the wheel's from the build's toolchain.
func TestSmokeExpect(t *testing.T) {
	comp := func(src recipes.Source, version string) plan.PlanComponent {
		return plan.PlanComponent{Component: recipes.Component{Name: "nvshmem", Version: version, Source: src}}
	}
	built := &verifier{m: &manifest.Manifest{Plan: &plan.Plan{Components: []plan.PlanComponent{
		comp(recipes.Source{Git: &recipes.GitSource{URL: "https://github.com/NVIDIA/nvshmem"}}, "3.4.5-0")}}},
		prefixes: map[string]string{"nvshmem": "/opt/deepep/nvshmem"}}
	if e := built.smokeExpect(context.Background()); e.Version != "3.4.5-0" || e.LibDir != "/opt/deepep/nvshmem" {
		t.Errorf("built NVSHMEM: %+v", e)
	}
	wheel := &verifier{m: &manifest.Manifest{Plan: &plan.Plan{Components: []plan.PlanComponent{
		comp(recipes.Source{Python: &recipes.PythonSource{Package: "nvidia-nvshmem-cu13"}}, "")}},
		Toolchain: &toolchain.Toolchain{PythonPackages: map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu13": {Version: "3.4.5"}}}},
		prefixes: map[string]string{}, opts: VerifyOptions{Python: "python3"}}
	if e := wheel.smokeExpect(context.Background()); e.Version != "3.4.5" || !strings.Contains(e.From, "nvidia-nvshmem-cu13") {
		t.Errorf("wheel: %+v", e)
	}
	none := &verifier{m: &manifest.Manifest{Plan: &plan.Plan{}}}
	if e := none.smokeExpect(context.Background()); e != (smoke.Expect{}) {
		t.Errorf("no nvshmem: %+v", e)
	}
}

func TestSmokeEnv(t *testing.T) {
	env, taken := smokeEnv([]string{"PATH=/bin", "NVSHMEM_DISABLE_CUDA_VMM=1", "LD_PRELOAD=/p/lib/x.so"},
		[]string{"NVSHMEM_DISABLE_CUDA_VMM=1", "NVSHMEM_SYMMETRIC_SIZE=8G", "CUDA_VISIBLE_DEVICES=1", "LD_PRELOAD=/other.so", "FI_PROVIDER=efa"})
	if strings.Join(taken, ",") != "CUDA_VISIBLE_DEVICES,FI_PROVIDER,NVSHMEM_SYMMETRIC_SIZE" {
		t.Errorf("taken %v", taken)
	}
	if toolchain.GetenvFrom(env, "LD_PRELOAD") != "/p/lib/x.so" || toolchain.GetenvFrom(env, "NVSHMEM_SYMMETRIC_SIZE") != "8G" || toolchain.GetenvFrom(env, "PATH") != "/bin" {
		t.Errorf("env %v", env)
	}
}
