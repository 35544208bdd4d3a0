package effect

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

// python3 runs the oracle script testdata/<script> over files and decodes its JSON.
func python3(t *testing.T, script string, files []string, out any) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skipf("python3 is needed as the oracle: %v", err)
	}
	abs, err := filepath.Abs(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, append([]string{abs}, files...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 %s: %v\n%s", script, err, stderr.String())
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decode python3 %s output: %v", script, err)
	}
}

// goTokens is the Go tokenizer's answer in the oracle's shape [type, string, line].
func goTokens(t *testing.T, src []byte) [][]any {
	t.Helper()
	toks, err := TokenizePython(src)
	if err != nil {
		t.Errorf("TokenizePython: %v", err)
	}
	var out [][]any
	for _, tok := range toks {
		out = append(out, []any{tok.Type.String(), tok.Text, float64(tok.Line)})
	}
	return out
}

func compareTokens(t *testing.T, files []string) {
	t.Helper()
	var want map[string][][]any
	python3(t, "pytokens.py", files, &want)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got := goTokens(t, src)
		w := want[f]
		for i := 0; i < max(len(got), len(w)); i++ {
			var g, x []any
			if i < len(got) {
				g = got[i]
			}
			if i < len(w) {
				x = w[i]
			}
			if !reflect.DeepEqual(g, x) {
				t.Errorf("%s: token %d: go %q, python tokenize %q", filepath.Base(f), i, g, x)
				break
			}
		}
	}
}

// TestTokenizeMatchesPython compares the whole token stream (type, text, line) with
// Python's tokenize module on the tricky corpus.
func TestTokenizeMatchesPython(t *testing.T) {
	compareTokens(t, writeCorpus(t, pyCorpus()))
}

type oracleFile struct {
	Classes map[string][]string `json:"classes"`
	Calls   map[string][]string `json:"calls"`
	Env     [][]any             `json:"env"`
}

// readerAnswer is the Go reader's answer in the oracle's shape.
func readerAnswer(src []byte) oracleFile {
	m := ParsePython(src)
	out := oracleFile{Classes: map[string][]string{}, Calls: map[string][]string{}, Env: [][]any{}}
	for _, c := range m.AllClasses() {
		set := map[string]bool{}
		for _, name := range out.Classes[c.Qual] {
			set[name] = true
		}
		for _, f := range c.Methods {
			set[f.Name] = true
			key := c.Qual + "." + f.Name
			calls := map[string]bool{}
			for _, name := range out.Calls[key] {
				calls[name] = true
			}
			reached, _ := m.SelfCalls(f, c.Qual)
			for _, r := range reached {
				calls[r.Callee] = true
			}
			out.Calls[key] = sortedKeys(calls)
		}
		out.Classes[c.Qual] = sortedKeys(set)
	}
	for _, r := range m.EnvReads() {
		out.Env = append(out.Env, []any{r.Name, float64(r.Line)})
	}
	sort.Slice(out.Env, func(i, j int) bool {
		return fmt.Sprint(out.Env[i]) < fmt.Sprint(out.Env[j])
	})
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := []string{}
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func compareReader(t *testing.T, files []string) {
	t.Helper()
	var want map[string]oracleFile
	python3(t, "pyast.py", files, &want)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got := readerAnswer(src)
		w := want[f]
		for _, m := range []map[string][]string{w.Classes, w.Calls} {
			for k, v := range m {
				if len(v) == 0 {
					m[k] = []string{}
				}
			}
		}
		if w.Env == nil {
			w.Env = [][]any{}
		}
		sort.Slice(w.Env, func(i, j int) bool { return fmt.Sprint(w.Env[i]) < fmt.Sprint(w.Env[j]) })
		if !reflect.DeepEqual(got.Classes, w.Classes) {
			t.Errorf("%s: classes\n go:     %v\n python: %v", filepath.Base(f), got.Classes, w.Classes)
		}
		if !reflect.DeepEqual(got.Calls, w.Calls) {
			t.Errorf("%s: calls\n go:     %v\n python: %v", filepath.Base(f), got.Calls, w.Calls)
		}
		if !reflect.DeepEqual(got.Env, w.Env) {
			t.Errorf("%s: env reads\n go:     %v\n python: %v", filepath.Base(f), got.Env, w.Env)
		}
	}
}

