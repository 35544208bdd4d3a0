package stage

import (
	"testing"

	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// single-node's cells over NCCL share DeepEP's build: its key does not depend on which
// NCCL the job loads (DeepEP v1 does not link NCCL), nor on the Python packages the probe
// was asked for; NCCL built from source has a build of its own per release.
func TestNCCLCellsShareDeepEPBuild(t *testing.T) {
	tc := &toolchain.Toolchain{OS: "linux", Arch: "amd64", CUDA: "13.0", Torch: "2.11.0+cu130", GCC: "13.3.0",
		PythonPackages: map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu13": {Version: "3.4.5", Dir: "/site/nvidia/nvshmem"}}}
	withNCCL := *tc
	withNCCL.PythonPackages = map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu13": tc.PythonPackages["nvidia-nvshmem-cu13"],
		"nvidia-nccl-cu13": {Version: "2.28.9", Dir: "/site/nvidia/nccl"}}
	withNCCL.NCCL = &toolchain.NCCLRuntime{Version: "2.28.9"}
	base := []string{"nvshmem.package=nvidia-nvshmem-cu13", "nccl.package=nvidia-nccl-cu13"}
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	keys := func(tc *toolchain.Toolchain, sets ...string) map[string]compKeys {
		p, err := res.Resolve("single-node", append(base, sets...))
		if err != nil {
			t.Fatal(err)
		}
		return (&Runner{Toolchain: tc}).keys(p)
	}
	bundled, v2283, v2213 := keys(&withNCCL, "nccl.source=python"), keys(tc, "nccl.version=2.28.3-1"), keys(tc, "nccl.version=2.21.5-1")
	if bundled["deepep"].build == "" || bundled["deepep"].build != v2283["deepep"].build || v2283["deepep"].build != v2213["deepep"].build {
		t.Errorf("DeepEP's build differs between NCCL cells: %s %s %s", bundled["deepep"].build, v2283["deepep"].build, v2213["deepep"].build)
	}
	if v2283["nccl"].build == "" || v2283["nccl"].build == v2213["nccl"].build || bundled["nccl"].patch != "" {
		t.Errorf("NCCL's builds: bundled %+v, 2.28.3-1 %+v, 2.21.5-1 %+v", bundled["nccl"], v2283["nccl"], v2213["nccl"])
	}
}
