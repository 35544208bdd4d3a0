package recipes

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// goodTests declares DeepEP's tests on goodRecipe's deepep component (lines 21 on).
const goodTests = `    tests:
      files: [tests/test_intranode.py, tests/utils.py]
      run:
        - name: intranode
          argv: [python3, test_intranode.py, --num-processes, "{{procs}}"]
          timeout: 20m
          bandwidth:
            dispatch-fp8: '\[tuning\] Best dispatch \(FP8\): SMs \d+, NVL chunk \d+, (?P<gbps>[0-9.]+) GB/s \(NVL\)'
        - name: internode
          argv: [python3, test_internode.py]
          nodes: 2
          timeout: 30m
`

// Each mistake in a tests: block is named at its line, with the fix.
func TestTestsErrors(t *testing.T) {
	cases := []struct {
		name, from, to string
		want           []string
		line           int
	}{
		{"good", "", "", nil, 0},
		{"no timeout", "          timeout: 20m\n", "", []string{"missing timeout", "90s or 20m"}, 24},
		{"bad timeout", "timeout: 20m", "timeout: soon", []string{`timeout "soon" is not a positive duration`}, 26},
		{"negative timeout", "timeout: 20m", "timeout: -1s", []string{"not a positive duration"}, 26},
		{"unknown template", `"{{procs}}"`, `"{{nodes}}"`, []string{"unknown template {{nodes}}", "only {{procs}}"}, 25},
		{"no gbps group", `(?P<gbps>[0-9.]+) GB/s \(NVL\)`, `([0-9.]+) GB/s`, []string{"no group named gbps", "(?P<gbps>[0-9.]+)"}, 28},
		{"bad regexp", `\(NVL\)'`, `(NVL'`, []string{"bandwidth pattern dispatch-fp8", "Go regular-expression syntax"}, 28},
		{"file leaves the tree", "tests/utils.py]", "../utils.py]", []string{`test file "../utils.py" is not a file of the source tree`}, 22},
		{"glob", "tests/utils.py]", "tests/*.py]", []string{"no glob"}, 22},
		{"same base name", "tests/utils.py]", "other/test_intranode.py]", []string{"lands in tests/ as test_intranode.py", "files[0]"}, 22},
		{"duplicate name", "- name: internode", "- name: intranode", []string{`test "intranode" is declared twice`}, 29},
		{"bad name", "- name: internode", "- name: Inter_node", []string{`test name "Inter_node"`}, 29},
		{"no argv", "argv: [python3, test_internode.py]", "argv: []", []string{"argv needs the program first"}, 30},
		{"negative nodes", "nodes: 2", "nodes: -2", []string{"nodes is how many nodes"}, 31},
		{"misspelt field", "nodes: 2", "node: 2", []string{`unknown field "node"`}, 31},
		{"needs rdma", "nodes: 2", "nodes: 2\n          needs: [rdma]", nil, 0},
		{"unknown need", "nodes: 2", "nodes: 2\n          needs: [rdma, nic]", []string{`unknown need "nic"`, "can need rdma"}, 32},
		{"need twice", "nodes: 2", "nodes: 2\n          needs: [rdma, rdma]", []string{"rdma is named twice"}, 32},
		{"own env", "nodes: 2", "nodes: 2\n          env: {EP_DISABLE_GIN: \"1\"}", nil, 0},
		{"env name", "nodes: 2", "nodes: 2\n          env: {1X: \"1\"}", []string{`environment variable name "1X" is not valid`}, 32},
		{"env preload", "nodes: 2", "nodes: 2\n          env: {LD_PRELOAD: /x.so}", []string{"no LD_PRELOAD and no templates"}, 32},
		{"env template", "nodes: 2", "nodes: 2\n          env: {X: \"{{nccl.prefix}}\"}", []string{"no LD_PRELOAD and no templates"}, 32},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := goodRecipe + strings.Replace(goodTests, c.from, c.to, 1)
			if c.from != "" && !strings.Contains(goodTests, c.from) {
				t.Fatalf("the case's text %q is not in the fixture", c.from)
			}
			err := loadAndValidate(t, body)
			e, ok := wantErrors(t, err, c.want)
			if !ok {
				return
			}
			if e == nil || e.Line != c.line {
				t.Errorf("error located at %+v, want line %d", e, c.line)
			}
		})
	}
}

// Tests belong to a component the artifact carries: one taken from the Python
// environment has no tree to copy them from.
func TestTestsNeedABuiltComponent(t *testing.T) {
	body := strings.Replace(goodRecipe, "    build:\n      - python-extension:\n          env:\n            NVSHMEM_DIR: \"{{nvshmem.prefix}}\"\n", "", 1) + goodTests
	err := loadAndValidate(t, body)
	if err == nil || !strings.Contains(err.Error(), "builds nothing here") {
		t.Fatalf("error %v, want one saying the component builds nothing", err)
	}
}

