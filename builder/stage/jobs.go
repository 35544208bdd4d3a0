package stage

import (
	"io/fs"
	"path/filepath"
	"strings"
)

// Builds that run at the same time share the machine's cores. Each build gets a share of
// the job count (Toolchain.Jobs, the core count) when it starts: its steps' {{jobs}},
// setup.py's MAX_JOBS (unless the recipe sets it) and `cmake --build --parallel`. The
// builds that start together split what the builds still running leave, in proportion
// to their compile units (the C, C++ and CUDA files of their trees), so that the long one
// gets most: DeepEP's six units against the NVSHMEM smoke test's one give 14 and 2 of 16
// cores. All together they run about as many compilers as the job count, as one build
// alone would: the peak memory a user tuned MAX_JOBS for stays what it was (an nvcc of
// DeepEP's kernels takes gigabytes). The share is fixed when a build starts: jobs that a
// build gives back when it ends go to the builds that start after it, not to those
// running (their make or ninja was told its -j already).

// compileUnitExt are the extensions of the files a compiler compiles one by one.
var compileUnitExt = map[string]bool{".c": true, ".cc": true, ".cpp": true, ".cxx": true, ".cu": true}

// compileUnits counts the compile units of a tree (outside .git), at least 1: a build's
// weight when it shares the cores.
func compileUnits(tree string) int {
	n := 0
	_ = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir() && d.Name() == ".git":
			return filepath.SkipDir
		case d.Type().IsRegular() && compileUnitExt[strings.ToLower(filepath.Ext(d.Name()))]:
			n++
		}
		return nil
	})
	return max(n, 1)
}

// shareJobs splits free jobs among builds that start together, in proportion to their
// weights (each at least 1), by largest remainder, ties to the earlier build. A build
// whose part rounds to nothing gets one job all the same, even beyond free: a build
// that waited for jobs would not start before a running one ends, which is slower than
// a core shared.
func shareJobs(free int, weights []int) []int {
	out := make([]int, len(weights))
	if len(weights) == 0 {
		return out
	}
	total := 0
	for _, w := range weights {
		total += max(w, 1)
	}
	given, rem := 0, make([]int, len(weights))
	for i, w := range weights {
		q := max(free, 0) * max(w, 1)
		out[i], rem[i] = q/total, q%total
		given += q / total
	}
	for ; given < free; given++ {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		out[best]++
		rem[best] = -1
	}
	for i := range out {
		out[i] = max(out[i], 1)
	}
	return out
}
