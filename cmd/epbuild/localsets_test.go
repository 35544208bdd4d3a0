package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sitePatch is a site fix of our own for the demo's pydemo: Channel reads
// DEMO_SITE in a method that __init__ calls, and describe() reports it.
const sitePatch = `diff --git a/pydemo/channel.py b/pydemo/channel.py
--- a/pydemo/channel.py
+++ b/pydemo/channel.py
@@ -14,6 +14,10 @@ class Channel:
         self.index = index
         self.lib = library()
         self.channels = self.lib.demo_channels()
+        self._setup_site()
+
+    def _setup_site(self):
+        self.site = os.environ.get("DEMO_SITE", "nowhere")
 
     def describe(self):
-        return "channel %d of %d" % (self.index, self.channels)
+        return "channel %d of %d at %s" % (self.index, self.channels, self.site)
`

const siteSet = `name: %NAME%
description: A site fix kept beside the recipe; Channel reports DEMO_SITE.
component: pydemo
patches:
  - name: 0001-site
    file: 0001-site.patch
    sha256: %SHA%
effects:
  - kind: python-def
    file: pydemo/channel.py
    installed: pydemo/channel.py
    class: Channel
    method: _setup_site
    why: the site comes from this method
  - kind: python-call
    file: pydemo/channel.py
    installed: pydemo/channel.py
    class: Channel
    method: __init__
    callee: _setup_site
    why: a method that is never called sets nothing
  - kind: env-read
    file: pydemo/channel.py
    installed: pydemo/channel.py
    name: DEMO_SITE
    why: the site comes from this variable
`