// check-env holds plain values for the build host's checks: a bad name, an LD_PRELOAD or
// a template is refused at its line.
func TestCheckEnvErrors(t *testing.T) {
	for _, c := range []struct {
		entry string
		want  string
	}{
		{`EP_SUPPRESS_NCCL_CHECK: "1"`, ""},
		{`LD_PRELOAD: /x.so`, "no LD_PRELOAD and no templates"},
		{`X: "{{nvshmem.prefix}}"`, "no LD_PRELOAD and no templates"},
		{`1X: "1"`, `environment variable name "1X" is not valid`},
	} {
		body := goodRecipe + "    check-env:\n      " + c.entry + "\n"
		err := loadAndValidate(t, body)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.entry, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), ":22:")):
			t.Errorf("%s: got %v, want %q at line 22", c.entry, err, c.want)
		}
	}
}

// labelledBench is a test whose bandwidths are read in both forms: a pattern of one line,
// and a label with the value on the line after it (NCCL EP's ep_bench).
const labelledBench = `        - name: bench
          argv: [./ep_bench]
          timeout: 10m
          bandwidth:
            plain: 'avg=(?P<gbps>[0-9.]+) GB/s'
            dispatch:
              label: '^Dispatch \(BF16\):'
              value: '^\s+throughput: avg=(?P<gbps>[0-9.]+) GB/s'
`

// The mapping form of a bandwidth is loaded and checked at its lines: a pattern that
// does not compile, a value that captures no number, a missing half, an unknown key.
func TestBandwidthLabelForm(t *testing.T) {
	cases := []struct {
		name, from, to string
		want           []string
		at             string // the line of the error holds this text
	}{
		{"good", "", "", nil, ""},
		{"bad label", `'^Dispatch \(BF16\):'`, `'^Dispatch (BF16:'`, []string{"bandwidth pattern dispatch: label:", "Go regular-expression syntax"}, "label: '^Dispatch (BF16:'"},
		{"bad value", `throughput: avg=(?P<gbps>[0-9.]+) GB/s'`, `throughput: avg=(?P<gbps>[0-9.]+ GB/s'`, []string{"bandwidth pattern dispatch: value:", "Go regular-expression syntax"}, "value: '^"},
		{"no gbps in value", `throughput: avg=(?P<gbps>[0-9.]+)`, `throughput: avg=([0-9.]+)`, []string{"value has no group named gbps", "(?P<gbps>[0-9.]+)"}, "value: '^"},
		{"gbps in label", `'^Dispatch \(BF16\):'`, `'^Dispatch (?P<gbps>x):'`, []string{"the label has a group named gbps"}, "label: '^Dispatch (?P<gbps>"},
		{"no label", "              label: '^Dispatch \\(BF16\\):'\n", "", []string{"bandwidth dispatch needs label"}, "value:"},
		{"no value", "              value: '^\\s+throughput: avg=(?P<gbps>[0-9.]+) GB/s'\n", "", []string{"bandwidth dispatch needs value", "(?P<gbps>[0-9.]+)"}, "label:"},
		{"unknown key", "              label:", "              lable:", []string{`unknown field "lable"`}, "lable:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.from != "" && !strings.Contains(labelledBench, c.from) {
				t.Fatalf("the case's text %q is not in the fixture", c.from)
			}
			body := goodRecipe + goodTests + strings.Replace(labelledBench, c.from, c.to, 1)
			err := loadAndValidate(t, body)
			e, ok := wantErrors(t, err, c.want)
			if !ok {
				return
			}
			lines := strings.Split(body, "\n")
			if e == nil || e.Line < 1 || e.Line > len(lines) || !strings.Contains(lines[e.Line-1], c.at) {
				t.Errorf("error located at %+v, want the line holding %q", e, c.at)
			}
		})
	}
}

// The plain form reads back as the string it was, so a plan's key does not change; the
// mapping form round-trips through a manifest's JSON.
func TestBandwidthPatternJSON(t *testing.T) {
	run := TestRun{Bandwidth: map[string]BandwidthPattern{
		"a": {Line: `x=(?P<gbps>\d+)`},
		"b": {Label: "^L", Value: `v=(?P<gbps>\d+)`},
	}}
	b, err := json.Marshal(run.Bandwidth)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":"x=(?P\u003cgbps\u003e\\d+)","b":{"label":"^L","value":"v=(?P\u003cgbps\u003e\\d+)"}}`; string(b) != want {
		t.Errorf("JSON %s, want %s", b, want)
	}
	var back map[string]BandwidthPattern
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, run.Bandwidth) {
		t.Errorf("read back %+v, want %+v", back, run.Bandwidth)
	}
	if err := json.Unmarshal([]byte(`{"a":3}`), &back); err == nil {
		t.Error("a number read as a bandwidth pattern")
	}
}

// runtimeNVCC says deepep's JIT looks for nvcc as NCCL EP's does.
const runtimeNVCC = `runtime:
  nvcc:
    component: deepep
    lookup:
      - env: NCCL_EP_JIT_NVCC
      - file: $CUDA_HOME/bin/nvcc
        optional: true
      - file: ${CUDA_PATH}/bin/nvcc
      - path: nvcc
`

