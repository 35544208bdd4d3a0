package stage

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
	"github.com/epbuild/epbuild/recipes/lock"
)

// The declared tests are copied flat into the prefix's tests/, the exec bit kept; a
// file the tree lacks, or a link (which could point out of the tree), fails the build
// naming the file and the fix.
func TestCopyTests(t *testing.T) {
	src, dest := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "tests"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"tests/run.py": 0o755, "tests/utils.py": 0o600} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(name), mode); err != nil {
			t.Fatal(err)
		}
	}
	se := &stepEnv{component: "deepep", src: src, destdir: dest, prefix: "/opt/x/deepep"}
	if err := se.copyTests(&recipes.Tests{Files: []string{"tests/run.py", "tests/utils.py"}}); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"run.py": 0o755, "utils.py": 0o644} {
		st, err := os.Stat(filepath.Join(dest, "opt/x/deepep/tests", name))
		if err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v, mode %v, want %v", name, err, st, mode)
		}
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "tests", "link.py")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tests/gone.py", "tests/link.py"} {
		err := se.copyTests(&recipes.Tests{Files: []string{f}})
		if err == nil || !strings.Contains(err.Error(), "test file "+f) || !strings.Contains(err.Error(), "check the path at this commit") {
			t.Errorf("%s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dest, "opt/x/deepep/tests", "link.py")); err == nil {
		t.Errorf("the link was copied")
	}
}

// The tests a component declares are part of its build's key (the build copies them), and
// a component that declares none keeps the key it had.
func TestBuildKeyHoldsTheTests(t *testing.T) {
	c := lock.Component{Component: recipes.Component{Name: "c", Source: recipes.Source{Git: &recipes.GitSource{URL: "https://x/y", Commit: strings.Repeat("a", 40)}},
		Build: []recipes.Step{{Command: &recipes.CommandStep{Run: []string{"true"}}}}}}
	key := func(tests *recipes.Tests) string {
		cc := c
		cc.Tests = tests
		return (&Runner{Toolchain: &toolchain.Toolchain{}}).keys(&plan.Plan{Components: []lock.Component{cc}})["c"].build
	}
	none := key(nil)
	a := key(&recipes.Tests{Files: []string{"t.py"}, Run: []recipes.TestRun{{Name: "t", Argv: []string{"python3", "t.py"}, Timeout: "1m"}}})
	b := key(&recipes.Tests{Files: []string{"t.py", "u.py"}, Run: []recipes.TestRun{{Name: "t", Argv: []string{"python3", "t.py"}, Timeout: "1m"}}})
	if none == "" || none == a || a == b {
		t.Errorf("keys: none %s, a %s, b %s", none, a, b)
	}
	if want := store.Key(buildFormat, patchKey(&c), c.Version, c.Build, map[string]string{}, (&toolchain.Toolchain{}).Fingerprint(), (&Runner{}).Repro.key(), ""); none != want {
		t.Errorf("a component without tests changed its key: %s, was %s", none, want)
	}
}
