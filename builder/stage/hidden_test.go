package stage

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/manifest"
)

func TestParseHiddenSizes(t *testing.T) {
	for _, c := range []struct {
		name, src string
		want      []string
		err       string
	}{
		{"29d31c0", launch29d31c0, []string{"2048", "2560", "3072", "4096", "5120", "6144", "7168", "8192"}, ""},
		{"a84a248", launchA84a248, []string{"2560", "5120", "7168"}, ""},
		{"a patch added 3000", strings.Replace(launch29d31c0, "        case 4096:", "        case 3000:                                          \\\n            case_macro(3000);                               \\\n        case 4096:", 1),
			[]string{"2048", "2560", "3072", "3000", "4096", "5120", "6144", "7168", "8192"}, ""},
		{"commented out", strings.Replace(launchA84a248, "        case 5120: case_macro(5120); \\", "        /* case 5120: case_macro(5120); */ \\", 1), []string{"2560", "7168"}, ""},
		{"no macro", "#define SWITCH_TYPES(m) m(1)\n", nil, "no #define SWITCH_HIDDEN"},
		{"two macros", "#if A\n" + launchA84a248 + "#else\n" + launchA84a248 + "#endif\n", nil, "undecided: 2 definitions of SWITCH_HIDDEN (lines 2 and 10)"},
		{"no case", "#define SWITCH_HIDDEN(case_macro) \\\n    case_macro(hidden);\n", nil, "line 1: SWITCH_HIDDEN lists no numeric case"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseHiddenSizes([]byte(c.src))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("got %v, %v; want an error with %q", got, err, c.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, c.want) {
				t.Fatalf("got %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

// The build records the hidden sizes of the tree it compiled, and a DeepEP tree without
// launch.cuh (EPv2 main) leaves a note instead.
func TestReadHiddenSizes(t *testing.T) {
	tree := t.TempDir()
	if _, err := readHiddenSizes(filepath.Join(tree, launchHeader)); err == nil || !strings.Contains(err.Error(), "no csrc/kernels/launch.cuh in the DeepEP tree") {
		t.Errorf("no file: %v", err)
	}
	p := filepath.Join(tree, filepath.FromSlash(launchHeader))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(launchA84a248), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := readHiddenSizes(p); err != nil || got != "2560,5120,7168" {
		t.Errorf("got %q, %v", got, err)
	}
}

// launch29d31c0 is SWITCH_HIDDEN as DeepEP 29d31c0's csrc/kernels/launch.cuh writes it
// (one case a line, aligned backslashes, a comment on two of them), between its
// neighbours.
const launch29d31c0 = `#define SWITCH_TYPES(case_macro)                          \
    switch (type) {                                       \
        case CUDA_R_16BF:                                 \
            case_macro(nv_bfloat16);                      \
        default:                                          \
            EP_HOST_ASSERT(false and "Unsupported type"); \
    }                                                     \
    while (false)

#define SWITCH_HIDDEN(case_macro)                           \
    switch (hidden) {                                       \
        case 2048:                                          \
            case_macro(2048);                               \
        case 2560:                                          \
            case_macro(2560);                               \
        case 3072:                                          \
            case_macro(3072); /* for gpt-oss */             \
        case 4096:                                          \
            case_macro(4096);                               \
        case 5120:                                          \
            case_macro(5120);                               \
        case 6144:                                          \
            case_macro(6144); /* For qwen3 coder */         \
        case 7168:                                          \
            case_macro(7168);                               \
        case 8192:                                          \
            case_macro(8192);                               \
        default:                                            \
            EP_HOST_ASSERT(false and "Unsupported hidden"); \
    }                                                       \
    while (false)

#define SWITCH_NUM_TOPK(case_macro) \
    switch (num_topk) {             \
        case 9000: case_macro(9000); \
    } while (false)
`

// launchA84a248 is the older form (DeepEP a84a248): several cases a line.
const launchA84a248 = `#define SWITCH_HIDDEN(case_macro) \
    switch (hidden) { \
        case 2560: case_macro(2560); \
        case 5120: case_macro(5120); \
        case 7168: case_macro(7168); \
        default: EP_HOST_ASSERT(false && "Unsupported hidden"); \
    } while (false)
`

// single-node's DeepEP tree (29d31c0) lists the stock hidden sizes in its launch header:
// the build facts read them from the patched tree (the rules after the build decide with
// them: TestRulesAfterBuildHiddenSizes).
func TestBuildFactsReadHiddenSizes(t *testing.T) {
	pl := fixture.PlanOf(t, "single-node", "runtime.hidden=3000", "runtime.low-latency=true", "runtime.ranks=16", "nccl.package=nvidia-nccl-cu13", "nvshmem.package=nvidia-nvshmem-cu13")
	stock := map[string]string{manifest.FactHiddenSizes: "2048,2560,3072,4096,5120,6144,7168,8192"}
	tree := t.TempDir()
	p := filepath.Join(tree, filepath.FromSlash(launchHeader))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(launch29d31c0), 0o644); err != nil {
		t.Fatal(err)
	}
	facts, _ := buildFacts(pl, []manifest.ComponentResult{{Name: "deepep", Tree: tree}})
	if facts[manifest.FactHiddenSizes] != stock[manifest.FactHiddenSizes] {
		t.Errorf("the tree's facts: %v", facts)
	}
}
