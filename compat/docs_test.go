package compat

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// docs/rules.md is what `make docs` writes from the embedded rules and host facts.
func TestRulesDocUpToDate(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	facts, err := LoadHostFacts()
	if err != nil {
		t.Fatal(err)
	}
	want := RulesMarkdown(rules, facts)
	got, err := os.ReadFile(filepath.Join("..", "docs", "rules.md"))
	if err != nil {
		t.Fatalf("%v: run make docs", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/rules.md is not what compat/rules.yaml says: run make docs and commit the result")
	}
	doc := string(want)
	for _, r := range rules.All() {
		for _, want := range []string{"\n## " + r.ID + "\n", r.Sources[0]} {
			if !strings.Contains(doc, want) {
				t.Errorf("docs lack %q for %s", want, r.ID)
			}
		}
	}
	for _, f := range facts {
		if !strings.Contains(doc, "| `"+f.Key+"` |") {
			t.Errorf("docs lack host fact %s", f.Key)
		}
	}
	for _, k := range append(slices.Clone(BuildKeys), RuntimeKeys...) {
		if !strings.Contains(doc, "| `"+k+"` |") {
			t.Errorf("docs lack build fact or runtime key %s", k)
		}
	}
	for _, want := range []string{"Build facts read: `nvshmem.rc-layout`", "Runtime keys read: `low-latency`, `ranks`, `gpus-per-node`"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs lack %q", want)
		}
	}
}