// runtime.nvcc names a component and places to look, each at its line with the fix; a
// test may need nvcc only where the recipe says where the JIT looks.
func TestRuntimeNVCC(t *testing.T) {
	needs := strings.Replace(goodTests, "nodes: 2", "nodes: 2\n          needs: [nvcc]", 1)
	cases := []struct {
		name, tests, from, to string
		want                  string
		at                    string
	}{
		{"good", needs, "", "", "", ""},
		{"default lookup", needs, "    lookup:\n      - env: NCCL_EP_JIT_NVCC\n      - file: $CUDA_HOME/bin/nvcc\n        optional: true\n      - file: ${CUDA_PATH}/bin/nvcc\n      - path: nvcc\n", "", "", ""},
		{"no such component", needs, "component: deepep", "component: nccl-ep", `component: the component whose JIT runs nvcc at run time (one of this recipe's), not "nccl-ep"`, "component: nccl-ep"},
		{"two places", needs, "      - path: nvcc", "      - path: nvcc\n        env: NVCC", "a lookup step is one place", "- path: nvcc"},
		{"bad variable", needs, "env: NCCL_EP_JIT_NVCC", "env: NCCL-EP", `env: "NCCL-EP" is not a variable name`, "env: NCCL-EP"},
		{"relative file", needs, "file: $CUDA_HOME/bin/nvcc", "file: bin/nvcc", `file: "bin/nvcc" is not absolute`, "file: bin/nvcc"},
		{"bad variable syntax", needs, "file: ${CUDA_PATH}/bin/nvcc", "file: ${CUDA_PATH/bin/nvcc", "write a variable as $NAME or ${NAME}", "file: ${CUDA_PATH/bin"},
		{"path with a slash", needs, "path: nvcc", "path: /usr/bin/nvcc", "use file: for a path", "path: /usr/bin/nvcc"},
		{"optional env", needs, "      - env: NCCL_EP_JIT_NVCC\n", "      - env: NCCL_EP_JIT_NVCC\n        optional: true\n", "optional applies to a file: step only", "optional: true"},
		{"unknown key", needs, "component: deepep", "component: deepep\n    compiler: nvcc", `unknown field "compiler"`, "compiler: nvcc"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.from != "" && !strings.Contains(runtimeNVCC, c.from) {
				t.Fatalf("the case's text %q is not in the fixture", c.from)
			}
			body := goodRecipe + c.tests + strings.Replace(runtimeNVCC, c.from, c.to, 1)
			err := loadAndValidate(t, body)
			if c.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
			var e *Error
			var es Errors
			switch {
			case errors.As(err, &es):
				e = es[0]
			case errors.As(err, &e):
			}
			lines := strings.Split(body, "\n")
			if e == nil || e.Line < 1 || e.Line > len(lines) || !strings.Contains(lines[e.Line-1], c.at) {
				t.Errorf("error located at %+v, want the line holding %q", e, c.at)
			}
		})
	}
	err := loadAndValidate(t, goodRecipe+needs)
	if err == nil || !strings.Contains(err.Error(), "needs nvcc, and the recipe does not say where the JIT looks for it") || !strings.Contains(err.Error(), "runtime: {nvcc: {component: deepep}}") {
		t.Errorf("needs: [nvcc] without runtime.nvcc: %v", err)
	}
}

// The lookup's files read their variables as a shell does, and a step with one unset is
// passed over; the default is EPv2's order.
func TestNVCCStepExpand(t *testing.T) {
	env := map[string]string{"CUDA_HOME": "/opt/cuda", "EMPTY": ""}
	for _, c := range []struct {
		file, want string
		ok         bool
	}{
		{"$CUDA_HOME/bin/nvcc", "/opt/cuda/bin/nvcc", true},
		{"${CUDA_HOME}/bin/nvcc", "/opt/cuda/bin/nvcc", true},
		{"$CUDA_PATH/bin/nvcc", "/bin/nvcc", false},
		{"$EMPTY/bin/nvcc", "/bin/nvcc", false},
		{"/usr/local/cuda/bin/nvcc", "/usr/local/cuda/bin/nvcc", true},
	} {
		if got, ok := (NVCCStep{File: c.file}).Expand(env); got != c.want || ok != c.ok {
			t.Errorf("%s: %q %v, want %q %v", c.file, got, ok, c.want, c.ok)
		}
	}
	var order []string
	for _, st := range (&NVCC{Component: "deepep"}).Steps() {
		order = append(order, st.String())
	}
	if got := strings.Join(order, ", "); got != "$EP_JIT_NVCC_COMPILER, $CUDA_HOME/bin/nvcc, $CUDA_PATH/bin/nvcc, nvcc on PATH, /usr/local/cuda/bin/nvcc" {
		t.Errorf("default order %s", got)
	}
}

// wantErrors checks err against the substrings want (none: no error) and gives the first
// located error; ok is false when no error was wanted.
func wantErrors(t *testing.T, err error, want []string) (e *Error, ok bool) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return nil, false
	}
	if err == nil {
		t.Fatalf("no error; want %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err, w)
		}
	}
	var es Errors
	switch {
	case errors.As(err, &es):
		e = es[0]
	case errors.As(err, &e):
	}
	return e, true
}
