package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/oci/ocitest"
)

// envelopeSchemaFile is the JSON Schema of every --json document, as docs/json.md names it.
var envelopeSchemaFile = filepath.Join("..", "..", "docs", "schema", "envelope.json")

// envelopeSchema compiles docs/schema/envelope.json (draft 2020-12).
func envelopeSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	b, err := os.ReadFile(envelopeSchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: %v", envelopeSchemaFile, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("envelope.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("envelope.json")
	if err != nil {
		t.Fatalf("compile %s: %v", envelopeSchemaFile, err)
	}
	return s
}

// checkEnvelope validates one document against the schema and checks that the envelope's
// fields come first, in order.
func checkEnvelope(t *testing.T, s *jsonschema.Schema, what, out string) {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(out))
	if err != nil {
		t.Errorf("%s: not JSON: %v\n%s", what, err, out)
		return
	}
	if err := s.Validate(doc); err != nil {
		t.Errorf("%s: does not follow %s: %#v\n%.2000s", what, envelopeSchemaFile, err, out)
	}
	if keys := topKeys(t, out); len(keys) < 5 || !slices.Equal(keys[:5], []string{"schema_version", "epbuild_version", "hostname", "ok", "command"}) {
		t.Errorf("%s: the document starts with %v", what, keys)
	}
}

// topKeys are the keys of a JSON object, in their order.
func topKeys(t *testing.T, out string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	if _, err := dec.Token(); err != nil {
		return nil
	}
	var keys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return keys
		}
		keys = append(keys, k.(string))
		if err := dec.Decode(new(json.RawMessage)); err != nil {
			return keys
		}
	}
	return keys
}

