package builder

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/builder/verify"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/embedded"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/patches/effect"
	"github.com/epbuild/epbuild/recipes"
)

// freshInstall returns demo artifact A as install left it (a copy of one install).
func freshInstall(t *testing.T) string {
	t.Helper()
	return pristineInstall(t)
}

func mustVerify(t *testing.T, prefix string) *verify.VerifyReport {
	t.Helper()
	rep, err := verify.Verify(context.Background(), verify.VerifyOptions{Prefix: prefix})
	if err != nil {
		t.Fatalf("verify %s: %v", prefix, err)
	}
	return rep
}

// wantStatus fails the test unless each check has the given status.
func wantStatus(t *testing.T, rep *verify.VerifyReport, want map[string]string) {
	t.Helper()
	for id, st := range want {
		c, ok := rep.Check(id)
		if !ok {
			t.Errorf("no check %s in the report", id)
			continue
		}
		if string(c.Status) != st {
			t.Errorf("%s: %s, want %s (expected %q, found %q, why %q)", id, c.Status, st, c.Expected, c.Found, c.Why)
		}
	}
}

// effectIDs maps each effect kind of pydemo's patch set to its check ID.
func effectIDs(t *testing.T) map[effect.Kind]string {
	t.Helper()
	pc, ok := artifacts(t).Plan.Component("pydemo")
	if !ok {
		t.Fatal("the demo plan has no pydemo")
	}
	out := map[effect.Kind]string{}
	for _, s := range pc.PatchSets {
		for i, e := range s.Effects {
			out[e.Kind] = fmt.Sprintf("effect.%s.%d", s.Name, i)
		}
	}
	for _, k := range []effect.Kind{effect.PythonDef, effect.PythonCall, effect.EnvRead} {
		if out[k] == "" {
			t.Fatalf("pydemo's patch set states no %s effect", k)
		}
	}
	return out
}

func TestVerifyDemoInstall(t *testing.T) {
	prefix := freshInstall(t)
	eff := effectIDs(t)
	rep := mustVerify(t, prefix)
	if rep.Failed() {
		t.Fatalf("a fresh install fails verify:\n%s", failedChecks(rep))
	}
	wantStatus(t, rep, map[string]string{
		"install.manifest": "pass", "install.receipt": "pass", "files": "pass",
		"env.script": "pass", "env.paths": "pass", "env.ld-preload": "skip",
		"libdemo.file.lib/libdemo.so.1": "pass", "effect.demo-lib-lanes.1": "pass",
		eff[effect.PythonDef]: "pass", eff[effect.PythonCall]: "pass", eff[effect.EnvRead]: "pass",
		"python.import:pydemo": "pass", "process.single-nvshmem": "skip",
	})
	if rep.Recipe != "demo" || rep.Artifact != filepath.Base(artifacts(t).A) {
		t.Errorf("report names recipe %q, artifact %q", rep.Recipe, rep.Artifact)
	}
	for _, c := range rep.Checks {
		if c.ID == "" || c.Read == "" || (c.Status != "pass" && c.Why == "") {
			t.Errorf("check %+v lacks an id, what it read or why it matters", c)
		}
	}
	// a job importing from the prefix writes bytecode caches into it: not a change
	py := exec.Command("python3", "-c", "import pydemo.channel")
	py.Env = append(verify.CleanEnviron(os.Getenv), "PYTHONPATH="+filepath.Join(prefix, "pydemo", "python"))
	if out, err := py.CombinedOutput(); err != nil {
		t.Fatalf("import pydemo: %v\n%s", err, out)
	}
	if m, _ := filepath.Glob(filepath.Join(prefix, "pydemo", "python", "pydemo", "__pycache__", "*.pyc")); len(m) == 0 {
		t.Fatal("python wrote no bytecode cache: the test proves nothing")
	}
	rep = mustVerify(t, prefix)
	if c, _ := rep.Check("files"); c.Status != "pass" || !strings.Contains(c.Read, "Python bytecode files in __pycache__ against the sources") {
		t.Errorf("after an import: files %s, read %q", c.Status, c.Read)
	}
}

