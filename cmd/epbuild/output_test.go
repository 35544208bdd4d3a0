package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/epbuild/epbuild/recipes"
)

// oneDocument decodes stdout as exactly one JSON object and checks its report header.
func oneDocument(t *testing.T, what, out string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: stdout is not a JSON object: %v\n%s", what, err, out)
	}
	if err := dec.Decode(new(any)); !errors.Is(err, io.EOF) {
		t.Fatalf("%s: more than one JSON document on stdout:\n%s", what, out)
	}
	if doc["schema_version"] != float64(schemaVersion) || doc["hostname"] != "node-7" || doc["epbuild_version"] == "" || doc["epbuild_version"] == nil {
		t.Errorf("%s: report header: schema_version %v, hostname %v, epbuild_version %v", what, doc["schema_version"], doc["hostname"], doc["epbuild_version"])
	}
	return doc
}

// Every command that prints results prints, with --json, one JSON object that starts
// with schema_version, epbuild_version and hostname.
func TestJSONEverywhere(t *testing.T) {
	cacheDir := t.TempDir()
	env := nodeEnv("EPBUILD_CACHE", cacheDir, "EPBUILD_HOSTNAME", "node-7")
	mirror := filepath.Join(t.TempDir(), "mirror")
	for _, args := range [][]string{
		{"list", "--json"},
		{"show", "demo", "--json"},
		{"validate", "demo", "single-node", "--json"},
		{"version", "--json"},
		{"compat", "list", "--json"},
		{"compat", "explain", "R3", "--json"},
		{"compat", "check", "demo", "--json"},
		{"matrix", "gcp-b200", "--axis", "nvshmem=3.4.5,3.5.19-1", "--format", "json"},
		{"fetch", "demo", "--json"},
		{"patch", "demo", "--check", "--json"},
		{"mirror", "demo", mirror, "--json"},
		{"recipe", "demo", "--plan", "--json"},
		{"cache", "ls", "--json"},
		{"cache", "du", "--json"},
		{"cache", "gc", "--json"},
	} {
		code, out, errs := run(t, env, args...)
		if code != 0 {
			t.Errorf("%v: exit %d\n%s", args, code, errs)
			continue
		}
		doc := oneDocument(t, strings.Join(args, " "), out)
		if args[0] == "cache" && args[1] == "du" && len(doc["kinds"].([]any)) != 5 {
			t.Errorf("cache du --json: %v", doc)
		}
	}
}

// A command asked for JSON that fails before it has a result prints one JSON document
// with ok false and the error (a stable code, the exit code, the message): the exit
// code is unchanged and stderr still says what happened.
func TestJSONOnFailure(t *testing.T) {
	env := nodeEnv("EPBUILD_CACHE", t.TempDir(), "EPBUILD_HOSTNAME", "node-7")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\ncluster: c\ndescription: d\ncomponents:\n  - name: x\n    sorce: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		exit int
		code string
		msg  string
	}{
		{[]string{"show", "no-such", "--json"}, env, 2, "bad_recipe", "no recipe named"},
		{[]string{"recipe", "no-such", "--json"}, env, 2, "bad_recipe", "no recipe named"},
		{[]string{"recipe", "demo", "--json", "-o", t.TempDir()}, nodeEnv("EPBUILD_HOSTNAME", "node-7", "EPBUILD_CACHE", t.TempDir(), "SOURCE_DATE_EPOCH", "soon"), 2, "usage", "SOURCE_DATE_EPOCH"},
		{[]string{"fetch", "demo", "--set", "libdemo.commit=ab8d30a", "--json"}, env, 2, "bad_recipe", "40-hex"},
		{[]string{"cache", "gc", "--older-than", "a while", "--json"}, env, 2, "usage", "--older-than"},
		{[]string{"compat", "explain", "R99", "--json"}, env, 2, "usage", "no rule"},
		{[]string{"version", "--json", "--bogus"}, env, 2, "usage", "unknown flag"},
	} {
		code, out, errs := run(t, tc.env, tc.args...)
		if code != tc.exit {
			t.Errorf("%v: exit %d, want %d\n%s", tc.args, code, tc.exit, errs)
			continue
		}
		doc := oneDocument(t, strings.Join(tc.args, " "), out)
		e, _ := doc["error"].(map[string]any)
		if doc["ok"] != false || e == nil || e["code"] != tc.code || e["exit_code"] != float64(tc.exit) || !strings.Contains(e["message"].(string), tc.msg) {
			t.Errorf("%v: %s", tc.args, out)
		}
		if !strings.Contains(errs, "epbuild: ") || !strings.Contains(errs, tc.msg) {
			t.Errorf("%v: stderr %q", tc.args, errs)
		}
	}
	// a result printed, then the failure: still one document, with the result
	code, out, _ := run(t, env, "validate", "demo", bad, "--json")
	doc := oneDocument(t, "validate --json", out)
	rs, _ := doc["recipes"].([]any)
	if code != 2 || doc["ok"] != false || len(rs) != 2 {
		t.Fatalf("validate a bad recipe: exit %d\n%s", code, out)
	}
	es := rs[1].(map[string]any)["errors"].([]any)
	if e := es[0].(map[string]any); e["file"] != bad || e["line"] != float64(6) || !strings.Contains(e["message"].(string), "sorce") {
		t.Errorf("validate --json error: %v", e)
	}
}