// jsonCommands are the commands that print JSON (--json, or matrix's --format json).
func jsonCommands(root *cobra.Command) []string {
	var names []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("json") != nil || c.Name() == "matrix" && c.Flags().Lookup("format") != nil {
			names = append(names, commandName(c))
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return names
}

// Every command that prints JSON, run with --json, prints one document that follows
// docs/schema/envelope.json: the envelope (ok too, on success and on failure) first,
// then the command's fields. A command that gains --json and is not run here fails the
// test.
func TestEveryJSONFollowsTheSchema(t *testing.T) {
	s := envelopeSchema(t)
	art := demoArtifact(t)
	cache := filepath.Join(shared.dir, "cache")
	env := nodeEnv("EPBUILD_CACHE", cache, "EPBUILD_HOSTNAME", "node-7", "DOCKER_CONFIG", t.TempDir())
	tmp := t.TempDir()
	prefix := filepath.Join(tmp, "prefix")
	a, b := filepath.Join(tmp, "a"), filepath.Join(tmp, "b")
	for _, d := range []string{a, b} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte(d), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reports := writeReports(t, map[string]string{"gpu-a": fleetReport("gpu-a", "pass", ""), "gpu-b": fleetReport("gpu-b", "fail", "reinstall")})
	reg := ocitest.Start(t, ocitest.Options{})
	repo := "oci://" + reg.Addr + "/epbuild/demo"
	// the artifact's name carries its plan key's first 12 hex digits, a tag push makes
	ref := repo + ":" + strings.TrimSuffix(strings.TrimPrefix(filepath.Base(art), "demo-"), ".tar.zst")
	benchDir := benchPrefix(t)

	cases := []struct {
		args []string
		exit int
	}{
		{[]string{"list", "--json"}, 0},
		{[]string{"show", "demo", "--json"}, 0},
		{[]string{"validate", "demo", "--json"}, 0},
		{[]string{"validate", "no-such", "--json"}, 2},
		{[]string{"version", "--json"}, 0},
		{[]string{"version", "--json", "--bogus"}, 2},
		{[]string{"recipe", "demo", "--plan", "--json"}, 0},
		{[]string{"recipe", "demo", "-o", filepath.Join(tmp, "out"), "--json"}, 0},
		{[]string{"fetch", "demo", "--json"}, 0},
		{[]string{"patch", "demo", "--check", "--json"}, 0},
		{[]string{"mirror", "demo", filepath.Join(tmp, "mirror"), "--json"}, 0},
		{[]string{"drift", "demo", "--component", "pydemo", "--json"}, 0},
		{[]string{"cache", "ls", "--json"}, 0},
		{[]string{"cache", "du", "--json"}, 0},
		{[]string{"cache", "gc", "--json"}, 0},
		{[]string{"compat", "check", "demo", "--json"}, 0},
		{[]string{"compat", "explain", "R3", "--json"}, 0},
		{[]string{"compat", "list", "--json"}, 0},
		{[]string{"matrix", "gcp-b200", "--axis", "nvshmem=3.4.5,3.5.19-1", "--format", "json"}, 0},
		{[]string{"matrix", "run", "demo", "--axis", "env.DEMO_EXTRA=x", "-o", filepath.Join(tmp, "m"), "--json"}, 0},
		{[]string{"install", art, "--prefix", prefix, "--json"}, 0},
		{[]string{"verify-install", "--prefix", prefix, "--json"}, 0},
		{[]string{"test", prefix, "--procs", "2", "--json"}, 0},
		{[]string{"test", prefix, "--only", "no-such", "--json"}, 2},
		{[]string{"host", "capture", filepath.Join(tmp, "cap.tar.zst"), "--json"}, 0},
		{[]string{"host", "check", "--sysroot", filepath.Join(tmp, "cap.tar.zst"), "--json"}, -1},
		{[]string{"fleet", "report", reports, "--json"}, 1},
		{[]string{"bench", "--prefix", benchDir, "--loopback", "--size", "1M", "--chunk", "128K", "--iters", "1", "--timeout", "30", "--json"}, 0},
		{[]string{"push", art, repo, "--plain-http", "--json"}, 0},
		{[]string{"pull", ref, "--plain-http", "--allow-unsigned", "-o", filepath.Join(tmp, "pulled"), "--json"}, 0},
		{[]string{"diff", a, a, "--json"}, 0},
		{[]string{"diff", a, b, "--json"}, 1},
	}
	ran := map[string]bool{}
	for _, tc := range cases {
		what := strings.Join(tc.args, " ")
		code, out, errs := run(t, env, tc.args...)
		if tc.exit >= 0 && code != tc.exit {
			t.Errorf("%s: exit %d, want %d\n%s\n%s", what, code, tc.exit, out, errs)
			continue
		}
		checkEnvelope(t, s, what, out)
		var doc struct {
			OK      bool   `json:"ok"`
			Command string `json:"command"`
		}
		_ = json.Unmarshal([]byte(out), &doc)
		if doc.OK != (code == 0) {
			t.Errorf("%s: exit %d with ok %v", what, code, doc.OK)
		}
		ran[doc.Command] = true
	}
	for _, c := range jsonCommands(NewRootCmd(&App{})) {
		if !ran[c] {
			t.Errorf("epbuild %s prints JSON but no document of it was checked here", c)
		}
	}
}

// The schema is not one that takes anything: documents that break the envelope fail it.
func TestEnvelopeSchemaCatchesMistakes(t *testing.T) {
	s := envelopeSchema(t)
	good := map[string]any{"schema_version": 1, "epbuild_version": "dev", "hostname": "n", "ok": true, "command": "cache ls", "dir": "/c", "entries": []any{}}
	bad := map[string]func(m map[string]any){
		"no ok":                  func(m map[string]any) { delete(m, "ok") },
		"no command":             func(m map[string]any) { delete(m, "command") },
		"an unknown command":     func(m map[string]any) { m["command"] = "frobnicate" },
		"ok false without error": func(m map[string]any) { m["ok"] = false },
		"ok true with an error":  func(m map[string]any) { m["error"] = map[string]any{"code": "failed", "exit_code": 1, "message": "x"} },
		"an unknown error code": func(m map[string]any) {
			m["ok"] = false
			m["error"] = map[string]any{"code": "oops", "exit_code": 1, "message": "x"}
		},
		"schema_version 2":         func(m map[string]any) { m["schema_version"] = 2 },
		"cache ls without entries": func(m map[string]any) { delete(m, "entries") },
		"entries not a list":       func(m map[string]any) { m["entries"] = "x" },
	}
	valid := func(m map[string]any) error {
		b, _ := json.Marshal(m)
		doc, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		return s.Validate(doc)
	}
	if err := valid(good); err != nil {
		t.Fatalf("a good document fails: %v", err)
	}
	for what, spoil := range bad {
		m := map[string]any{}
		for k, v := range good {
			m[k] = v
		}
		spoil(m)
		if valid(m) == nil {
			t.Errorf("%s: passes the schema", what)
		}
	}
}