// pyCompile compiles src into pyc with python3's py_compile in one of its invalidation
// modes (TIMESTAMP, CHECKED_HASH, UNCHECKED_HASH).
func pyCompile(t *testing.T, src, pyc, mode string) {
	t.Helper()
	cmd := exec.Command("python3", "-c", "import py_compile, sys\n"+
		"py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True, invalidation_mode=py_compile.PycInvalidationMode[sys.argv[3]])", src, pyc, mode)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("py_compile %s: %v\n%s", src, err, out)
	}
}

func pythonCacheTag(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("python3", "-c", "import sys; print(sys.implementation.cache_tag)").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// Bytecode in the install's __pycache__ directories runs instead of the sources: each
// file is checked against the source it claims, and verify-install runs nothing from
// a prefix whose files failed (its imports never read __pycache__ either: inspect).
func TestVerifyPlantedBytecode(t *testing.T) {
	tag := pythonCacheTag(t)
	const (
		rel    = "pydemo/python/pydemo/channel.py"
		cached = "pydemo/python/pydemo/__pycache__/"
	)
	pycOf := func(name string) string { return cached + name + "." + tag + ".pyc" }
	// evil writes a file in cdir when it runs, still imports, and is as long as want
	evil := func(t *testing.T, cdir string, want []byte) []byte {
		b := []byte(fmt.Sprintf("open(%q, 'w').close()\nChannel = library = None\n", filepath.Join(cdir, "pwned")))
		if len(b)+2 > len(want) {
			t.Fatalf("the planted source is longer than %s", rel)
		}
		return append(append(b, '#'), append(bytes.Repeat([]byte{'-'}, len(want)-len(b)-2), '\n')...)
	}
	plant := func(t *testing.T, prefix, cdir, mode string) {
		src := filepath.Join(prefix, filepath.FromSlash(rel))
		want, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := os.Stat(src)
		other := filepath.Join(t.TempDir(), "channel.py")
		if err := os.WriteFile(other, evil(t, cdir, want), 0o644); err != nil {
			t.Fatal(err)
		}
		// the same size and mtime: a timestamp header then matches the installed source
		if err := os.Chtimes(other, st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
		pyCompile(t, other, filepath.Join(prefix, filepath.FromSlash(pycOf("channel"))), mode)
	}
	for _, c := range []struct {
		name, mode, pyc, found string
	}{
		{"unchecked hash, compiled from another source", "UNCHECKED_HASH", pycOf("channel"), "unchecked-hash file"},
		{"timestamp of another source of the same size and mtime", "TIMESTAMP", pycOf("channel"), "its code is not what compiling the source gives"},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := freshInstall(t)
			cdir := t.TempDir()
			plant(t, prefix, cdir, c.mode)
			// the planted file runs in a job that imports the module
			py := exec.Command("python3", "-c", "import pydemo.channel")
			py.Env = append(verify.CleanEnviron(os.Getenv), "PYTHONPATH="+filepath.Join(prefix, "pydemo", "python"))
			if out, err := py.CombinedOutput(); err != nil {
				t.Fatalf("import pydemo: %v\n%s", err, out)
			}
			if err := os.Remove(filepath.Join(cdir, "pwned")); err != nil {
				t.Fatalf("a job's import did not run the planted bytecode: the test proves nothing: %v", err)
			}
			rep := mustVerify(t, prefix)
			wantStatus(t, rep, map[string]string{"files": "fail", "files.bytecode:" + c.pyc: "fail", "python.import:pydemo": "skip"})
			if _, ok := rep.Check("files.changed:" + rel); ok {
				t.Error("the source itself is reported changed")
			}
			if ch, _ := rep.Check("files.bytecode:" + c.pyc); !strings.Contains(ch.Found, c.found) || !strings.Contains(ch.Fix, "rm "+filepath.Join(prefix, c.pyc)) {
				t.Errorf("found %q, fix %q", ch.Found, ch.Fix)
			}
			if ents, _ := os.ReadDir(cdir); len(ents) != 0 {
				t.Error("verify-install ran the planted bytecode")
			}
		})
	}
	t.Run("bytecode of no source, and a name Python never reads", func(t *testing.T) {
		prefix := freshInstall(t)
		src := filepath.Join(t.TempDir(), "gone.py")
		if err := os.WriteFile(src, []byte("x = 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		pyCompile(t, src, filepath.Join(prefix, filepath.FromSlash(pycOf("gone"))), "TIMESTAMP")
		pyCompile(t, src, filepath.Join(prefix, filepath.FromSlash(cached+"channel.pyc")), "TIMESTAMP")
		rep := mustVerify(t, prefix)
		wantStatus(t, rep, map[string]string{"files.bytecode:" + pycOf("gone"): "fail", "files.bytecode:" + cached + "channel.pyc": "fail"})
		if ch, _ := rep.Check("files.bytecode:" + pycOf("gone")); !strings.Contains(ch.Found, "no pydemo/python/pydemo/gone.py in the manifest") {
			t.Errorf("found %q", ch.Found)
		}
		if ch, _ := rep.Check("files.bytecode:" + cached + "channel.pyc"); !strings.Contains(ch.Found, "a name Python never reads") {
			t.Errorf("found %q", ch.Found)
		}
	})
}

// Each kind of tampering shows as its own check, all in one report.
func TestVerifyCatchesEachChange(t *testing.T) {
	prefix := freshInstall(t)
	at := func(rel string) string { return filepath.Join(prefix, filepath.FromSlash(rel)) }
	// a changed byte
	lib := at("libdemo/lib/libdemo.so.1.0.0")
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/3] ^= 1
	if err := os.WriteFile(lib, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// a truncated file
	if err := os.Truncate(at("pydemo/python/pydemo/__init__.py"), 10); err != nil {
		t.Fatal(err)
	}
	// a deleted file
	if err := os.Remove(at("libdemo/include/demo.h")); err != nil {
		t.Fatal(err)
	}
	// an added file
	if err := os.WriteFile(at("pydemo/python/pydemo/buffer.py"), []byte("# an older copy\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// a mode change
	if err := os.Chmod(at("env.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	rep := mustVerify(t, prefix)
	wantStatus(t, rep, map[string]string{
		"files": "fail",
		"files.changed:libdemo/lib/libdemo.so.1.0.0":     "fail",
		"files.changed:pydemo/python/pydemo/__init__.py": "fail",
		"files.missing:libdemo/include/demo.h":           "fail",
		"files.extra:pydemo/python/pydemo/buffer.py":     "fail",
		"files.mode:env.sh":                              "fail",
		"libdemo.file.include/demo.h":                    "fail",
	})
	if c, _ := rep.Check("files.changed:pydemo/python/pydemo/__init__.py"); !strings.Contains(c.Found, "truncated") {
		t.Errorf("a truncated file is reported as %q", c.Found)
	}
	if c, _ := rep.Check("files.mode:env.sh"); c.Expected != "mode 0644" || c.Found != "mode 0755" {
		t.Errorf("mode change: expected %q, found %q", c.Expected, c.Found)
	}
	n := 0
	for _, c := range rep.Checks {
		if strings.HasPrefix(c.ID, "files.") {
			n++
		}
	}
	if n != 5 {
		t.Errorf("%d file problems reported, want exactly the 5 made", n)
	}
}

// The field failure: the installed module is the unpatched one. And the subtler one: the
// method is there but never called.
func TestVerifyFieldFailure(t *testing.T) {
	eff := effectIDs(t)
	src, err := embedded.Files("demo", "pydemo")
	if err != nil {
		t.Fatal(err)
	}
	unpatched := src["pydemo/channel.py"]
	if len(unpatched) == 0 || bytes.Contains(unpatched, []byte("_setup_lane_mapping")) {
		t.Fatal("the embedded pydemo source is not the unpatched channel.py")
	}
	const rel = "pydemo/python/pydemo/channel.py"

	t.Run("unpatched copy installed", func(t *testing.T) {
		prefix := freshInstall(t)
		if err := os.WriteFile(filepath.Join(prefix, rel), unpatched, 0o644); err != nil {
			t.Fatal(err)
		}
		rep := mustVerify(t, prefix)
		wantStatus(t, rep, map[string]string{
			"files.changed:" + rel: "fail",
			eff[effect.PythonDef]:  "fail", eff[effect.PythonCall]: "fail", eff[effect.EnvRead]: "fail",
			// a changed module is never imported: it could run anything
			"python.import:pydemo": "skip",
		})
		if c, _ := rep.Check(eff[effect.PythonCall]); !strings.Contains(c.Fix, "epbuild install") {
			t.Errorf("the fix does not say how: %q", c.Fix)
		}
	})
	t.Run("method defined, never called", func(t *testing.T) {
		prefix := freshInstall(t)
		patched, err := os.ReadFile(filepath.Join(prefix, rel))
		if err != nil {
			t.Fatal(err)
		}
		uncalled := bytes.Replace(patched, []byte("        self._setup_lane_mapping()\n"), nil, 1)
		if bytes.Equal(uncalled, patched) {
			t.Fatal("the installed channel.py has no call to remove")
		}
		if err := os.WriteFile(filepath.Join(prefix, rel), uncalled, 0o644); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, mustVerify(t, prefix), map[string]string{
			"files.changed:" + rel: "fail",
			eff[effect.PythonDef]:  "pass", eff[effect.PythonCall]: "fail",
		})
	})
}

func TestVerifyManifestAndEnv(t *testing.T) {
	t.Run("manifest edited to match an edited file", func(t *testing.T) {
		prefix := freshInstall(t)
		const rel = "pydemo/python/pydemo/__init__.py"
		body := []byte("# replaced\n")
		if err := os.WriteFile(filepath.Join(prefix, rel), body, 0o644); err != nil {
			t.Fatal(err)
		}
		m, _, err := manifest.ReadInstalledManifest(prefix)
		if err != nil {
			t.Fatal(err)
		}
		for i := range m.Files {
			if m.Files[i].Path == rel {
				m.Files[i].Size, m.Files[i].SHA256 = int64(len(body)), manifest.SHA256Hex(body)
			}
		}
		mb, _ := json.MarshalIndent(m, "", "  ")
		if err := os.WriteFile(filepath.Join(prefix, manifest.ManifestName), mb, 0o644); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, mustVerify(t, prefix), map[string]string{"files": "pass", "install.receipt": "fail"})
	})
	t.Run("LD_PRELOAD from outside the prefix", func(t *testing.T) {
		prefix := freshInstall(t)
		b, err := os.ReadFile(filepath.Join(prefix, manifest.EnvName))
		if err != nil {
			t.Fatal(err)
		}
		edit := fmt.Sprintf("export LD_PRELOAD='%s'\n", filepath.Join(t.TempDir(), "libnvshmem_host.so.3"))
		b = []byte(strings.Replace(string(b), envsh.EnvTail, edit+envsh.EnvTail, 1))
		if err := os.WriteFile(filepath.Join(prefix, manifest.EnvName), b, envsh.EnvMode); err != nil {
			t.Fatal(err)
		}
		rep := mustVerify(t, prefix)
		wantStatus(t, rep, map[string]string{"files.changed:env.sh": "fail", "env.script": "fail", "env.ld-preload": "fail"})
		if c, _ := rep.Check("env.ld-preload"); !strings.Contains(c.Found, "outside the prefix") {
			t.Errorf("env.ld-preload found %q", c.Found)
		}
	})
	t.Run("a path env.sh names is gone", func(t *testing.T) {
		prefix := freshInstall(t)
		if err := os.Remove(filepath.Join(prefix, "libdemo", "lib", "libdemo.so.1.0.0")); err != nil {
			t.Fatal(err)
		}
		rep := mustVerify(t, prefix)
		wantStatus(t, rep, map[string]string{"env.paths": "fail", "env.script": "pass"})
		if c, _ := rep.Check("env.paths"); !strings.Contains(c.Found, "DEMO_LIB") {
			t.Errorf("env.paths found %q", c.Found)
		}
	})
	// manifest.json and the receipt are what every other check trusts: each kind of
	// change to them fails, naming the file
	elsewhere := func(t *testing.T, prefix, name string) {
		copyOut := filepath.Join(t.TempDir(), name)
		b, err := os.ReadFile(filepath.Join(prefix, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(copyOut, b, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(prefix, name)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(copyOut, filepath.Join(prefix, name)); err != nil {
			t.Fatal(err)
		}
	}
	editReceipt := func(field, value string) func(*testing.T, string) {
		return func(t *testing.T, prefix string) {
			p := filepath.Join(prefix, manifest.ReceiptName)
			var r map[string]any
			b, _ := os.ReadFile(p)
			if err := json.Unmarshal(b, &r); err != nil {
				t.Fatal(err)
			}
			if value == "" {
				delete(r, field)
			} else {
				r[field] = value
			}
			b, _ = json.Marshal(r)
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name   string
		mutate func(*testing.T, string)
		want   map[string]string
		says   string // in the failing check's found or expected
	}{
		{"the receipt deleted", func(t *testing.T, p string) {
			if err := os.Remove(filepath.Join(p, manifest.ReceiptName)); err != nil {
				t.Fatal(err)
			}
		}, map[string]string{"install.receipt": "fail", "files.extra:bin": "fail"}, "no " + manifest.ReceiptName}, // the receipt records what install added
		{"the receipt names another recipe", editReceipt("recipe", "other"), map[string]string{"install.receipt": "fail"}, `recipe "other"`},
		{"the receipt names another epbuild", editReceipt("built_by", "v0.0.1"), map[string]string{"install.receipt": "fail"}, `built_by "v0.0.1"`},
		{"the receipt lost its artifact", editReceipt("artifact", ""), map[string]string{"install.receipt": "fail"}, "not the receipt install writes"},
		{"the receipt's sha256 is not one", editReceipt("sha256", "0123"), map[string]string{"install.receipt": "fail"}, `sha256 "0123" is not 64 hex digits`},
		{"the receipt a link to a copy outside", func(t *testing.T, p string) { elsewhere(t, p, manifest.ReceiptName) },
			map[string]string{"install.receipt": "fail", "files.type:" + manifest.ReceiptName: "fail"}, manifest.ReceiptName + " is a symlink"},
		{"the manifest a link to a copy outside", func(t *testing.T, p string) { elsewhere(t, p, manifest.ManifestName) },
			map[string]string{"install.manifest": "fail"}, manifest.ManifestName + " is a symlink"},
		{"the receipt made executable", func(t *testing.T, p string) {
			if err := os.Chmod(filepath.Join(p, manifest.ReceiptName), 0o755); err != nil {
				t.Fatal(err)
			}
		}, map[string]string{"install.receipt": "pass", "files.mode:" + manifest.ReceiptName: "fail"}, "mode 0755"},
		{"the manifest made group-writable", func(t *testing.T, p string) {
			if err := os.Chmod(filepath.Join(p, manifest.ManifestName), 0o664); err != nil {
				t.Fatal(err)
			}
		}, map[string]string{"install.manifest": "pass", "files.mode:" + manifest.ManifestName: "fail"}, "mode 0664"},
	} {
		t.Run(c.name, func(t *testing.T) {
			prefix := freshInstall(t)
			c.mutate(t, prefix)
			rep := mustVerify(t, prefix)
			wantStatus(t, rep, c.want)
			said := false
			for _, ch := range rep.Checks {
				if ch.Status == "fail" && strings.Contains(ch.Found+" "+ch.Expected, c.says) && (strings.HasSuffix(ch.Read, manifest.ReceiptName) || strings.HasSuffix(ch.Read, manifest.ManifestName)) {
					said = true
				}
			}
			if !said {
				t.Errorf("no failing check reads the file and says %q:\n%s", c.says, failedChecks(rep))
			}
		})
	}
	t.Run("no manifest", func(t *testing.T) {
		prefix := t.TempDir()
		rep := mustVerify(t, prefix)
		wantStatus(t, rep, map[string]string{"install.manifest": "fail"})
		if len(rep.Checks) != 1 {
			t.Errorf("checks after a missing manifest: %+v", rep.Checks)
		}
		if _, err := verify.Verify(context.Background(), verify.VerifyOptions{Prefix: filepath.Join(prefix, "none")}); err == nil {
			t.Error("verify of a missing prefix gave no error")
		}
	})
}

func TestParseEnvScript(t *testing.T) {
	p := &plan.Plan{Recipe: "x", Key: strings.Repeat("a", 64), Env: map[string]string{"A": "it's {{c.prefix}}/lib", "B": "{{c.prefix}}"}}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "c", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := envsh.EnvScript(p, root, []string{"c"})
	if err != nil {
		t.Fatal(err)
	}
	vars, order, baked, err := envsh.ParseEnvScript(script, "/opt/x")
	if err != nil || baked != (envsh.EnvBaked{}) {
		t.Fatal(err)
	}
	want := map[string]string{"EPBUILD_PREFIX": "/opt/x", "LD_LIBRARY_PATH": "/opt/x/c/lib", "A": "it's /opt/x/c/lib", "B": "/opt/x/c"}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("%s=%q, want %q", k, vars[k], v)
		}
	}
	if !slices.Equal(order, []string{"PATH", "LD_LIBRARY_PATH", "A", "B"}) { // env.sh puts the install's bin/ on PATH first
		t.Errorf("order %v", order)
	}
	for _, bad := range []string{"export A=$(rm -rf /)\n", "export A='open\n", "A=1\n", "source /etc/profile\n"} {
		if _, _, _, err := envsh.ParseEnvScript(bad, "/opt/x"); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestHostConfigFromPlans(t *testing.T) {
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	empty := sysroot.New(t.TempDir()) // no /sys: no RDMA devices
	cases := []struct {
		recipe string
		check  func(host.Config) bool
	}{
		{"gcp-b200", func(c host.Config) bool {
			// gcp-b200 turns CUDA VMM off: its heap is fixed, 1 GiB until its env sizes it (R32)
			return c.Transport == host.TransportIBGDA && c.GIDIndex == 3 && c.HCAPrefix == "mlx5" && strings.HasPrefix(c.Mapping, "0:mlx5_0:1,") &&
				!c.NeedGDRCopy && c.NVSHMEMVersion == "3.5.19-1" && c.BufferBytes == 2146961792 &&
				(c.FixedHeapBytes == 1<<30 || c.Env["NVSHMEM_SYMMETRIC_SIZE"] != "")
		}},
		{"efa-aws", func(c host.Config) bool { return c.Transport == host.TransportEFA && c.NeedGDRCopy && c.GIDIndex == -1 }},
		{"single-node", func(c host.Config) bool {
			return c.Transport == host.TransportNone && !c.NeedGDRCopy && c.FixedHeapBytes == 0 && c.BufferBytes == 0
		}},
		{"demo", func(c host.Config) bool { return c.Transport == host.TransportNone && c.NVSHMEMVersion == "" }},
	}
	for _, tc := range cases {
		p, err := res.Resolve(tc.recipe, nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := verify.HostConfig(p, nil, empty)
		if err != nil || !tc.check(cfg) {
			t.Errorf("%s: %+v, %v", tc.recipe, cfg, err)
		}
	}
	p, err := res.Resolve("gcp-b200", nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Env = maps.Clone(p.Env)
	p.Env["NVSHMEM_IB_GID_INDEX"] = "three"
	if _, err := verify.HostConfig(p, nil, empty); err == nil {
		t.Error("a GID index that is not a number gave no error")
	}
}

// Randomized: every single-byte change, truncation, deletion, added entry and mode change
// of the demo install is detected, as exactly that problem at that path.
func TestVerifyFilesRandomized(t *testing.T) {
	prefix := freshInstall(t)
	m, _, err := manifest.ReadInstalledManifest(prefix)
	if err != nil {
		t.Fatal(err)
	}
	m.Files = verify.InstalledEntries(prefix, m.Files) // env.sh with the prefix install wrote in
	ctx := context.Background()
	at := func(rel string) string { return filepath.Join(prefix, filepath.FromSlash(rel)) }
	content := map[string][]byte{}
	var files, dirs, all []archive.Entry
	for _, e := range m.Files {
		all = append(all, e)
		switch e.Type {
		case archive.TypeFile:
			b, err := os.ReadFile(at(e.Path))
			if err != nil {
				t.Fatal(err)
			}
			content[e.Path] = b
			files = append(files, e)
		case archive.TypeDir:
			dirs = append(dirs, e)
		}
	}
	// restore re-creates the manifest's entries at and below rel (parents first)
	restore := func(rel string) {
		for _, e := range m.Files {
			if e.Path != rel && !strings.HasPrefix(e.Path, rel+"/") {
				continue
			}
			var err error
			switch e.Type {
			case archive.TypeDir:
				if err = os.Mkdir(at(e.Path), 0o755); err == nil {
					err = os.Chmod(at(e.Path), e.Mode)
				}
			case archive.TypeFile:
				if err = os.WriteFile(at(e.Path), content[e.Path], e.Mode); err == nil {
					err = os.Chmod(at(e.Path), e.Mode)
				}
			case archive.TypeSymlink:
				err = os.Symlink(e.Target, at(e.Path))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 2))
	t.Logf("seed %d", seed)
	const trials = 400 // each of the five kinds of change about 80 times a run; the seed varies by run
	counts := map[string]int{}
	for i := range trials {
		var want []manifest.FileProblem
		var undo func()
		switch kind := []string{"byte", "truncate", "delete", "add", "mode"}[rng.IntN(5)]; kind {
		case "byte":
			e := files[rng.IntN(len(files))]
			b := bytes.Clone(content[e.Path])
			b[rng.IntN(len(b))] ^= byte(1 + rng.IntN(255))
			if err := os.WriteFile(at(e.Path), b, 0); err != nil {
				t.Fatal(err)
			}
			want, undo = []manifest.FileProblem{{Path: e.Path, Kind: manifest.ProblemChanged}}, func() { _ = os.WriteFile(at(e.Path), content[e.Path], 0) }
			counts[kind]++
		case "truncate":
			e := files[rng.IntN(len(files))]
			if err := os.Truncate(at(e.Path), rng.Int64N(e.Size)); err != nil {
				t.Fatal(err)
			}
			want, undo = []manifest.FileProblem{{Path: e.Path, Kind: manifest.ProblemChanged}}, func() { _ = os.WriteFile(at(e.Path), content[e.Path], 0) }
			counts[kind]++
		case "delete":
			e := all[rng.IntN(len(all))]
			if err := os.RemoveAll(at(e.Path)); err != nil {
				t.Fatal(err)
			}
			for _, x := range m.Files {
				if x.Path == e.Path || strings.HasPrefix(x.Path, e.Path+"/") {
					want = append(want, manifest.FileProblem{Path: x.Path, Kind: manifest.ProblemMissing})
				}
			}
			undo = func() { restore(e.Path) }
			counts[kind+" "+string(e.Type)]++
		case "add":
			parent := ""
			if k := rng.IntN(len(dirs) + 1); k < len(dirs) {
				parent = dirs[k].Path
			}
			name := path.Join(parent, fmt.Sprintf("added-%d%s", rng.IntN(1000), []string{".py", ".so", ""}[rng.IntN(3)]))
			var err error
			if rng.IntN(4) == 0 {
				err = os.Mkdir(at(name), 0o755)
			} else {
				err = os.WriteFile(at(name), []byte{byte(rng.IntN(256))}, 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			want, undo = []manifest.FileProblem{{Path: name, Kind: manifest.ProblemExtra}}, func() { _ = os.RemoveAll(at(name)) }
			counts[kind]++
		case "mode":
			cands := append(slices.Clone(files), dirs...)
			e := cands[rng.IntN(len(cands))]
			mode := fs.FileMode(rng.IntN(0o1000)) | 0o400
			if e.Type == archive.TypeDir {
				mode |= 0o700
			}
			if rng.IntN(8) == 0 {
				mode |= fs.ModeSetgid
			}
			if mode == e.Mode {
				mode ^= 0o020
			}
			if err := os.Chmod(at(e.Path), mode); err != nil {
				t.Fatal(err)
			}
			want, undo = []manifest.FileProblem{{Path: e.Path, Kind: manifest.ProblemMode}}, func() { _ = os.Chmod(at(e.Path), e.Mode) }
			counts[kind]++
		}
		got, _, err := verify.VerifyFiles(ctx, prefix, m.Files)
		if err != nil {
			t.Fatal(err)
		}
		if !sameProblems(got, want) {
			t.Fatalf("trial %d (seed %d): found %+v, want %+v", i, seed, got, want)
		}
		undo()
		if i%100 == 99 {
			if got, _, _ := verify.VerifyFiles(ctx, prefix, m.Files); len(got) != 0 {
				t.Fatalf("after trial %d the undo left %+v", i, got)
			}
		}
	}
	t.Logf("%d trials: %v", trials, counts)
}

func sameProblems(got, want []manifest.FileProblem) bool {
	key := func(p manifest.FileProblem) string { return p.Kind + " " + p.Path }
	g, w := make([]string, len(got)), make([]string, len(want))
	for i := range got {
		g[i] = key(got[i])
	}
	for i := range want {
		w[i] = key(want[i])
	}
	slices.Sort(g)
	slices.Sort(w)
	return slices.Equal(g, w)
}