// siteRecipe writes, in a new directory, the demo recipe with pydemo patched by a
// set named name from patches/ beside it, and returns the recipe file and the
// patch file.
func siteRecipe(t *testing.T, name string) (recipe, patch string) {
	t.Helper()
	dir := t.TempDir()
	demo, err := os.ReadFile(filepath.Join("..", "..", "recipes", "demo.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Replace(string(demo), "name: demo\n", "name: site-demo\n", 1)
	body = strings.Replace(body, "patches: [demo-py-lanes]", "patches: ["+name+"]", 1)
	if !strings.Contains(body, "patches: ["+name+"]") {
		t.Fatal("the demo recipe no longer patches pydemo with demo-py-lanes")
	}
	recipe = filepath.Join(dir, "site-demo.yaml")
	setDir := filepath.Join(dir, "patches", name)
	patch = filepath.Join(setDir, "0001-site.patch")
	sum := sha256.Sum256([]byte(sitePatch))
	set := strings.NewReplacer("%NAME%", name, "%SHA%", hex.EncodeToString(sum[:])).Replace(siteSet)
	if err := os.MkdirAll(setDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, data := range map[string]string{recipe: body, patch: sitePatch, filepath.Join(setDir, "set.yaml"): set} {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return recipe, patch
}

// TestLocalPatchSetBuildsDemo: a recipe in a directory of its own names a
// patch set kept beside it; show says where the set came from, and the build
// applies it, proves its effects on the tree and the staged copy, and the
// installed package behaves as the patch says.
func TestLocalPatchSetBuildsDemo(t *testing.T) {
	recipe, _ := siteRecipe(t, "site-fix")
	setDir := filepath.Join(filepath.Dir(recipe), "patches", "site-fix")
	code, out, errs := run(t, nil, "show", recipe)
	if code != 0 || !strings.Contains(out, "patches site-fix ("+setDir+")") || !strings.Contains(out, "patches demo-lib-lanes (embedded)") {
		t.Fatalf("show: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = run(t, nil, "show", recipe, "--json")
	var shown struct {
		Origins map[string]string `json:"patch-set-origins"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.Origins["site-fix"] != setDir || shown.Origins["demo-lib-lanes"] != "embedded" {
		t.Fatalf("show --json: exit %d, origins %v\n%s", code, shown.Origins, errs)
	}

	cache, outDir := t.TempDir(), t.TempDir()
	env := map[string]string{"EPBUILD_CACHE": cache}
	code, out, errs = run(t, env, "recipe", recipe, "-o", outDir, "--json")
	if code == exitEnv {
		t.Skipf("the demo cannot build here: %s", errs)
	}
	if code != 0 {
		t.Fatalf("recipe: exit %d\n%s", code, errs)
	}
	var res struct {
		Artifact   string `json:"artifact"`
		Components []struct {
			Name        string `json:"name"`
			TreeEffects []struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			} `json:"tree_effects"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("recipe --json: %v\n%s", err, out)
	}
	proven := 0
	for _, c := range res.Components {
		for _, e := range c.TreeEffects {
			if c.Name == "pydemo" && e.Status == "pass" {
				proven++
			}
		}
	}
	if proven != 3 {
		t.Fatalf("the site set's three effects were not all proven on the tree: %s", out)
	}
	inst := t.TempDir()
	if b, err := exec.Command("tar", "--zstd", "-xf", res.Artifact, "-C", inst).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, b)
	}
	cmd := exec.Command("bash", "-c", `. ./env.sh && cd / && DEMO_SITE=lab python3 -c 'import pydemo; print(pydemo.Channel(1).describe())'`)
	cmd.Dir = inst
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "channel 1 of 4 at lab") {
		t.Fatalf("the installed demo does not carry the site fix: %v\n%s", err, b)
	}
}

// TestLocalPatchSetRefused: a tampered local patch is refused naming the file
// (exit 2); a local set named like a shipped one needs --shadow; --patch-dir
// adds a directory.
func TestLocalPatchSetRefused(t *testing.T) {
	recipe, patch := siteRecipe(t, "site-fix")
	if err := os.WriteFile(patch, []byte(strings.Replace(sitePatch, "nowhere", "elsewhere", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"show", recipe}, {"patch", recipe, "--check"}, {"recipe", recipe, "--plan"}} {
		code, _, errs := run(t, map[string]string{"EPBUILD_CACHE": t.TempDir()}, cmd...)
		if code != exitBadInput || !strings.Contains(errs, patch+" has sha256 ") {
			t.Errorf("%s with a tampered patch: exit %d, want 2 naming %s:\n%s", cmd[0], code, patch, errs)
		}
	}

	shadowing, _ := siteRecipe(t, "demo-py-lanes")
	code, _, errs := run(t, nil, "show", shadowing)
	if code != exitBadInput || !strings.Contains(errs, "pass --shadow demo-py-lanes") {
		t.Errorf("shadowing without --shadow: exit %d\n%s", code, errs)
	}
	code, out, errs := run(t, nil, "--shadow", "demo-py-lanes", "show", shadowing)
	if code != 0 || !strings.Contains(out, "patches demo-py-lanes ("+filepath.Join(filepath.Dir(shadowing), "patches", "demo-py-lanes")+")") {
		t.Errorf("with --shadow: exit %d\n%s\n%s", code, out, errs)
	}

	// the same set given by --patch-dir to a recipe elsewhere
	other := t.TempDir()
	body, err := os.ReadFile(recipe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "r.yaml"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, nil, "show", filepath.Join(other, "r.yaml")); code != exitBadInput || !strings.Contains(errs, `unknown patch set "site-fix"`) {
		t.Errorf("no set beside the recipe: exit %d\n%s", code, errs)
	}
	good, _ := siteRecipe(t, "site-fix")
	dir := filepath.Join(filepath.Dir(good), "patches")
	if code, out, errs := run(t, nil, "--patch-dir", dir, "show", filepath.Join(other, "r.yaml")); code != 0 || !strings.Contains(out, "("+filepath.Join(dir, "site-fix")+")") {
		t.Errorf("--patch-dir: exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, _ := run(t, nil, "--patch-dir", filepath.Join(other, "none"), "show", good); code != exitBadInput {
		t.Errorf("a missing --patch-dir: exit %d, want 2", code)
	}
}
