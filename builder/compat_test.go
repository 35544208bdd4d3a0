package builder

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

func TestPreflightFacts(t *testing.T) {
	rules, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	h, err := compat.LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	p := fixture.PlanOf(t, "gcp-b200")
	probed := &toolchain.Toolchain{CUDA: "12.6", Torch: "2.10.0+cu129", PythonVersion: "3.12.3", RDMACore: "mlx5dv.h"}
	f := toolchain.PreflightFacts(plan.FactsFromPlan(p), p, probed)
	if f.Toolchain.CUDA != "12.6" || !slices.Equal(f.Toolchain.Present, []string{"rdma-core"}) {
		t.Fatalf("preflight facts: %+v", f.Toolchain)
	}
	fs, err := compat.Evaluate(context.Background(), rules, f, compat.StagePreflight, h)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, x := range fs {
		if x.Severity == compat.SeverityError && !x.Unknown {
			got[x.ID+"/"+x.Case] = true
		}
	}
	// sm_100 on CUDA 12.6; rdma-core without MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT is fine
	// (NVSHMEM defines it itself, R22)
	if !got["R11/sm100-cuda"] || len(got) != 1 {
		t.Errorf("want R11/sm100-cuda alone, got %v", got)
	}
	// the wheel's installed version replaces the recipe's constraint
	sp := fixture.PlanOf(t, "single-node")
	sf := toolchain.PreflightFacts(plan.FactsFromPlan(sp), sp, &toolchain.Toolchain{PythonPackages: map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu12": {Version: "3.4.5"}}})
	if nv, _ := sf.Component("nvshmem"); nv.Version != "3.4.5" || !slices.Contains(sf.Toolchain.Present, "nvshmem-wheel") {
		t.Errorf("wheel at preflight: %+v %v", nv, sf.Toolchain.Present)
	}
}

// gcp-b200 on NVSHMEM 3.4.5 passes preflight on Ubuntu 24.04's rdma-core, whose mlx5dv.h
// lacks MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (the GPU machine's image), and still needs
// rdma-core headers.
func TestPreflightUbuntu2404RDMACore(t *testing.T) {
	p := fixture.PlanOf(t, "gcp-b200", "nvshmem.version=3.4.5", "nccl.package=nvidia-nccl-cu13")
	gpuImage := &toolchain.Toolchain{CUDA: "13.0", Torch: "2.11.0+cu130", PythonVersion: "3.12.3", Setuptools: "68.1.2", GCC: "13.3.0",
		CMake: "4.4.0", RDMACore: "/usr/include/infiniband/mlx5dv.h", RDMADataDirect: false,
		PythonPackages: map[string]toolchain.PythonPackage{"nvidia-nccl-cu13": {Version: "2.28.9"}}}
	if err := toolchain.Preflight(p, gpuImage); err != nil {
		t.Errorf("gcp-b200 on Ubuntu 24.04's rdma-core: %v", err)
	}
	if n := toolchain.NeedsOf(p); !n.RDMACore {
		t.Error("NVSHMEM 3.4.5 with IBGDA needs rdma-core headers")
	}
	noRDMA := *gpuImage
	noRDMA.RDMACore = ""
	err := toolchain.Preflight(p, &noRDMA)
	if err == nil || !strings.Contains(err.Error(), "rdma-core headers") {
		t.Errorf("no rdma-core headers at all: %v", err)
	}
}

// gpuMachine is the toolchain the probe reports on the GPU machine: Ubuntu 24.04 with
// rdma-core 50 (no data direct), CUDA 13.0, gcc 13.3, cmake 4.4, python 3.12 with torch
// 2.11.0+cu130 and the nvidia-nvshmem-cu13 3.4.5 and nvidia-nccl-cu13 2.28.9 wheels,
// OpenMPI; no GDRCopy headers, no libfabric headers.
func gpuMachine() *toolchain.Toolchain {
	return &toolchain.Toolchain{OS: "linux", Arch: "amd64", CUDAHome: "/usr/local/cuda", NVCC: "/usr/local/cuda/bin/nvcc", CUDA: "13.0",
		CCCL: "/usr/local/cuda/include/cccl", Python: "/usr/bin/python3", PythonVersion: "3.12.3", Setuptools: "68.1.2", Wheel: "0.48.0",
		Torch: "2.11.0+cu130", TorchCUDA: "13.0", GCC: "13.3.0", GXX: "13.3.0", CMake: "4.4.0", Ninja: "1.11.1", Git: "2.43.0",
		RDMACore: "/usr/include/infiniband/mlx5dv.h", MPIHome: "/usr/lib/x86_64-linux-gnu/openmpi",
		PythonPackages: map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu13": {Version: "3.4.5"}, "nvidia-nccl-cu13": {Version: "2.28.9"}}}
}

// What the build host's judges (the toolchain check and the rules at preflight) say on
// the GPU machine, with the plan's rules before them.
func gpuMachineVerdict(t *testing.T, recipe string, sets ...string) (planErr, host error) {
	t.Helper()
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: recipe, Sets: sets, CacheDir: filepath.Join(t.TempDir(), "cache")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := j.Findings(ctx, nil); err != nil {
		return err, nil
	}
	_, err = j.Findings(ctx, gpuMachine())
	return nil, buildHostVerdict(toolchain.Preflight(j.Plan, gpuMachine()), err)
}

// R22's acceptance on the GPU machine: gcp-b200 on NVSHMEM 3.4.5 passes the plan's rules,
// the toolchain check and the rules at preflight once its env sizes NVSHMEM's fixed heap
// (R32); without that size the plan stops at R32.
func TestGCPB200OnTheGPUMachine(t *testing.T) {
	if planErr, host := gpuMachineVerdict(t, "gcp-b200", "nvshmem.version=3.4.5", "env.NVSHMEM_SYMMETRIC_SIZE=4G", "nccl.package=nvidia-nccl-cu13"); planErr != nil || host != nil {
		t.Fatalf("gcp-b200 on 3.4.5 with a 4 GiB heap: plan %v; preflight %v", planErr, host)
	}
	planErr, _ := gpuMachineVerdict(t, "gcp-b200", "nvshmem.version=3.4.5", "env.NVSHMEM_SYMMETRIC_SIZE=", "nccl.package=nvidia-nccl-cu13")
	var re *RulesError
	if !errors.As(planErr, &re) || re.Stage != compat.StagePlan || len(re.Findings) != 1 || re.Findings[0].Name() != "R32/too-small" {
		t.Fatalf("gcp-b200 without NVSHMEM_SYMMETRIC_SIZE: %v", planErr)
	}
}

// ibrc-dualport on the GPU machine: CUDA 13 builds NVSHMEM 3.2.5-1 through our C++17 set,
// so no rule stops it (R33 did before the set); the GDRCopy headers it lacks do, before
// any work (exit 3); on a CUDA 12.9 host with GDRCopy nothing stops it.
func TestIBRCDualportOnTheGPUMachine(t *testing.T) {
	planErr, host := gpuMachineVerdict(t, "ibrc-dualport")
	if planErr != nil {
		t.Fatalf("plan: %v", planErr)
	}
	var re *RulesError
	var pe *toolchain.PreflightError
	if errors.As(host, &re) || !errors.As(host, &pe) {
		t.Fatalf("want the missing GDRCopy alone, got %v", host)
	}
	var ec interface{ ExitCode() int }
	if !errors.As(host, &ec) || ec.ExitCode() != 3 || !strings.Contains(host.Error(), "GDRCopy") {
		t.Errorf("verdict: %v", host)
	}
	// a rule left undecided by what is missing says nothing; the missing tool does
	p := fixture.PlanOf(t, "ibrc-dualport")
	noCUDA := *gpuMachine()
	noCUDA.CUDA, noCUDA.NVCC, noCUDA.CUDAHome = "", "", ""
	undecided := &RulesError{Recipe: p.Recipe, Stage: compat.StagePreflight, Findings: []compat.Finding{{ID: "R33", Unknown: true, IfDecided: compat.SeverityError}}}
	if err := buildHostVerdict(toolchain.Preflight(p, &noCUDA), undecided); errors.As(err, &re) || !errors.As(err, &pe) {
		t.Errorf("an undecided rule beside a missing CUDA: %v", err)
	}
	if err := buildHostVerdict(nil, undecided); !errors.As(err, &re) {
		t.Errorf("rules alone: %v", err)
	}
	cuda12 := *gpuMachine()
	cuda12.CUDA, cuda12.Torch, cuda12.GDRCopyHome = "12.9", "2.10.0+cu129", "/usr"
	cuda12.PythonPackages = map[string]toolchain.PythonPackage{"nvidia-nccl-cu12": {Version: "2.21.5"}}
	f := toolchain.PreflightFacts(plan.FactsFromPlan(p), p, &cuda12)
	rules, _ := compat.LoadRules()
	h, _ := compat.LoadHistory()
	fs, err := compat.Evaluate(context.Background(), rules, f, compat.StagePreflight, h)
	if err != nil || compat.HasErrors(fs) || toolchain.Preflight(p, &cuda12) != nil {
		t.Errorf("CUDA 12.9 with GDRCopy: %v %v %v", fs, err, toolchain.Preflight(p, &cuda12))
	}
}

// TestEPv2PreflightRefusesOldNCCL: on a build host like the GPU validation machine
// (torch 2.11 with the nvidia-nccl-cu13 2.28.9 wheel), the probe reads the NCCL wheel's
// version, the toolchain preflight passes, and the rules at preflight refuse EPv2 with
// R18, naming the version found; NCCL 2.30.4 passes.
func TestEPv2PreflightRefusesOldNCCL(t *testing.T) {
	site := t.TempDir()
	for dist, version := range map[string]string{"nvidia-nccl-cu13": "2.28.9", "nvidia-nvshmem-cu13": "3.4.5"} {
		mod := strings.TrimPrefix(strings.TrimSuffix(dist, "-cu13"), "nvidia-")
		info := filepath.Join(site, strings.ReplaceAll(dist, "-", "_")+"-"+version+".dist-info")
		for _, d := range []string{info, filepath.Join(site, "nvidia", mod, "lib")} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		meta := "Metadata-Version: 2.1\nName: " + dist + "\nVersion: " + version + "\n"
		if err := os.WriteFile(filepath.Join(info, "METADATA"), []byte(meta), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PYTHONPATH", site)
	p := fixture.PlanOf(t, "deepep-v2")
	var pkgs []string
	for _, c := range p.Components {
		if c.Source.Python != nil {
			pkgs = append(pkgs, c.Source.Python.Package)
		}
	}
	tc := (&toolchain.Prober{Getenv: os.Getenv, Packages: pkgs}).Probe(context.Background())
	if tc.PythonVersion == "" {
		t.Skip("no python3 here")
	}
	nccl := tc.PythonPackages["nvidia-nccl-cu13"]
	if nccl.Version != "2.28.9" || !strings.HasSuffix(nccl.Dir, filepath.Join("nvidia", "nccl")) {
		t.Fatalf("the probe found NCCL %+v", tc.PythonPackages)
	}
	// what the GPU machine has and this one lacks
	tc.CUDA, tc.CUDAHome, tc.Torch, tc.TorchCUDA, tc.GCC, tc.GXX, tc.Setuptools = "13.0", "/usr/local/cuda", "2.11.0+cu130", "13.0", "13.3", "13.3", "70.0"
	if err := toolchain.Preflight(p, tc); err != nil {
		t.Fatalf("the toolchain preflight refuses before the rules: %v", err)
	}
	rules, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	h, err := compat.LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	evaluate := func() []compat.Finding {
		fs, err := compat.Evaluate(context.Background(), rules, toolchain.PreflightFacts(plan.FactsFromPlan(p), p, tc), compat.StagePreflight, h)
		if err != nil {
			t.Fatal(err)
		}
		var errs []compat.Finding
		for _, f := range fs {
			if f.Severity == compat.SeverityError {
				errs = append(errs, f)
			}
		}
		return errs
	}
	errs := evaluate()
	if len(errs) != 1 || errs[0].ID != "R18" || errs[0].Case != "epv2-nccl" || errs[0].Unknown ||
		!strings.Contains(strings.Join(errs[0].Because, "; "), "2.28.9") {
		t.Fatalf("want R18/epv2-nccl naming 2.28.9, got %+v", errs)
	}
	tc.PythonPackages["nvidia-nccl-cu13"] = toolchain.PythonPackage{Version: "2.30.4", Dir: nccl.Dir}
	if errs := evaluate(); len(errs) != 0 {
		t.Errorf("NCCL 2.30.4 is refused: %+v", errs)
	}
	if f := toolchain.PreflightFacts(plan.FactsFromPlan(p), p, tc); !slices.Contains(f.Toolchain.Present, "nvshmem-wheel") {
		t.Errorf("the NVSHMEM wheel is not present: %v", f.Toolchain.Present)
	}
}

// The job's shape reaches the rules from the recipe's runtime: gcp-b200 (DeepEP v1) with
// 4 GPUs a node and 16 ranks in normal mode stops at plan on R47, and hidden 7000 in
// low-latency mode on R48; the same recipe with 8 GPUs a node and hidden 7168 does not.
func TestJobShapeRefusesAtPlan(t *testing.T) {
	base := []string{"nvshmem.version=3.4.5", "env.NVSHMEM_SYMMETRIC_SIZE=4G", "nccl.package=nvidia-nccl-cu13"}
	stops := func(t *testing.T, sets ...string) []string {
		t.Helper()
		j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "gcp-b200", Sets: append(slices.Clone(base), sets...),
			CacheDir: filepath.Join(t.TempDir(), "cache")})
		if err != nil {
			t.Fatal(err)
		}
		_, err = j.Findings(context.Background(), nil)
		var re *RulesError
		if err == nil {
			return nil
		}
		if !errors.As(err, &re) || re.Stage != compat.StagePlan {
			t.Fatalf("want a plan-stage refusal or none, got %v", err)
		}
		var ids []string
		for _, f := range re.Findings {
			if !f.Unknown { // an undecided rule stops a plan too; these must be decided
				ids = append(ids, f.Name())
			}
		}
		return ids
	}
	if ids := stops(t, "runtime.gpus-per-node=4", "runtime.ranks=16", "runtime.low-latency=false"); !slices.Contains(ids, "R47") {
		t.Errorf("4 GPUs a node, 16 ranks, normal mode: want R47, got %v", ids)
	}
	// without patch sets the commit stands for SWITCH_HIDDEN's list before the build;
	// with PR 466 (a patch set may add sizes) the build reads it (TestRulesAfterBuildHiddenSizes)
	if ids := stops(t, "runtime.hidden=7000", "runtime.low-latency=true", "deepep.patches="); !slices.Contains(ids, "R48/by-commit") {
		t.Errorf("hidden 7000 in low-latency mode: want R48, got %v", ids)
	}
	if ids := stops(t, "runtime.hidden=7000", "runtime.low-latency=true"); slices.Contains(ids, "R48/by-commit") {
		t.Errorf("hidden 7000 with a patch set: R48 decided before the build: %v", ids)
	}
	if ids := stops(t, "runtime.gpus-per-node=8", "runtime.ranks=16", "runtime.low-latency=true", "runtime.hidden=7168"); len(ids) != 0 {
		t.Errorf("8 GPUs a node, hidden 7168, low-latency: want no refusal, got %v", ids)
	}
}
