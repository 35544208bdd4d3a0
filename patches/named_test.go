package patches

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadNamed(t *testing.T) {
	c, err := LoadNamed("deepep-pr466", "no-such-set", "../x", "deepep-pr466")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); len(got) != 1 || got[0] != "deepep-pr466" {
		t.Fatalf("LoadNamed read %v, want only deepep-pr466", got)
	}
	all, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range all.Names() {
		one, err := LoadNamed(n)
		if err != nil {
			t.Fatal(err)
		}
		if s, ok := one.Get(n); !ok || s.Component != mustGet(t, all, n).Component || len(s.Patches) != len(mustGet(t, all, n).Patches) {
			t.Errorf("set %s reads differently alone", n)
		}
	}
}

func mustGet(t *testing.T, c *Catalog, n string) *Set {
	t.Helper()
	s, ok := c.Get(n)
	if !ok {
		t.Fatalf("no set %s", n)
	}
	return s
}

// writeLocalSet writes <dir>/<name>/set.yaml with one file patch and returns the
// patch file's path.
func writeLocalSet(t *testing.T, dir, name, component, patch string) string {
	t.Helper()
	set := filepath.Join(dir, name)
	if err := os.MkdirAll(set, 0o755); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(set, "0001-fix.patch")
	y := fmt.Sprintf("name: %s\ndescription: a site fix\ncomponent: %s\npatches:\n  - name: fix\n    file: 0001-fix.patch\n    sha256: %s\n",
		name, component, sha256Hex([]byte(patch)))
	if err := os.WriteFile(filepath.Join(set, "set.yaml"), []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(patch), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

const localPatch = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+b\n"

// TestLoadLocal: a set in a local directory loads with that directory as its
// origin; directories are searched in order; a shipped set is found as before.
func TestLoadLocal(t *testing.T) {
	one, two := t.TempDir(), t.TempDir()
	writeLocalSet(t, one, "site-fix", "deepep", localPatch)
	writeLocalSet(t, two, "site-fix", "nvshmem", localPatch)
	writeLocalSet(t, two, "other-fix", "nvshmem", localPatch)
	c, err := LoadFor(Local{Dirs: []string{one, two}}, "site-fix", "other-fix", "deepep-pr466", "unknown")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Names(), ","); got != "deepep-pr466,other-fix,site-fix" {
		t.Fatalf("loaded %s", got)
	}
	if s := mustGet(t, c, "site-fix"); s.Origin() != filepath.Join(one, "site-fix") || s.Component != DeepEP {
		t.Errorf("site-fix from %s (component %s), want the first directory", s.Origin(), s.Component)
	}
	if s := mustGet(t, c, "other-fix"); s.Origin() != filepath.Join(two, "other-fix") {
		t.Errorf("other-fix from %s", s.Origin())
	}
	if s := mustGet(t, c, "deepep-pr466"); s.Origin() != "embedded" {
		t.Errorf("deepep-pr466 from %s", s.Origin())
	}
	// the local set applies like a shipped one
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(context.Background(), tree, mustGet(t, c, "site-fix"), nil, Options{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(tree, "a.txt")); string(b) != "b\n" {
		t.Errorf("a.txt is %q after the local set", b)
	}

	if _, err := LoadFor(Local{Dirs: []string{filepath.Join(one, "nope")}}, "site-fix"); err == nil || exitCode(err) != 2 {
		t.Errorf("a missing directory: %v", err)
	}
}

// TestLocalShadow: a local set named like a shipped one is refused unless the
// shadow list names it, and then it is used.
func TestLocalShadow(t *testing.T) {
	dir := t.TempDir()
	writeLocalSet(t, dir, "deepep-pr466", "deepep", localPatch)
	_, err := LoadFor(Local{Dirs: []string{dir}}, "deepep-pr466")
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), filepath.Join(dir, "deepep-pr466")+`: patch set "deepep-pr466" is also shipped with epbuild: pass --shadow deepep-pr466`) {
		t.Fatalf("shadowing without the flag: %v", err)
	}
	c, err := LoadFor(Local{Dirs: []string{dir}, Shadow: []string{"deepep-pr466"}}, "deepep-pr466")
	if err != nil {
		t.Fatal(err)
	}
	if s := mustGet(t, c, "deepep-pr466"); s.Origin() != filepath.Join(dir, "deepep-pr466") || s.Patches[0].Kind() != KindFile {
		t.Fatalf("with --shadow: set from %s, %+v", s.Origin(), s.Patches)
	}
}

// TestLocalTampered: a local patch whose bytes do not hash to its pin is
// refused naming the file, at load (exit 2) and, changed after loading, at
// apply time, with the tree untouched.
func TestLocalTampered(t *testing.T) {
	dir := t.TempDir()
	file := writeLocalSet(t, dir, "site-fix", "deepep", localPatch)
	c, err := LoadFor(Local{Dirs: []string{dir}}, "site-fix")
	if err != nil {
		t.Fatal(err)
	}
	tampered := strings.Replace(localPatch, "+b", "+evil", 1)
	if err := os.WriteFile(file, []byte(tampered), 0o644); err != nil {
		t.Fatal(err)
	}
	tree := t.TempDir()
	if err := os.WriteFile(filepath.Join(tree, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Apply(context.Background(), tree, mustGet(t, c, "site-fix"), nil, Options{})
	var pe *PinError
	if !errors.As(err, &pe) || pe.What != file || !strings.Contains(err.Error(), file+": sha256 is "+sha256Hex([]byte(tampered))) {
		t.Fatalf("tampered after loading: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(tree, "a.txt")); string(b) != "a\n" {
		t.Errorf("a.txt changed to %q", b)
	}
	_, err = LoadFor(Local{Dirs: []string{dir}}, "site-fix")
	want := filepath.Join(dir, "site-fix", "set.yaml") + ":7:13: patches[0].sha256: " + file + " has sha256 " + sha256Hex([]byte(tampered))
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
		t.Fatalf("tampered at load:\n got %v\nwant %s", err, want)
	}
}

func exitCode(err error) int {
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}
