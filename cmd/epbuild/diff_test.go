package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The demo artifact against its own install: equal, though Python wrote bytecode and
// install a receipt there. One string changed in the installed library: exit 1, the
// table names the file, and the section and the strings say what changed.
func TestDiffArtifactAndInstall(t *testing.T) {
	art := demoArtifact(t)
	prefix := pristineInstall(t)
	env := nodeEnv()
	py := exec.Command("python3", "-c", "import pydemo")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PYTHONDONTWRITEBYTECODE=") {
			py.Env = append(py.Env, kv)
		}
	}
	py.Env = append(py.Env, "PYTHONPATH="+filepath.Join(prefix, "pydemo", "python"))
	if out, err := py.CombinedOutput(); err != nil {
		t.Fatalf("import pydemo: %v %s", err, out)
	}
	if m, _ := filepath.Glob(filepath.Join(prefix, "pydemo", "python", "pydemo", "__pycache__", "*.pyc")); len(m) == 0 {
		t.Fatal("python wrote no bytecode: the test would prove nothing")
	}
	code, out, errs := run(t, env, "diff", art, prefix)
	if code != 0 || out != "" {
		t.Fatalf("artifact and its install: exit %d\n%s%s", code, out, errs)
	}

	lib := filepath.Join(prefix, "libdemo", "lib", "libdemo.so.1.0.0")
	b, err := os.ReadFile(lib)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("1.0.0\x00")) {
		t.Fatal("the demo library has no version string to change")
	}
	if err := os.WriteFile(lib, bytes.Replace(b, []byte("1.0.0\x00"), []byte("9.9.9\x00"), 1), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errs = run(t, env, "diff", art, prefix)
	if code != 1 || errs != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, errs, out)
	}
	for _, want := range []string{"content  libdemo/lib/libdemo.so.1.0.0", "ELF sections: .rodata (content)", "1 of ", "entries differ"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(t, env, "diff", "--json", art, prefix)
	var rep struct {
		Equal   bool `json:"equal"`
		Changes []struct {
			Path     string   `json:"path"`
			What     []string `json:"what"`
			Sections []struct {
				Name string `json:"name"`
			} `json:"sections"`
		} `json:"changes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("--json: exit %d %v\n%s", code, err, out)
	}
	if rep.Equal || len(rep.Changes) != 1 || rep.Changes[0].Path != "libdemo/lib/libdemo.so.1.0.0" || len(rep.Changes[0].Sections) != 1 || rep.Changes[0].Sections[0].Name != ".rodata" {
		t.Errorf("--json: %+v", rep)
	}

	for _, bad := range [][]string{{"diff", art, filepath.Join(prefix, "absent")}, {"diff", art, filepath.Join(prefix, "env.sh")}, {"diff", art}} {
		if code, _, errs := run(t, env, bad...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d %q", bad, code, errs)
		}
	}
}

// --rebuild-check on a recipe whose build writes the time into its output: exit 1, the
// difference printed, and the second artifact kept.
func TestRebuildCheckCLI(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("the fixture repository is made with the git CLI")
	}
	work, mirror, recipes := t.TempDir(), t.TempDir(), t.TempDir()
	git := func(dir string, args ...string) string {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_COMMITTER_DATE=2025-01-01T00:00:00Z", "GIT_AUTHOR_DATE=2025-01-01T00:00:00Z")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v %s", args, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	git(work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "README"), []byte("stamped\n"), 0o644)
	git(work, "add", ".")
	git(work, "commit", "-q", "-m", "stamped")
	commit := git(work, "rev-parse", "HEAD")
	git(work, "clone", "-q", "--bare", work, filepath.Join(mirror, "example.invalid", "stamped.git"))
	os.WriteFile(filepath.Join(recipes, "stamped.yaml"), []byte(`name: stamped
cluster: test
description: a build that writes the time into its output
components:
  - name: stamped
    version: 1.0.0
    source: {git: {url: "https://example.invalid/stamped", commit: `+commit+`}}
    build:
      - command: {run: [sh, -c, 'date +%s%N > "$DESTDIR$PREFIX/stamp"']}
`), 0o644)
	out := t.TempDir()
	env := nodeEnv("EPBUILD_CACHE", filepath.Join(t.TempDir(), "cache"))
	code, stdout, errs := run(t, env, "--recipe-dir", recipes, "recipe", "stamped", "--mirror", mirror, "-o", out, "--rebuild-check")
	if code != 1 || !strings.Contains(stdout, "stamped/stamp") || !strings.Contains(stdout, "rebuild check: the second build differs") ||
		!strings.Contains(errs, "rebuild check: a second build of stamped") {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, errs)
	}
	if m, _ := filepath.Glob(filepath.Join(out, "rebuild", "stamped-*.tar.zst")); len(m) != 1 {
		t.Errorf("the second artifact is not kept: %v", m)
	}
	if code, _, errs := run(t, env, "--recipe-dir", recipes, "recipe", "stamped", "--plan", "--rebuild-check"); code != 2 {
		t.Errorf("--plan with --rebuild-check: exit %d %s", code, errs)
	}
	if code, _, errs := run(t, nodeEnv("EPBUILD_REPRO", "maybe"), "--recipe-dir", recipes, "recipe", "stamped"); code != 2 || !strings.Contains(errs, "EPBUILD_REPRO") {
		t.Errorf("EPBUILD_REPRO=maybe: exit %d %s", code, errs)
	}
}

// A side diff cannot read is bad input (exit 2), never "they differ" (exit 1); a bad
// --max-extract likewise. File names and link targets from the two sides are printed
// terminal-safe: an escape sequence or a newline in a name is shown, not obeyed.
func TestDiffExitCodesAndHostileNames(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	hostile := "evil\x1b]0;owned\x07\nfake line\u202e.so"
	for _, d := range []string{a, b} {
		if err := os.WriteFile(filepath.Join(d, "ok"), []byte("same"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(b, hostile), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("\x1b[2J", filepath.Join(a, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("\x1b[31mred", filepath.Join(b, "link")); err != nil {
		t.Fatal(err)
	}
	env := nodeEnv()
	code, out, errs := run(t, env, "diff", a, b)
	if code != 1 {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if strings.ContainsAny(out, "\x1b\x07\u202e") || strings.Contains(out, "\nfake line") {
		t.Errorf("a name from a side reached the terminal as it is:\n%q", out)
	}
	if !strings.Contains(out, `evil\x1b]0;owned\x07\nfake line\u202e.so`) || !strings.Contains(out, `-> \x1b[2J`) {
		t.Errorf("the hostile names are not shown escaped:\n%s", out)
	}

	fifo := filepath.Join(t.TempDir(), "p")
	if err := os.MkdirAll(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(fifo, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]string{{"diff", a, fifo}, {"diff", a, filepath.Join(a, "absent")}, {"diff", "--max-extract", "lots", a, b}} {
		if code, _, errs := run(t, env, bad...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d %q", bad, code, errs)
		}
	}
}