// --log-format json: every stderr line is one JSON object with an RFC 3339 time, and the
// final error is one of them (its code and exit code as fields), not a plain line; also
// when the flags themselves are wrong.
func TestLogFormatJSON(t *testing.T) {
	env := nodeEnv("EPBUILD_CACHE", t.TempDir())
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("name: bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--log-format", "json", "show", "no-such"},
		{"--log-format", "json", "--log-level", "loud", "list"},
		{"--log-format", "json", "list", "--bogus"},
		{"--log-format", "json", "validate", bad},
		{"--log-format", "json", "recipe", "gcp-b200", "--set", "deepep.commit=9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee", "-o", t.TempDir()},
	} {
		code, _, errs := run(t, env, args...)
		if code != 2 {
			t.Errorf("%v: exit %d\n%s", args, code, errs)
		}
		lines := strings.Split(strings.TrimRight(errs, "\n"), "\n")
		var last map[string]any
		for _, l := range lines {
			last = nil
			if err := json.Unmarshal([]byte(l), &last); err != nil {
				t.Errorf("%v: a stderr line is not JSON: %q", args, l)
				continue
			}
			if _, err := time.Parse(time.RFC3339, last["time"].(string)); err != nil {
				t.Errorf("%v: time %v is not RFC 3339", args, last["time"])
			}
		}
		if last["level"] != "error" || last["exit_code"] != float64(2) || last["code"] == nil || last["msg"] == "" {
			t.Errorf("%v: the last record is %v", args, last)
		}
	}
}

