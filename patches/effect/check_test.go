package effect

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// cSource exercises the C reader: includes and getenv calls hidden in comments, strings,
// raw strings and #if 0 blocks must not count; other conditionals do.
const cSource = `/* #include "ibgda_device.cuh" in a block comment
   spanning lines */
// #include "ibgda_device.cuh" \
   continued line comment #include "continued.cuh"
#include <stdio.h>
#include "../kernels/ibgda_device.cuh"   // matched by suffix
#if 0
#include "dead.cuh"
const char *x = getenv("EP_DEAD");
#else
#include "alive_else.cuh"
#endif
#ifdef SOMETHING
#include "conditional.cuh"
#endif
#if 0
#if 1
#include "nested_dead.cuh"
#endif
#endif
#define READ_IT() \
    getenv("EP_MACRO")
const char *s = "#include \"in_string.cuh\"";
const char *r = R"x(getenv("EP_RAW") )x";
int main() {
  const char *a = getenv("EP_A");
  const char *b = secure_getenv("EP_B");
  const char *c = std::getenv("EP_C");
  const char *d = nvshmemi_getenv(buf, "EP_" "D");  /* wrapper; literal is not first */
  /* getenv("EP_COMMENT") */
  // getenv("EP_LINE_COMMENT")
  char q = '"'; const char *e = getenv("EP_AFTER_CHAR");
  printf("getenv(\"EP_IN_STRING\")");
  int n = 1'000'000;
}
  # include   "spaced.cuh"
#include "my_ibgda_device.cuh"
`

func TestCReader(t *testing.T) {
	toks := TokenizeC([]byte(cSource))
	var incs []string
	for _, inc := range Includes(toks) {
		incs = append(incs, inc.Path)
	}
	wantIncs := []string{"stdio.h", "../kernels/ibgda_device.cuh", "alive_else.cuh", "conditional.cuh", "spaced.cuh", "my_ibgda_device.cuh"}
	if !reflect.DeepEqual(incs, wantIncs) {
		t.Errorf("includes = %q, want %q", incs, wantIncs)
	}
	var env []string
	for _, r := range CEnvReads(toks) {
		env = append(env, r.Name)
	}
	wantEnv := []string{"EP_MACRO", "EP_A", "EP_B", "EP_C", "EP_D", "EP_AFTER_CHAR"}
	if !reflect.DeepEqual(env, wantEnv) {
		t.Errorf("getenv reads = %q, want %q", env, wantEnv)
	}
	for _, r := range CEnvReads(toks) {
		if r.Name == "EP_A" && r.Line != 26 {
			t.Errorf("EP_A read at line %d, want 26", r.Line)
		}
	}
	if !includeMatches("../x/ibgda_device.cuh", "ibgda_device.cuh") || includeMatches("my_ibgda_device.cuh", "ibgda_device.cuh") {
		t.Error("includeMatches: suffix must match whole path components")
	}
}

