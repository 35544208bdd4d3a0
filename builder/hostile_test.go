package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/patches"
	"github.com/epbuild/epbuild/recipes"
)

// hostileSet loads a patch set holding one patch, as a shipped set is loaded.
func hostileSet(patch string, setYAML func(sum string) string) (*patches.Set, error) {
	s := sha256.Sum256([]byte(patch))
	sum := hex.EncodeToString(s[:])
	y := fmt.Sprintf("name: hostile\ndescription: hostile\ncomponent: victim\npatches:\n  - name: 0001-hostile\n    file: 0001.patch\n    sha256: %s\n", sum)
	if setYAML != nil {
		y = setYAML(sum)
	}
	c, err := patches.LoadFS(fstest.MapFS{"hostile/set.yaml": {Data: []byte(y)}, "hostile/0001.patch": {Data: []byte(patch)}})
	if err != nil {
		return nil, err
	}
	set, _ := c.Get("hostile")
	return set, nil
}

// The hostile-input suite's patches, applied as the build applies them (ApplySets):
// each refused with its exit code and the file and reason, the tree and a canary
// outside it unchanged. A set.yaml that points a patch outside is refused at load,
// at its line.
func TestHostilePatchSets(t *testing.T) {
	newFile := func(path, body string) string {
		return fmt.Sprintf("diff --git a/%[1]s b/%[1]s\nnew file mode 100644\n--- /dev/null\n+++ b/%[1]s\n@@ -0,0 +1 @@\n+%[2]s\n", path, body)
	}
	cases := []struct {
		name  string
		patch func(canaryRel string) string
		plant func(t *testing.T, tree, outside string)
		want  string
	}{
		{name: "a path out of the tree", patch: func(rel string) string { return newFile(rel, "pwned") }, want: "refused: path leaves the tree (..)"},
		{name: "an absolute path", patch: func(string) string {
			return "diff --git a/x b/x\nsimilarity index 100%\nrename from a.txt\nrename to /tmp/evil\n"
		}, want: "refused: absolute path"},
		{name: "a write through a symlink of the source tree", patch: func(string) string { return newFile("lib/canary.txt", "pwned") },
			plant: func(t *testing.T, tree, outside string) {
				if err := os.Symlink(outside, filepath.Join(tree, "lib")); err != nil {
					t.Fatal(err)
				}
			}, want: "refused: path goes through the symlink lib"},
		{name: "a symlink created", patch: func(rel string) string {
			return "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+" + rel + "\n\\ No newline at end of file\n"
		}, want: "refused: symlink entries (mode 120000) are not applied"},
		{name: "a hook into .git", patch: func(string) string { return newFile(".git/hooks/post-checkout", "touch pwned") }, want: "refused: path is inside .git"},
		{name: "a deletion outside", patch: func(rel string) string {
			return "diff --git a/" + rel + " b/" + rel + "\ndeleted file mode 100644\n--- a/" + rel + "\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n"
		}, want: "refused: path leaves the tree (..)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			tree, outside := filepath.Join(parent, "tree"), filepath.Join(parent, "outside")
			for _, d := range []string{filepath.Join(tree, ".git", "hooks"), outside} {
				if err := os.MkdirAll(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			fixture.WriteFile(t, filepath.Join(tree, "a.txt"), "a\n")
			canary := filepath.Join(outside, "canary.txt")
			fixture.WriteFile(t, canary, "canary\n")
			if c.plant != nil {
				c.plant(t, tree, outside)
			}
			rel, _ := filepath.Rel(tree, canary)
			set, err := hostileSet(c.patch(rel), nil)
			if err != nil {
				t.Fatal(err)
			}
			before := snapshotTree(t, parent)
			pc := &plan.PlanComponent{Component: recipes.Component{Name: "victim"}, PatchSets: []*patches.Set{set}}
			_, _, err = stage.ApplySets(context.Background(), nil, pc, tree, patches.Options{})
			var pe *stage.PatchError
			if !errors.As(err, &pe) || pe.ExitCode() != 1 {
				t.Fatalf("got %v; want a PatchError, exit 1", err)
			}
			if !strings.HasPrefix(err.Error(), "patch victim with hostile: patch 0001-hostile: ") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
			if after := snapshotTree(t, parent); len(after) != len(before) {
				t.Errorf("the tree or the canary's directory changed")
			} else {
				for k, v := range before {
					if after[k] != v {
						t.Errorf("%s changed", k)
					}
				}
			}
		})
	}
	// a set that replaces a file outside the tree does not load
	_, err := hostileSet("", func(string) string {
		return "name: hostile\ndescription: hostile\ncomponent: victim\npatches:\n  - name: r\n    replace:\n      target: ../../etc/passwd\n" +
			"      repo: https://example.invalid/r\n      commit: 131da55f643ac87c810ba0bc51d359258bf433a1\n      path: x\n      sha256: \"" + strings.Repeat("0", 64) + "\"\n"
	})
	if err == nil || !strings.Contains(err.Error(), "patches/hostile/set.yaml:7:15") || !strings.Contains(err.Error(), "not a relative path inside a tree") {
		t.Errorf("a replace target outside the tree: %v", err)
	}
}
