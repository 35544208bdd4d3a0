package embedded

import (
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/recipes"
)

// Every shipped recipe pins the commits Materialize makes; editing the embedded sources
// changes them, and this test says which pin to update.
func TestRecipePinsMatchEmbeddedSources(t *testing.T) {
	dir := t.TempDir()
	ids, err := Materialize(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := Materialize(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for path, id := range ids {
		if again[path] != id {
			t.Errorf("%s: commit ids differ between two runs (%s, %s): not deterministic", path, id, again[path])
		}
	}
	// the demo recipe and its patch sets' applies-to pin these; the rename of the
	// package that holds them must not have moved them
	for path, want := range map[string]string{
		"demo/libdemo": "ab8d30a0c03d891912863703b1244059af07daf9",
		"demo/pydemo":  "a2736c0634a0e55d5ce16201d18258892f8dcb5c",
	} {
		if ids[path] != want {
			t.Errorf("%s: the embedded sources make %s, the demo recipe pins %s", path, ids[path], want)
		}
	}

	lib := recipes.NewLibrary()
	names, err := lib.Names()
	if err != nil {
		t.Fatal(err)
	}
	pinned := map[string]bool{}
	for _, name := range names {
		doc, err := lib.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range doc.Recipe.Components {
			g := c.Source.Git
			if g == nil {
				continue
			}
			u, err := url.Parse(g.URL)
			if err != nil || u.Host != Host {
				continue
			}
			path := strings.TrimPrefix(u.Path, "/")
			id, ok := ids[path]
			if !ok {
				t.Errorf("recipes/%s.yaml: component %s names %s, which is not an embedded repository", name, c.Name, g.URL)
				continue
			}
			pinned[path] = true
			if g.Commit != id {
				t.Errorf("recipes/%s.yaml: component %s pins %s but the embedded sources of %s make %s: update the pin (and any patch set's applies-to)", name, c.Name, g.Commit, path, id)
			}
			group, rname, _ := strings.Cut(path, "/")
			r, _ := Lookup(group, rname)
			if g.Ref != "" && g.Ref != r.Tag() {
				t.Errorf("recipes/%s.yaml: component %s names ref %s, the repository's tag is %s", name, c.Name, g.Ref, r.Tag())
			}
		}
	}
	for _, r := range Repos() {
		if !pinned[r.Path()] {
			t.Errorf("embedded repository %s is pinned by no recipe", r.Path())
		}
		// the repositories are real: git reads them, and the tag points at the commit
		gitDir := filepath.Join(dir, Host, r.Group, r.Name+".git")
		out, err := exec.Command("git", "--git-dir", gitDir, "rev-parse", r.Tag()+"^{commit}").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != ids[r.Path()] {
			t.Errorf("%s: git rev-parse %s: %s %v", r.Path(), r.Tag(), out, err)
		}
		if out, err := exec.Command("git", "--git-dir", gitDir, "fsck", "--strict").CombinedOutput(); err != nil {
			t.Errorf("%s: git fsck: %v\n%s", r.Path(), err, out)
		}
	}
}

// Scripts keep their executable bit in the repository and when written out.
func TestScriptsAreExecutable(t *testing.T) {
	dir := t.TempDir()
	if _, err := Materialize(dir); err != nil {
		t.Fatal(err)
	}
	for _, r := range Repos() {
		files, err := Files(r.Group, r.Name)
		if err != nil {
			t.Fatal(err)
		}
		gitDir := filepath.Join(dir, Host, r.Group, r.Name+".git")
		for rel := range files {
			if !strings.HasSuffix(rel, ".sh") {
				continue
			}
			out, err := exec.Command("git", "--git-dir", gitDir, "ls-tree", "HEAD", rel).CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "100755 ") {
				t.Errorf("%s: %s is not executable in the repository: %s %v", r.Path(), rel, out, err)
			}
		}
	}
	if _, err := Files("tools", "nope"); err == nil {
		t.Error("Files of an unknown repository: no error")
	}
}