// tree writes files under a temp dir and returns it.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, src := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestCheck(t *testing.T) {
	corpus := pyCorpus()
	root := tree(t, map[string]string{
		"deep_ep/buffer.py":       corpus["called.py"],
		"stale/buffer.py":         corpus["never_called.py"],
		"nested.py":               corpus["nested.py"],
		"comments.py":             corpus["comments.py"],
		"csrc/kernels/a.cu":       "#include <cuda.h>\n#include \"ibgda_device.cuh\"\n",
		"csrc/kernels/b.cu":       "// #include \"ibgda_device.cuh\"\n#include \"shim.cuh\"\n",
		"csrc/kernels/c.cu":       "#if 0\n#include \"ibgda_device.cuh\"\n#endif\n",
		"csrc/kernels/d.cu":       "int x;\n\n#include \"../kernels/ibgda_device.cuh\"\n",
		"csrc/env.cu":             cSource,
		"csrc/notes.txt":          "getenv(\"EP_A\")\n",
		"setup.py":                "import os\nnvshmem = os.getenv('NVSHMEM_DIR')\n# os.getenv('EP_COMMENTED')\n",
		"third-party/old.patch":   "line one\n+NVSHMEM_IBGDA_NIC_HANDLER\nline three\n+NVSHMEM_IBGDA_NIC_HANDLER\n",
		"third-party/clean.patch": "nothing here\n",
	})
	cases := []struct {
		name   string
		e      Effect
		status string
		found  []string // substrings of Found
	}{
		{"def pass", Effect{Kind: PythonDef, File: "deep_ep/buffer.py", Class: "Buffer", Method: "_setup_device_hca_mapping"},
			StatusPass, []string{"deep_ep/buffer.py:10: def _setup_device_hca_mapping in class Buffer"}},
		{"def in never-called file still passes", Effect{Kind: PythonDef, File: "stale/buffer.py", Class: "Buffer", Method: "_setup_device_hca_mapping"},
			StatusPass, []string{"stale/buffer.py:14"}},
		{"def missing", Effect{Kind: PythonDef, File: "deep_ep/buffer.py", Class: "Buffer", Method: "destroy"},
			StatusFail, []string{"class Buffer has no method destroy"}},
		{"def of a class that is not there", Effect{Kind: PythonDef, File: "deep_ep/buffer.py", Class: "Config", Method: "x"},
			StatusFail, []string{"no class Config"}},
		{"def nested class by dotted name", Effect{Kind: PythonDef, File: "nested.py", Class: "Outer.Inner", Method: "fetch"},
			StatusPass, []string{"async def fetch in class Outer.Inner"}},
		{"def nested class by simple name", Effect{Kind: PythonDef, File: "nested.py", Class: "Inner", Method: "helper"},
			StatusPass, nil},
		{"call pass", Effect{Kind: PythonCall, File: "deep_ep/buffer.py", Class: "Buffer", Method: "__init__", Callee: "_setup_device_hca_mapping"},
			StatusPass, []string{"deep_ep/buffer.py:8: self._setup_device_hca_mapping() in Buffer.__init__"}},
		{"added but never called", Effect{Kind: PythonCall, File: "stale/buffer.py", Class: "Buffer", Method: "__init__", Callee: "_setup_device_hca_mapping"},
			StatusFail, []string{
				"stale/buffer.py:11: self._setup_device_hca_mapping() is inside nested def later, which __init__ never calls: does not count",
				"stale/buffer.py:12: self._setup_device_hca_mapping referenced but not called",
				"appears as text at line(s) 7, 8, 11, 12"}},
		{"call through a nested def that is called", Effect{Kind: PythonCall, File: "nested.py", Class: "Outer", Method: "value", Callee: "via_chain"},
			StatusPass, []string{"inside nested def start.chain, which value calls"}},
		{"call via super()", Effect{Kind: PythonCall, File: "nested.py", Class: "Outer", Method: "value", Callee: "value_setter"},
			StatusPass, []string{"super().value_setter()"}},
		{"call via class name", Effect{Kind: PythonCall, File: "nested.py", Class: "Outer", Method: "value", Callee: "class_call"},
			StatusPass, []string{"Outer.class_call()"}},
		{"def only in a docstring", Effect{Kind: PythonDef, File: "comments.py", Class: "Buffer", Method: "not_a_method"},
			StatusFail, []string{`"not_a_method" appears as text at line(s) 8`}},
		{"def only in a comment", Effect{Kind: PythonDef, File: "comments.py", Class: "Buffer", Method: "commented_method"},
			StatusFail, nil},
		{"call only in f-string text", Effect{Kind: PythonCall, File: "comments.py", Class: "Buffer", Method: "__init__", Callee: "in_fstring_text"},
			StatusFail, nil},
		{"call in an f-string field", Effect{Kind: PythonCall, File: "comments.py", Class: "Buffer", Method: "__init__", Callee: "in_fstring_field"},
			StatusPass, []string{"comments.py:17: self.in_fstring_field()"}},
		{"call of a missing method", Effect{Kind: PythonCall, File: "deep_ep/buffer.py", Class: "Buffer", Method: "destroy", Callee: "x"},
			StatusFail, []string{"has no method destroy"}},
		{"env-read python pass", Effect{Kind: EnvRead, File: "deep_ep/buffer.py", Name: "DEEP_EP_DEVICE_TO_HCA_MAPPING"},
			StatusPass, []string{"deep_ep/buffer.py:11: reads DEEP_EP_DEVICE_TO_HCA_MAPPING"}},
		{"env-read python: a write is not a read", Effect{Kind: EnvRead, File: "deep_ep/buffer.py", Name: "NVSHMEM_HCA_LIST"},
			StatusFail, []string{"no read of NVSHMEM_HCA_LIST", "appears as text at line(s) 13"}},
		{"env-read python: comment is not a read", Effect{Kind: EnvRead, File: "setup.py", Name: "EP_COMMENTED"},
			StatusFail, nil},
		{"env-read C pass", Effect{Kind: EnvRead, File: "csrc/env.cu", Name: "EP_B"}, StatusPass, []string{"csrc/env.cu:27: reads EP_B"}},
		{"env-read C: #if 0 is not a read", Effect{Kind: EnvRead, File: "csrc/env.cu", Name: "EP_DEAD"}, StatusFail, nil},
		{"env-read on a text file is an error", Effect{Kind: EnvRead, File: "csrc/notes.txt", Name: "EP_A"}, StatusError, nil},
		{"include pass by suffix", Effect{Kind: Include, File: "csrc/kernels/d.cu", Header: "ibgda_device.cuh"},
			StatusPass, []string{`csrc/kernels/d.cu:3: #include "../kernels/ibgda_device.cuh"`}},
		{"include: comment does not count", Effect{Kind: Include, File: "csrc/kernels/b.cu", Header: "ibgda_device.cuh"}, StatusFail, nil},
		{"include: #if 0 does not count", Effect{Kind: Include, File: "csrc/kernels/c.cu", Header: "ibgda_device.cuh"}, StatusFail, nil},
		{"not include fails listing every file", Effect{Kind: Include, Files: []string{"csrc/kernels/*.cu"}, Header: "ibgda_device.cuh", Not: true},
			StatusFail, []string{"csrc/kernels/a.cu:2", "csrc/kernels/d.cu:3"}},
		{"not include passes", Effect{Kind: Include, Files: []string{"csrc/kernels/b.cu", "csrc/kernels/c.cu"}, Header: "ibgda_device.cuh", Not: true},
			StatusPass, []string{"no #include of ibgda_device.cuh in csrc/kernels/b.cu, csrc/kernels/c.cu"}},
		{"contains pass", Effect{Kind: Contains, File: "third-party/old.patch", Text: "+NVSHMEM_IBGDA_NIC_HANDLER"},
			StatusPass, []string{"third-party/old.patch:2: text found (2 time(s))"}},
		{"contains fail", Effect{Kind: Contains, File: "third-party/clean.patch", Text: "+NVSHMEM"}, StatusFail, nil},
		{"absent fails listing every line", Effect{Kind: Absent, Files: []string{"third-party/*.patch"}, Text: "NVSHMEM_IBGDA_NIC_HANDLER"},
			StatusFail, []string{"third-party/old.patch:2; third-party/old.patch:4"}},
		{"absent passes", Effect{Kind: Absent, File: "third-party/clean.patch", Text: "NVSHMEM"}, StatusPass, nil},
		{"no file matches", Effect{Kind: Contains, File: "nope/*.py", Text: "x"}, StatusFail, nil},
		{"invalid effect", Effect{Kind: PythonCall, File: "deep_ep/buffer.py", Class: "Buffer", Method: "__init__"}, StatusError, nil},
		{"path escaping the tree", Effect{Kind: Contains, File: "../x", Text: "x"}, StatusError, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Check(root, c.e, nil)
			if r.Status != c.status {
				t.Fatalf("status %s, want %s\nfound: %s\ndetail: %s", r.Status, c.status, r.Found, r.Detail)
			}
			for _, f := range c.found {
				if !strings.Contains(r.Found, f) {
					t.Errorf("found %q lacks %q", r.Found, f)
				}
			}
			if r.OK() != (c.status == StatusPass) {
				t.Errorf("OK() = %v for status %s", r.OK(), r.Status)
			}
			if !reflect.DeepEqual(r.Effect, c.e) {
				t.Errorf("result effect %v, want %v", r.Effect, c.e)
			}
		})
	}
}