// TestReaderMatchesPythonAST compares classes→methods, method→self-calls and env reads
// with Python's ast module on the tricky corpus.
func TestReaderMatchesPythonAST(t *testing.T) {
	compareReader(t, writeCorpus(t, pyCorpus()))
}

// TestReaderCorpusAnswers pins answers the oracle comparison alone would not show were
// exercised: the corpus has to contain each trap, or the comparison proves little.
func TestReaderCorpusAnswers(t *testing.T) {
	files := pyCorpus()
	get := func(name string) oracleFile { return readerAnswer([]byte(files[name])) }
	has := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	c := get("comments.py")
	if got := c.Classes["Buffer"]; !reflect.DeepEqual(got, []string{"__init__", "__repr__", "target"}) {
		t.Errorf("comments.py Buffer methods = %v (defs in comments, docstrings or strings counted?)", got)
	}
	for _, want := range []string{"real_call", "after_backslash", "split_over_lines", "in_fstring_field", "parenthesized"} {
		if !has(c.Calls["Buffer.__init__"], want) {
			t.Errorf("comments.py: Buffer.__init__ calls %s not found in %v", want, c.Calls["Buffer.__init__"])
		}
	}
	for _, not := range []string{"in_comment", "in_string", "in_fstring_text", "target", "attribute_only", "not_self"} {
		if has(c.Calls["Buffer.__init__"], not) {
			t.Errorf("comments.py: %s counted as a call", not)
		}
	}
	n := get("nested.py")
	if !has(n.Classes["Outer.Inner"], "fetch") || !has(n.Classes["Outer"], "in_try") || !has(n.Classes["Outer.make_class.Local"], "m") {
		t.Errorf("nested.py classes = %v", n.Classes)
	}
	v := n.Calls["Outer.value"]
	for _, want := range []string{"via_nested", "via_deeper", "via_chain", "class_call", "value_setter", "other"} {
		if !has(v, want) {
			t.Errorf("nested.py: Outer.value should reach %s: %v", want, v)
		}
	}
	if has(v, "hidden") {
		t.Errorf("nested.py: call inside a never-called nested def counted: %v", v)
	}
	mk := n.Calls["Outer.make_class"]
	if !has(mk, "in_class_body") || !has(mk, "in_default") || has(mk, "in_local_method") || has(mk, "in_uncalled_body") {
		t.Errorf("nested.py: Outer.make_class calls = %v", mk)
	}
	if got := get("tabs.py").Calls["T.a"]; !reflect.DeepEqual(got, []string{"x", "y", "z"}) {
		t.Errorf("tabs.py T.a calls = %v", got)
	}
	s := get("strings.py")
	if got := s.Calls["S.m"]; !reflect.DeepEqual(got, []string{"f1", "f2", "multi_line_field", "prec"}) {
		t.Errorf("strings.py S.m calls = %v", got)
	}
	if got := s.Calls["S.after_strings"]; !reflect.DeepEqual(got, []string{"still_found"}) {
		t.Errorf("strings.py: tokens after the string block lost: %v", got)
	}
	var env []string
	for _, e := range get("env.py").Env {
		env = append(env, e[0].(string))
	}
	sort.Strings(env)
	want := []string{"EP_A", "EP_AUG", "EP_B", "EP_C", "EP_CONCAT", "EP_D", "EP_E", "EP_F", "EP_FSTRING", "EP_G", "EP_H", "EP_I", "EP_IN_METHOD", "EP_MULTILINE"}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("env.py reads = %v, want %v", env, want)
	}
}
