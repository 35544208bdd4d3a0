package demo

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/recipes"
)

// The demo recipe pins the commits Materialize makes; editing the embedded sources
// changes them, and this test says which pin to update.
func TestDemoPinsMatchEmbeddedSources(t *testing.T) {
	dir := t.TempDir()
	ids, err := Materialize(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Materialize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	doc, err := recipes.NewLibrary().Load("demo")
	if err != nil {
		t.Fatal(err)
	}
	for name, id := range ids {
		if again[name] != id {
			t.Errorf("%s: commit ids differ between two runs (%s, %s): not deterministic", name, id, again[name])
		}
		c, ok := doc.Recipe.Component(name)
		if !ok {
			t.Fatalf("recipes/demo.yaml has no component %s", name)
		}
		if c.Source.Git.URL != URL(name) {
			t.Errorf("%s: recipe URL %s, want %s", name, c.Source.Git.URL, URL(name))
		}
		if c.Source.Git.Commit != id {
			t.Errorf("%s: recipes/demo.yaml pins %s but the embedded sources make %s: update the pin (and the demo patch sets' applies-to)", name, c.Source.Git.Commit, id)
		}
		// the repositories are real: git reads them, and the tag points at the commit
		gitDir := filepath.Join(dir, Host, "demo", name+".git")
		out, err := exec.Command("git", "--git-dir", gitDir, "rev-parse", Tag+"^{commit}").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != id {
			t.Errorf("%s: git rev-parse %s: %s %v", name, Tag, out, err)
		}
		if out, err := exec.Command("git", "--git-dir", gitDir, "fsck", "--strict").CombinedOutput(); err != nil {
			t.Errorf("%s: git fsck: %v\n%s", name, err, out)
		}
	}
}