func TestCheckInstalled(t *testing.T) {
	corpus := pyCorpus()
	e := Effect{Kind: PythonCall, File: "deep_ep/buffer.py", Installed: "deep_ep/buffer.py", Class: "Buffer", Method: "__init__", Callee: "_setup_device_hca_mapping"}
	good := tree(t, map[string]string{"lib/python3.11/site-packages/deep_ep/buffer.py": corpus["called.py"]})
	if r := CheckInstalled(good, e, nil); r.Status != StatusPass || !strings.Contains(r.Found, "lib/python3.11/site-packages/deep_ep/buffer.py:8") {
		t.Errorf("site-packages copy: %+v", r)
	}
	egg := tree(t, map[string]string{"lib/python3.10/site-packages/deep_ep-1.2.1-py3.10-linux-x86_64.egg/deep_ep/buffer.py": corpus["called.py"]})
	if r := CheckInstalled(egg, e, nil); r.Status != StatusPass {
		t.Errorf("egg copy: %+v", r)
	}
	// A stale second copy is what some interpreter imports: the check must fail on it.
	stale := tree(t, map[string]string{
		"lib/python3.11/site-packages/deep_ep/buffer.py":  corpus["called.py"],
		"lib64/python3.9/site-packages/deep_ep/buffer.py": corpus["never_called.py"],
	})
	r := CheckInstalled(stale, e, nil)
	if r.Status != StatusFail || !strings.Contains(r.Detail, "lib64/python3.9/site-packages/deep_ep/buffer.py") {
		t.Errorf("stale copy: %+v", r)
	}
	if r := CheckInstalled(t.TempDir(), e, nil); r.Status != StatusFail || !strings.Contains(r.Detail, "no file matches") {
		t.Errorf("nothing installed: %+v", r)
	}
	glob := e
	glob.Installed = "lib/python*/site-packages/deep_ep/buffer.py"
	if r := CheckInstalled(stale, glob, nil); r.Status != StatusPass {
		t.Errorf("explicit glob searches only where it says: %+v", r)
	}
	none := e
	none.Installed = ""
	if r := CheckInstalled(good, none, nil); r.Status != StatusSkipped || r.Detail == "" || !r.OK() {
		t.Errorf("no Installed: %+v", r)
	}
	// The tree check uses File, not Installed.
	if r := Check(good, e, nil); r.Status != StatusFail {
		t.Errorf("Check on a prefix without deep_ep/buffer.py: %+v", r)
	}
}

