package stage

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestShareJobs(t *testing.T) {
	for _, tc := range []struct {
		free    int
		weights []int
		want    []int
	}{
		{16, []int{6, 1}, []int{14, 2}},     // DeepEP beside the NVSHMEM smoke test
		{16, []int{145, 90}, []int{10, 6}},  // NVSHMEM beside NCCL, both from source
		{2, []int{6, 1}, []int{2, 1}},       // too few: everyone gets one
		{16, []int{1}, []int{16}},           // alone: every core
		{8, []int{0, 0, 0}, []int{3, 3, 2}}, // no units counts as one; ties to the earlier
		{0, []int{5, 5}, []int{1, 1}},       // nothing free: one each all the same
		{16, []int{1, 1, 1, 1}, []int{4, 4, 4, 4}},
		{16, nil, []int{}},
	} {
		if got := shareJobs(tc.free, tc.weights); !slices.Equal(got, tc.want) {
			t.Errorf("shareJobs(%d, %v) = %v, want %v", tc.free, tc.weights, got, tc.want)
		}
	}
}

func TestCompileUnits(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.c", "b.CC", "k/c.cu", "k/d.cpp", "e.cxx", "x.h", "x.cuh", "x.py", ".git/objects/y.c"} {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n := compileUnits(dir); n != 5 {
		t.Errorf("%d compile units, want 5", n)
	}
	if n := compileUnits(t.TempDir()); n != 1 {
		t.Errorf("an empty tree: %d, want 1", n)
	}
}
