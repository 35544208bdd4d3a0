package plan

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// --set nvshmem.version=3.7.1 (published only prebuilt) takes NVIDIA's archive for the
// plan's CUDA major and copies it instead of building; the plan says it is not built here.
func TestApplyCatalogPrebuilt(t *testing.T) {
	res, err := NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	const (
		sha12 = "bd58642cf713c4b4fdf621cc61fc6fed5aaca4346da6a23e4a7e7eb9083afced"
		sha13 = "cbbfcef4c59f3a36e0ba7b5cd3d430e692f15765126c0463879e510190267a57"
	)
	for _, c := range []struct {
		sets []string
		sha  string
	}{
		{[]string{"nvshmem.version=3.7.1", "toolchain.cuda=13.0"}, sha13},
		{[]string{"nvshmem.version=3.7.1", "toolchain.torch=2.11.0+cu130"}, sha13},
		{[]string{"nvshmem.version=3.7.1", "toolchain.cuda=12.9"}, sha12},
	} {
		p, err := res.Resolve("gcp-b200", c.sets)
		if err != nil {
			t.Fatalf("%v: %v", c.sets, err)
		}
		nv, _ := p.Component("nvshmem")
		if nv.Version != "3.7.1" || nv.Source.Git != nil || nv.Source.Archive == nil || nv.Source.Archive.SHA256 != c.sha || nv.Source.Archive.Strip != 1 {
			t.Errorf("%v: nvshmem %s from %+v", c.sets, nv.Version, nv.Source.Archive)
		}
		if len(nv.Build) != 1 || nv.Build[0].Command == nil || !slices.Equal(nv.Build[0].Command.Run, PrebuiltCopy()) {
			t.Errorf("%v: the build steps are not the copy: %+v", c.sets, nv.Build)
		}
		notes := strings.Join(p.Notes, "\n")
		for _, want := range []string{"nvshmem 3.7.1 is pinned by sha256 from https://developer.download.nvidia.com/compute/nvshmem/redist/redistrib_3.7.1.json; not built or tested by epbuild's own runs",
			"the recipe's CMake options for it do not apply (CMAKE_CUDA_ARCHITECTURES=100 NVSHMEM_BUILD_EXAMPLES=OFF"} {
			if !strings.Contains(notes, want) {
				t.Errorf("%v: want %q in the notes:\n%s", c.sets, want, notes)
			}
		}
		// the CUDA major the archive was chosen for is what preflight checks nvcc against
		if got := compat.CUDAMajor(p.Toolchain.CUDA, ""); got != "12" && got != "13" {
			t.Errorf("%v: toolchain cuda %q does not hold the archive's major", c.sets, p.Toolchain.CUDA)
		}
		// DeepEP builds against it as before
		if dp, _ := p.Component("deepep"); dp.Build[0].PythonExtension.Env["NVSHMEM_DIR"] != "{{nvshmem.prefix}}" {
			t.Errorf("deepep: %+v", dp.Build[0])
		}
	}
	var re *recipes.Error
	// >=12.9 allows 12.9 and 13.0: refused naming both archives and the fix
	_, err = res.Resolve("gcp-b200", []string{"nvshmem.version=3.7.1"})
	if err == nil || !errors.As(err, &re) || re.ExitCode() != 2 {
		t.Fatalf("3.7.1 with cuda >=12.9: %v", err)
	}
	for _, want := range []string{"--set nvshmem.version=3.7.1", "CUDA 12 and CUDA 13", `cuda ">=12.9"`, "--set toolchain.cuda=13.0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
	// IBGDA off would make DeepEP compile against another NVSHMEM than the plan says
	_, err = res.Resolve("gcp-b200", []string{"nvshmem.version=3.7.0", "toolchain.cuda=13.0", "nvshmem.options.NVSHMEM_IBGDA_SUPPORT=0"})
	if err == nil || !errors.As(err, &re) || !strings.Contains(err.Error(), "built with IBGDA") || !strings.Contains(err.Error(), "3.5.19-1") {
		t.Errorf("IBGDA off on a prebuilt: %v", err)
	}
	// a source kind of a release published only prebuilt
	_, err = res.Resolve("gcp-b200", []string{"nvshmem.version=3.7.1", "toolchain.cuda=13.0", "nvshmem.source=git"})
	if err == nil || !strings.Contains(err.Error(), "published only prebuilt") {
		t.Errorf("3.7.1 from git: %v", err)
	}
}

// The rules on how NVSHMEM is built here (R6 IBGDA, R11 arch, R21 pip) do not judge
// NVIDIA's prebuilt library, whose options are not the recipe's; those on its release do.
func TestPrebuiltFacts(t *testing.T) {
	res, _ := NewResolver(recipes.NewLibrary())
	rules, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	h, _ := compat.LoadHistory()
	p, err := res.Resolve("gcp-b200", []string{"nvshmem.version=3.7.1", "toolchain.cuda=13.0"})
	if err != nil {
		t.Fatal(err)
	}
	f := FactsFromPlan(p)
	if nv, _ := f.Component("nvshmem"); nv.Source != "prebuilt" || nv.Version != "3.7.1" || len(nv.Options) != 0 {
		t.Errorf("nvshmem facts: %+v", nv)
	}
	fs, err := compat.Evaluate(context.Background(), rules, f, compat.StagePlan, h)
	if err != nil {
		t.Fatal(err)
	}
	ids := compat.IDs(fs)
	for _, f := range fs {
		if f.Severity == compat.SeverityError {
			t.Errorf("%s/%s: %s", f.ID, f.Case, f.Message)
		}
	}
	if slices.Contains(ids, "R21") || !slices.Contains(ids, "R25") {
		t.Errorf("want R25 (a 3.7 release) and no R21 (a build of NVSHMEM's python library): %v", ids)
	}
}