func TestValidate(t *testing.T) {
	ok := []Effect{
		{Kind: PythonDef, File: "a.py", Class: "C", Method: "m"},
		{Kind: PythonCall, File: "a.py", Class: "C", Method: "m", Callee: "n"},
		{Kind: Contains, File: "a", Text: "x"},
		{Kind: Absent, Files: []string{"a/*.patch"}, Text: "x"},
		{Kind: Include, Files: []string{"csrc/kernels/*.cu"}, Header: "h.cuh", Not: true},
		{Kind: EnvRead, File: "a.py", Name: "X", Installed: "deep_ep/a.py"},
		{Kind: ELFSymbol, File: "lib/x.so", Symbol: "s"},
	}
	for _, e := range ok {
		if err := e.Validate(); err != nil {
			t.Errorf("%v: %v", e, err)
		}
	}
	bad := []struct {
		e    Effect
		want []string
	}{
		{Effect{File: "a"}, []string{`missing "kind"`}},
		{Effect{Kind: "grep", File: "a"}, []string{`unknown effect kind "grep"`}},
		{Effect{Kind: PythonDef, Class: "C", Method: "m"}, []string{"python-def", `missing "file"`}},
		{Effect{Kind: PythonDef, File: "a.py", Method: "m"}, []string{"python-def", `missing "class"`}},
		{Effect{Kind: PythonDef, File: "a.py", Class: "C"}, []string{"python-def", `missing "method"`}},
		{Effect{Kind: PythonCall, File: "a.py", Class: "C", Method: "m"}, []string{"python-call", `missing "callee"`}},
		{Effect{Kind: Contains, File: "a"}, []string{"contains", `missing "text"`}},
		{Effect{Kind: Absent, File: "a"}, []string{"absent", `missing "text"`}},
		{Effect{Kind: Include, File: "a"}, []string{"include", `missing "header"`}},
		{Effect{Kind: EnvRead, File: "a"}, []string{"env-read", `missing "name"`}},
		{Effect{Kind: ELFSymbol, File: "a"}, []string{"elf-symbol", `missing "symbol"`}},
		{Effect{Kind: Absent, File: "a", Text: "x", Not: true}, []string{"absent", `"not" applies only to include`}},
		{Effect{Kind: Contains, File: "/etc/passwd", Text: "x"}, []string{"relative"}},
		{Effect{Kind: Contains, File: "a", Installed: "../b", Text: "x"}, []string{"relative"}},
		{Effect{Kind: Contains, File: "a[", Text: "x"}, []string{"syntax error in pattern"}},
	}
	for _, b := range bad {
		err := b.e.Validate()
		if err == nil {
			t.Errorf("%+v: no error", b.e)
			continue
		}
		for _, w := range b.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%+v: error %q lacks %q", b.e, err, w)
			}
		}
	}
}

