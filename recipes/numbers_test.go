package recipes

import (
	"errors"
	"strings"
	"testing"
)

// A recipe value that YAML reads as a number where the recipe holds a string is bad
// input at its line and column, with the quoting that keeps what was written.
func TestUnquotedNumbers(t *testing.T) {
	numbered := goodRecipe + `toolchain:
  cuda: 13.0
  arch: [sm_100]
env:
  NCCL_NVLS_ENABLE: 0
  NVSHMEM_IB_GID_INDEX: 0x3
`
	numbered = strings.Replace(numbered, `            NVSHMEM_DIR: "{{nvshmem.prefix}}"`,
		"            NVSHMEM_DIR: \"{{nvshmem.prefix}}\"\n            TORCH_CUDA_ARCH_LIST: 9.10", 1)
	numbered = strings.Replace(numbered, "    version: 3.4.5-0\n", "    version: 3.4\n    build:\n      - cmake:\n          options:\n            CMAKE_CUDA_ARCHITECTURES: 100\n", 1)
	_, err := LoadFile(writeRecipe(t, numbered))
	var errs Errors
	if !errors.As(err, &errs) || errs.ExitCode() != 2 {
		t.Fatalf("want recipe errors (exit 2), got %T %v", err, err)
	}
	msg := err.Error()
	for _, want := range []string{
		`r.yaml:6:14: components[0].version: 3.4 is a number in YAML, and this value is a string: quote it: "3.4"`,
		`r.yaml:10:39: components[0].build[0].cmake.options.CMAKE_CUDA_ARCHITECTURES: 100 is a number in YAML, and this value is a string: quote it: "100"`,
		`TORCH_CUDA_ARCH_LIST: 9.10 is a number in YAML (read as 9.1), and this value is a string: quote it: "9.10"`,
		`toolchain.cuda: 13.0 is a number in YAML (read as 13), and this value is a string: quote it: "13.0"`,
		`env.NCCL_NVLS_ENABLE: 0 is a number in YAML, and this value is a string: quote it: "0"`,
		`env.NVSHMEM_IB_GID_INDEX: 0x3 is a number in YAML (read as 3), and this value is a string: quote it: "0x3"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("want %q in:\n%s", want, msg)
		}
	}
	if len(errs) != 6 {
		t.Errorf("want every number reported at once (6), got %d:\n%s", len(errs), msg)
	}
	if !strings.Contains(msg, "> ") {
		t.Errorf("errors should show the offending line:\n%s", msg)
	}
}

// Quoted values, numbers where the recipe holds a number or a bool, and explicit tags pass.
func TestQuotedAndTypedNumbersPass(t *testing.T) {
	body := strings.Replace(goodRecipe, "    version: 3.4.5-0\n", "    version: \"3.4\"\n", 1) + `toolchain:
  cuda: '13.0'
env:
  NCCL_NVLS_ENABLE: "0"
  NVSHMEM_IB_GID_INDEX: !!str 3
matrix:
  nvshmem: ["3.4.5", "3.5.19-1"]
`
	body = strings.Replace(body, "    depends: [nvshmem]\n", "    depends: [nvshmem]\n    checks:\n      - symbol: {file: lib/x.so, name: f, defined: true}\n", 1)
	body = strings.Replace(body, "      - python-extension:\n", "      - python-extension:\n          wheel: true\n", 1)
	doc, err := LoadFile(writeRecipe(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.Recipe.Env["NVSHMEM_IB_GID_INDEX"]; v != "3" {
		t.Errorf("!!str 3 read as %q", v)
	}
	archive := strings.Replace(goodRecipe, `      git:
        url: https://github.com/NVIDIA/nvshmem
        commit: 131da55f643ac87c810ba0bc51d359258bf433a1`, `      archive:
        url: https://example.com/x.tar.gz
        sha256: 40c1d4c255dd7395e04df41b181c4afdf2e0724c06b6fabde58bf2f8f532b0e5
        strip: 1`, 1)
	if _, err := LoadFile(writeRecipe(t, archive)); err != nil {
		t.Errorf("strip: 1 is a number field: %v", err)
	}
}

// A number in a list of strings (matrix versions, architectures) is found too.
func TestUnquotedNumbersInLists(t *testing.T) {
	_, err := LoadFile(writeRecipe(t, goodRecipe+"matrix:\n  nccl: [2.21, \"2.22.3-1\"]\n"))
	if err == nil || !strings.Contains(err.Error(), `matrix.nccl[0]: 2.21 is a number in YAML, and this value is a string: quote it: "2.21"`) {
		t.Errorf("got %v", err)
	}
}