// The header goes first, in its order; a field the report has already keeps its value,
// at the header's place; the report's other fields follow in their order.
func TestWithHeader(t *testing.T) {
	head := [][2]any{{"schema_version", 1}, {"hostname", "n1"}, {"ok", true}}
	for in, want := range map[string]string{
		`{"a":1}`:                      `{"schema_version":1,"hostname":"n1","ok":true,"a":1}`,
		`{}`:                           `{"schema_version":1,"hostname":"n1","ok":true}`,
		`{"hostname":"gpu-a"}`:         `{"schema_version":1,"hostname":"gpu-a","ok":true}`,
		` {"b":[1,2],"c":{}} `:         `{"schema_version":1,"hostname":"n1","ok":true,"b":[1,2],"c":{}}`,
		`{"z":1,"ok":false,"a":2.50}`:  `{"schema_version":1,"hostname":"n1","ok":false,"z":1,"a":2.50}`,
		`{"big":12345678901234567890}`: `{"schema_version":1,"hostname":"n1","ok":true,"big":12345678901234567890}`,
	} {
		got, err := withHeader([]byte(in), head)
		if err != nil || string(got) != want {
			t.Errorf("withHeader(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if _, err := withHeader([]byte(`[1]`), head); err == nil {
		t.Errorf("an array became a report")
	}
}

// complete runs cobra's hidden completion command and returns the candidates and the
// directive.
func complete(t *testing.T, env map[string]string, args ...string) ([]string, string) {
	t.Helper()
	code, out, errs := run(t, env, append([]string{"__complete"}, args...)...)
	if code != 0 {
		t.Fatalf("__complete %v: exit %d %s", args, code, errs)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	var cands []string
	for _, l := range lines[:len(lines)-1] {
		c, _, _ := strings.Cut(l, "\t")
		cands = append(cands, c)
	}
	return cands, lines[len(lines)-1]
}

func TestCompletion(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mine.yaml"), []byte("name: mine\ncluster: my lab\ndescription: d\ncomponents:\n  - name: deepep\n    source:\n      git: {url: \"https://github.com/deepseek-ai/DeepEP\", commit: 29d31c095796f3c8ece47ee9cdcc167051bbeed9}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const noFiles, noSpace, files = ":4", ":6", ":0"
	for _, tc := range []struct {
		args      []string
		want      []string
		directive string
	}{
		{[]string{"show", ""}, []string{"demo", "gcp-b200", "single-node"}, noFiles},
		{[]string{"recipe", "gcp-"}, []string{"gcp-a3-tcpx", "gcp-b200"}, noFiles},
		{[]string{"--recipe-dir", dir, "recipe", "mi"}, []string{"mine"}, noFiles},
		{[]string{"recipe", "./"}, nil, files},
		{[]string{"recipe", "demo", ""}, nil, noFiles},
		{[]string{"recipe", "demo", "--set", ""}, []string{"libdemo.", "pydemo.", "env.", "toolchain."}, noSpace},
		{[]string{"recipe", "demo", "--set", "libdemo."}, []string{"libdemo.commit=", "libdemo.version=", "libdemo.source=", "libdemo.options.", "libdemo.env."}, noSpace},
		{[]string{"recipe", "demo", "--set", "libdemo.options."}, []string{"libdemo.options.CMAKE_C_FLAGS="}, noSpace},
		{[]string{"show", "demo", "--set", "pydemo.env."}, []string{"pydemo.env.LIBDEMO_PREFIX="}, noSpace},
		{[]string{"recipe", "demo", "--set", "env."}, []string{"env.DEMO_LANE_MAPPING=", "env.DEMO_LIB="}, noSpace},
		{[]string{"recipe", "demo", "--set", "toolchain.c"}, []string{"toolchain.cuda=", "toolchain.cmake="}, noSpace},
		{[]string{"compat", "check", "demo", "--set", "libdemo.source="}, []string{"libdemo.source=git", "libdemo.source=archive"}, noFiles},
		{[]string{"recipe", "demo", "--force="}, []string{"all", "patch", "build", "check", "package"}, noFiles},
		{[]string{"recipe", "demo", "--ignore-rule", "R1"}, []string{"R1", "R10", "R19"}, noFiles},
		{[]string{"compat", "explain", "R2"}, []string{"R2", "R20", "R29"}, noFiles},
		{[]string{"compat", "explain", "R2", ""}, nil, noFiles},
		{[]string{"--log-level", ""}, []string{"debug", "info", "warn", "error"}, noFiles},
		{[]string{"list", "--log-format", ""}, []string{"text", "json"}, noFiles},
		{[]string{"matrix", "gcp-b200", "--format", ""}, []string{"text", "json", "github", "gitlab"}, noFiles},
		{[]string{"drift", "gcp-b200", "--component", ""}, []string{"nvshmem", "deepep"}, noFiles},
		{[]string{"host", "check", "--recipe", "efa"}, []string{"efa-aws"}, noFiles},
	} {
		got, dir := complete(t, nil, tc.args...)
		if dir != tc.directive {
			t.Errorf("%q: directive %s, want %s (%v)", tc.args, dir, tc.directive, got)
		}
		for _, w := range tc.want {
			found := false
			for _, g := range got {
				found = found || g == w
			}
			if !found {
				t.Errorf("%q: %q not among %q", tc.args, w, got)
			}
		}
		if tc.want == nil && len(got) > 0 {
			t.Errorf("%q: %q, want none", tc.args, got)
		}
	}
	// recipe names come with their cluster
	code, out, _ := run(t, nil, "__complete", "show", "dem")
	if code != 0 || !strings.Contains(out, "demo\tany machine with gcc, cmake and python3") {
		t.Errorf("no description: %q", out)
	}
}

// The keys completion offers for --set are the keys the recipe model takes.
func TestCompletionSetKeysAreAccepted(t *testing.T) {
	for _, k := range append(prefixed("libdemo.", componentSetKeys), prefixed("toolchain.", toolchainSetKeys)...) {
		doc, err := recipes.NewLibrary().Load("demo")
		if err != nil {
			t.Fatal(err)
		}
		if err := doc.Apply([]string{k + "=1"}); err != nil && strings.Contains(err.Error(), "unknown key") {
			t.Errorf("--set %s: %v", k, err)
		}
	}
}

func prefixed(p string, ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = p + k
	}
	return out
}

// pflag takes backquoted text in a flag's usage for its value's name: each such name is
// one word in capitals (KEY=VALUE, STAGE), never a phrase such as `epbuild show --help`.
func TestFlagValueNames(t *testing.T) {
	root := NewRootCmd(&App{Streams: Streams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, Getenv: func(string) string { return "" }})
	word := regexp.MustCompile(`^[A-Za-z0-9_=.\[\]|-]*$`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if !word.MatchString(name) {
				t.Errorf("%s --%s shows its value as %q", c.CommandPath(), f.Name, name)
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"recipe", "--help"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "--set KEY=VALUE ") {
		t.Errorf("recipe --help: %v\n%s", err, out.String())
	}
}
