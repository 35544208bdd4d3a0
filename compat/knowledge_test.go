package compat

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// KNOWLEDGE.md (beside the checkout, in shared/) is the source of the rules: every rule id
// its table lists must be in the embedded rules, so the two tell the same story.
func TestRulesCoverKnowledge(t *testing.T) {
	var doc []byte
	for _, p := range []string{filepath.Join("..", "..", "shared", "KNOWLEDGE.md"), filepath.Join("..", "shared", "KNOWLEDGE.md")} {
		if b, err := os.ReadFile(p); err == nil {
			doc = b
			break
		}
	}
	if doc == nil {
		t.Skip("shared/KNOWLEDGE.md is not beside this checkout")
	}
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, id := range rules.IDs() {
		have[id] = true
	}
	ids := regexp.MustCompile(`(?m)^\| (R\d+) \|`).FindAllSubmatch(doc, -1)
	if len(ids) < 23 {
		t.Fatalf("found only %d rule rows in KNOWLEDGE.md", len(ids))
	}
	for _, m := range ids {
		if !have[string(m[1])] {
			t.Errorf("KNOWLEDGE.md lists %s, the embedded rules do not", m[1])
		}
	}
}
