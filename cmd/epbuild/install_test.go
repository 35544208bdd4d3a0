package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/epbuild/epbuild/builder/embedded"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/builder/manifest"
)

// demoBuild is the demo recipe built through Main on first use, once per test binary,
// and its artifact installed once (see pristineInstall); TestMain removes both.
type demoBuild struct {
	once     sync.Once
	dir      string
	artifact string
	err      error

	installOnce sync.Once
	installErr  error
}

var shared demoBuild

// demoArtifact returns the path of the demo artifact, building it on first use.
func demoArtifact(t *testing.T) string {
	t.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "epbuild-cmd-test-"); shared.err != nil {
			return
		}
		var out, errb bytes.Buffer
		env := nodeEnv("EPBUILD_CACHE", filepath.Join(shared.dir, "cache"))
		if c := Main([]string{"recipe", "demo", "-o", filepath.Join(shared.dir, "out")}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb},
			func(k string) string { return env[k] }); c != 0 {
			shared.err = fmt.Errorf("epbuild recipe demo: exit %d\n%s%s", c, out.String(), errb.String())
			return
		}
		arts, _ := filepath.Glob(filepath.Join(shared.dir, "out", "demo-*.tar.zst"))
		if len(arts) != 1 {
			shared.err = fmt.Errorf("epbuild recipe demo wrote %v", arts)
			return
		}
		shared.artifact = arts[0]
	})
	if shared.err != nil {
		t.Fatalf("build the demo: %v", shared.err)
	}
	return shared.artifact
}

// warmCache returns a copy of the shared demo build's cache, the test's own to change:
// every stage of the demo is found made there. cp -a keeps the hard links between its files.
func warmCache(t *testing.T) string {
	t.Helper()
	demoArtifact(t)
	dir := filepath.Join(t.TempDir(), "cache")
	if out, err := exec.Command("cp", "-a", filepath.Join(shared.dir, "cache"), dir).CombinedOutput(); err != nil {
		t.Fatalf("copy the demo's cache: %v\n%s", err, out)
	}
	return dir
}

// pristineInstall returns the demo artifact's prefix as install left it: one install per
// test binary, kept as a template and copied back (cp -a: modes, times and links as they
// were) to the same path on every call, so what a test does to it never reaches the next.
// The prefix's parent holds the prefix and its lock, as after an install; the prefix is
// the same path for every caller, since an install is not relocatable.
func pristineInstall(t *testing.T) (prefix string) {
	t.Helper()
	art := demoArtifact(t)
	parent, template := filepath.Join(shared.dir, "install"), filepath.Join(shared.dir, "install-template")
	prefix = filepath.Join(parent, "demo")
	shared.installOnce.Do(func() {
		var out, errb bytes.Buffer
		env := nodeEnv()
		if c := Main([]string{"install", art, "--prefix", prefix}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb},
			func(k string) string { return env[k] }); c != 0 {
			shared.installErr = fmt.Errorf("epbuild install: exit %d\n%s%s", c, out.String(), errb.String())
			return
		}
		if out, err := exec.Command("cp", "-a", parent, template).CombinedOutput(); err != nil {
			shared.installErr = fmt.Errorf("keep the install as a template: %v\n%s", err, out)
		}
	})
	if shared.installErr != nil {
		t.Fatalf("install the demo: %v", shared.installErr)
	}
	if err := os.RemoveAll(parent); err != nil {
		t.Fatalf("remove the last test's prefix: %v", err)
	}
	if out, err := exec.Command("cp", "-a", template, parent).CombinedOutput(); err != nil {
		t.Fatalf("copy the demo's install: %v\n%s", err, out)
	}
	return prefix
}

func TestMain(m *testing.M) {
	// the test binary is epbuild itself when a test runs it as a process (signals, a
	// terminal): see epbuildProcess
	if os.Getenv("EPBUILD_TEST_MAIN") == "1" {
		os.Exit(Main(os.Args[1:], Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}, os.Getenv))
	}
	// builds run in a build root of the tests' own: a build a test kills leaves its
	// build directory there, not in /tmp
	root, err := os.MkdirTemp("", "epbuild-cmd-buildroot-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("EPBUILD_BUILD_ROOT", root)
	code := m.Run()
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	_ = os.RemoveAll(root)
	os.Exit(code)
}

// nodeEnv is what a node's shell gives epbuild here.
func nodeEnv(extra ...string) map[string]string {
	env := map[string]string{"PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME"), "EPBUILD_BUILD_ROOT": os.Getenv("EPBUILD_BUILD_ROOT")}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

type checkJSON struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Read   string `json:"read"`
	Found  string `json:"found"`
	Why    string `json:"why"`
	Fix    string `json:"fix"`
}