func TestString(t *testing.T) {
	cases := map[string]Effect{
		"python-call: Buffer.__init__ calls _setup_device_hca_mapping in deep_ep/buffer.py": {Kind: PythonCall, File: "deep_ep/buffer.py", Class: "Buffer", Method: "__init__", Callee: "_setup_device_hca_mapping"},
		"python-def: Buffer._setup_device_hca_mapping defined in deep_ep/buffer.py":         {Kind: PythonDef, File: "deep_ep/buffer.py", Class: "Buffer", Method: "_setup_device_hca_mapping"},
		"include: none of csrc/kernels/*.cu includes ibgda_device.cuh":                      {Kind: Include, Files: []string{"csrc/kernels/*.cu"}, Header: "ibgda_device.cuh", Not: true},
		"include: csrc/kernels/x.cu includes efa_shim.cuh":                                  {Kind: Include, File: "csrc/kernels/x.cu", Header: "efa_shim.cuh"},
		`contains: "a\nb" in setup.py`:                                                      {Kind: Contains, File: "setup.py", Text: "a\nb"},
		`absent: "x" in none of a.patch, b.patch`:                                           {Kind: Absent, Files: []string{"a.patch", "b.patch"}, Text: "x"},
		"env-read: deep_ep/buffer.py reads DEEP_EP_DEVICE_TO_HCA_MAPPING":                   {Kind: EnvRead, File: "deep_ep/buffer.py", Name: "DEEP_EP_DEVICE_TO_HCA_MAPPING"},
		"elf-symbol: lib/libnvshmem_host.so defines nvshmemx_init_status":                   {Kind: ELFSymbol, File: "lib/libnvshmem_host.so", Symbol: "nvshmemx_init_status"},
	}
	for want, e := range cases {
		if got := e.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
	long := Effect{Kind: Contains, File: "f", Text: strings.Repeat("x", 100)}.String()
	if !strings.Contains(long, "…") || len(long) > 90 {
		t.Errorf("long text not shortened: %q", long)
	}
}

func TestResultJSON(t *testing.T) {
	r := Result{Effect: Effect{Kind: EnvRead, File: "a.py", Name: "X"}, Status: StatusFail, Found: "a.py: no read of X", Detail: "d"}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"effect":{"kind":"env-read","file":"a.py","name":"X"},"status":"fail","found":"a.py: no read of X","detail":"d"}`
	if string(b) != want {
		t.Errorf("json %s, want %s", b, want)
	}
}
