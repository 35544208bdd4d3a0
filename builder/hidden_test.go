package builder

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// single-node (DeepEP 29d31c0 with PR 466) for a model of hidden size 3000 in
// low-latency mode: before the build the patch set leaves the list to the tree; the list
// the build read decides, and a list a patch set grew passes.
func TestRulesAfterBuildHiddenSizes(t *testing.T) {
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "single-node", CacheDir: filepath.Join(t.TempDir(), "cache"),
		Sets: []string{"runtime.hidden=3000", "runtime.low-latency=true", "runtime.ranks=16", "nccl.package=nvidia-nccl-cu13", "nvshmem.package=nvidia-nvshmem-cu13"}})
	if err != nil {
		t.Fatalf("plan: %v", err)
	}
	stock := map[string]string{manifest.FactHiddenSizes: "2048,2560,3072,4096,5120,6144,7168,8192"}
	_, err = j.rulesAfterBuild(context.Background(), gpuMachine(), stock)
	var re *RulesError
	if !errors.As(err, &re) || !slices.ContainsFunc(re.Findings, func(f compat.Finding) bool { return f.Name() == "R48/compiled" }) ||
		!strings.Contains(err.Error(), "deepep.hidden-sizes=2048,2560") {
		t.Fatalf("want R48 after the build read the stock list, got %v", err)
	}
	fs, err := j.rulesAfterBuild(context.Background(), gpuMachine(), map[string]string{manifest.FactHiddenSizes: "2048,3000,7168"})
	if err != nil || slices.ContainsFunc(fs, func(f compat.Finding) bool { return f.ID == "R48" }) {
		t.Fatalf("a list with 3000: %v %v", err, compat.IDs(fs))
	}
}