func decodeReport(t *testing.T, out string) (bool, map[string]checkJSON) {
	t.Helper()
	var rep struct {
		OK     bool        `json:"ok"`
		Checks []checkJSON `json:"checks"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, out)
	}
	byID := map[string]checkJSON{}
	for _, c := range rep.Checks {
		if _, dup := byID[c.ID]; dup || c.ID == "" {
			t.Errorf("check ID %q is empty or not unique", c.ID)
		}
		byID[c.ID] = c
	}
	return rep.OK, byID
}

func TestInstallAndVerifyCLI(t *testing.T) {
	art := demoArtifact(t)
	prefix := filepath.Join(t.TempDir(), "opt", "demo")
	env := nodeEnv()
	code, out, errs := run(t, env, "install", art, "--prefix", prefix)
	if code != 0 || !strings.Contains(out, "installed "+filepath.Base(art)) || !strings.Contains(out, ". "+filepath.Join(prefix, "env.sh")) {
		t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = run(t, env, "verify-install", "--prefix", prefix)
	if code != 0 || !strings.Contains(out, "OK: ") || !strings.Contains(out, "python.import:pydemo") {
		t.Fatalf("verify-install: exit %d\n%s\n%s", code, out, errs)
	}
	// env.sh sets EPBUILD_PREFIX; verify-install defaults to it
	code, out, errs = run(t, nodeEnv("EPBUILD_PREFIX", prefix), "verify-install", "--json")
	if code != 0 {
		t.Fatalf("verify-install from $EPBUILD_PREFIX: exit %d\n%s\n%s", code, out, errs)
	}
	ok, checks := decodeReport(t, out)
	if !ok || checks["files"].Status != "pass" || checks["python.import:pydemo"].Status != "pass" || checks["process.single-nvshmem"].Status != "skip" {
		t.Errorf("--json report: ok %v, %+v", ok, checks)
	}

	// the field failure: an unpatched copy installed over the patched one
	src, err := embedded.Files("demo", "pydemo")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, "pydemo", "python", "pydemo", "channel.py"), src["pydemo/channel.py"], 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, env, "verify-install", "--prefix", prefix)
	if code != 1 || !strings.Contains(out, "FAIL files.changed:pydemo/python/pydemo/channel.py") || !strings.Contains(out, "FAIL effect.demo-py-lanes.") ||
		!strings.Contains(out, "FAILED: ") {
		t.Errorf("verify-install of an unpatched copy: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, env, "verify-install", "--prefix", prefix, "--json")
	if ok, checks := decodeReport(t, out); code != 1 || ok || checks["files.changed:pydemo/python/pydemo/channel.py"].Fix == "" {
		t.Errorf("verify-install --json of an unpatched copy: exit %d, ok %v", code, ok)
	}
	// reinstalling repairs it; --keep-previous keeps the broken one aside
	code, out, errs = run(t, env, "install", art, "--prefix", prefix, "--keep-previous")
	if code != 0 || !strings.Contains(out, "previous  kept at "+prefix+".prev") {
		t.Fatalf("reinstall: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, _ := run(t, env, "verify-install", "--prefix", prefix); code != 0 {
		t.Errorf("verify after the reinstall: exit %d\n%s", code, out)
	}
	if code, _, _ := run(t, env, "verify-install", "--prefix", prefix+".prev"); code != 1 {
		t.Errorf("the kept previous install (unpatched) verifies: exit %d", code)
	}
	// the demo carries no NVSHMEM smoke test: --smoke says so, and skips it
	code, out, _ = run(t, env, "verify-install", "--prefix", prefix, "--smoke")
	if code != 0 || !strings.Contains(out, "smoke.run") || !strings.Contains(out, "has no nvshmem-smoke component") {
		t.Errorf("verify-install --smoke of an install without the smoke test: exit %d\n%s", code, out)
	}
}

func TestInstallCLIBadInput(t *testing.T) {
	art := demoArtifact(t)
	prefix := pristineInstall(t)
	parent := filepath.Dir(prefix)
	env := nodeEnv()
	b, err := os.ReadFile(art)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	bad := filepath.Join(t.TempDir(), filepath.Base(art))
	if err := os.WriteFile(bad, b, 0o644); err != nil {
		t.Fatal(err)
	}
	receipt, _ := os.ReadFile(filepath.Join(prefix, manifest.ReceiptName))
	code, _, errs := run(t, env, "install", bad, "--prefix", prefix)
	if code != 2 || !strings.Contains(errs, "nothing was installed") {
		t.Errorf("install of a corrupted artifact: exit %d, stderr %q", code, errs)
	}
	if got, _ := os.ReadFile(filepath.Join(prefix, manifest.ReceiptName)); !bytes.Equal(got, receipt) {
		t.Errorf("the corrupted artifact touched the prefix")
	}
	ents, _ := os.ReadDir(parent)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{".demo.epbuild-lock", "demo"}) {
		t.Errorf("beside the prefix: %v", names)
	}
	for _, args := range [][]string{
		{"verify-install"},
		{"verify-install", "--prefix", filepath.Join(parent, "absent")},
		{"verify-install", "--prefix", prefix, "extra"},
		{"verify-install", "--prefix", prefix, "--traffic"},
		{"verify-install", "--prefix", prefix, "--bogus"},
		{"verify-install", "--prefix", prefix, "--smoke-pes", "2"},
		{"verify-install", "--prefix", prefix, "--smoke", "--smoke-pes", "-1"},
		{"verify-install", "--prefix", prefix, "--smoke", "--smoke-pes", "100000"},
		{"verify-install", "--prefix", prefix, "--smoke", "--smoke-timeout", "0s"},
		{"install", art},
		{"install", filepath.Join(parent, "absent.tar.zst"), "--prefix", prefix},
		{"host", "check", "--sysroot", filepath.Join(parent, "absent")},
	} {
		if code, out, errs := run(t, env, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s\n%s", args, code, out, errs)
		}
	}
}

// host capture records what host check reads: checking the capture gives the same
// results as checking the host.
func TestHostCLI(t *testing.T) {
	env := nodeEnv()
	liveCode, live, errs := run(t, env, "host", "check", "--recipe", "gcp-b200", "--json")
	if liveCode != 0 && liveCode != 1 {
		t.Fatalf("host check: exit %d\n%s", liveCode, errs)
	}
	_, liveChecks := decodeReport(t, live)
	if liveChecks["host.gpus"].ID == "" || liveChecks["host.gpu.free-memory"].ID == "" || liveChecks["host.hostnames"].ID == "" {
		t.Fatalf("host check reports no GPU, free-memory or hostname check: %v", live)
	}
	capture := filepath.Join(t.TempDir(), "node.tar.zst")
	if code, out, errs := run(t, env, "host", "capture", capture, "--recipe", "gcp-b200"); code != 0 || !strings.Contains(out, "transport ibgda") {
		t.Fatalf("host capture: exit %d\n%s\n%s", code, out, errs)
	}
	f, err := os.Open(capture)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := sysroot.Extract(f, root); err != nil {
		t.Fatal(err)
	}
	f.Close()
	code, replay, errs := run(t, env, "host", "check", "--recipe", "gcp-b200", "--json", "--sysroot", root)
	if code != liveCode {
		t.Errorf("host check of the capture: exit %d, live %d\n%s", code, liveCode, errs)
	}
	_, replayChecks := decodeReport(t, replay)
	for id, c := range liveChecks {
		if r := replayChecks[id]; r.Status != c.Status {
			t.Errorf("%s: %s on the host, %s on its capture (%s | %s)", id, c.Status, r.Status, c.Read, r.Read)
		}
	}

	prefix := pristineInstall(t)
	code, out, _ := run(t, env, "verify-install", "--prefix", prefix, "--host", "--sysroot", root, "--json")
	_, checks := decodeReport(t, out)
	if checks["host.gpus"].ID == "" || checks["files"].Status != "pass" {
		t.Errorf("verify-install --host: exit %d, no host checks or files failed:\n%s", code, out)
	}
	// --hosts names the job's nodes: a node listed twice fails the hostname check
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("node01\nnode[01-02]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run(t, env, "verify-install", "--prefix", prefix, "--host", "--sysroot", root, "--hosts", hosts, "--json")
	_, checks = decodeReport(t, out)
	if code != 1 || checks["host.hostnames"].Status != "fail" || !strings.Contains(checks["host.hostnames"].Read, "node01 (and node01)") {
		t.Errorf("verify-install --hosts with a node twice: exit %d\n%s", code, out)
	}
	if code, _, errs := run(t, env, "host", "check", "--recipe", "gcp-b200", "--sysroot", root, "--hosts", filepath.Join(root, "absent")); code != 2 || !strings.Contains(errs, "host list") {
		t.Errorf("host check --hosts with no such file: exit %d\n%s", code, errs)
	}
	if code, _, errs := run(t, env, "verify-install", "--prefix", prefix, "--hosts", hosts); code != 2 || !strings.Contains(errs, "give --host too") {
		t.Errorf("--hosts without --host: exit %d\n%s", code, errs)
	}
	// --traffic runs the command with the install's env and samples the NICs around it
	code, out, errs = run(t, env, "verify-install", "--prefix", prefix, "--sysroot", root, "--json", "--traffic", "--",
		"sh", "-c", `test "$DEMO_LANE_MAPPING" = "0:2,1:1" && test "$EPBUILD_PREFIX" = "`+prefix+`"`)
	_, checks = decodeReport(t, out)
	if code != 0 || checks["host.traffic.run"].Status != "pass" || checks["host.traffic.spread"].ID == "" {
		t.Errorf("--traffic with a command that succeeds: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = run(t, env, "verify-install", "--prefix", prefix, "--sysroot", root, "--traffic", "--", "sh", "-c", "exit 3")
	if code != 1 || !strings.Contains(out, "FAIL host.traffic.run") {
		t.Errorf("--traffic with a command that fails: exit %d\n%s", code, out)
	}
}
