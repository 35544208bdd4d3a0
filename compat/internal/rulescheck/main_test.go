package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/compat"
)

// git runs the git CLI in dir with a fixed identity and no user or system config.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+dir,
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// mirror makes DIR/github.com/acme/kernels.git, a bare repository whose one commit (also
// tagged v1.0) holds src/qp.h; it returns DIR and the commit.
func mirror(t *testing.T) (string, string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is needed")
	}
	work := t.TempDir()
	if err := os.MkdirAll(filepath.Join(work, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	header := "// line 1\n#pragma once\n\ntypedef struct state_v2 {\n    int npes;\n} state_v2;\ntypedef   state_v2   state_t;\n"
	if err := os.WriteFile(filepath.Join(work, "src", "qp.h"), []byte(header), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, work, "init", "-q", "-b", "main")
	git(t, work, "add", ".")
	git(t, work, "commit", "-q", "-m", "qp layout")
	git(t, work, "tag", "v1.0")
	commit := git(t, work, "rev-parse", "HEAD")
	dir := t.TempDir()
	bare := filepath.Join(dir, "github.com", "acme", "kernels.git")
	git(t, work, "clone", "-q", "--bare", work, bare)
	return dir, commit
}

func rulesWith(t *testing.T, cites string) *compat.Rules {
	t.Helper()
	y := `rules:
  - id: X1
    title: t
    stages: [plan]
    severity: warn
    message: m
    sources: [s]
    when: {recipe: [r]}
    cites:
` + cites
	rs, err := compat.ParseRules("rules.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestRulesCheck(t *testing.T) {
	dir, commit := mirror(t)
	ctx := context.Background()
	ok := rulesWith(t, `      - {repo: https://github.com/acme/kernels, commit: `+commit+`, path: src/qp.h, lines: "7", says: "typedef state_v2 state_t;"}
      - {repo: https://github.com/acme/kernels, commit: v1.0, path: src/qp.h, lines: 4-6, says: "int npes;"}
      - {repo: https://github.com/other/repo, commit: v1.0, path: a.c, lines: "1", says: "x"}
`)
	var out bytes.Buffer
	if code := run(ctx, &out, ok, dir); code != 0 || !strings.Contains(out.String(), "2 citations hold, 0 fail, 1 not in the mirror") {
		t.Errorf("exit %d:\n%s", code, out.String())
	}
	for name, cite := range map[string]string{
		"the text moved out of the lines": `lines: 1-3, says: "typedef state_v2 state_t;"`,
		"the text changed":                `lines: "7", says: "typedef state_v1 state_t;"`,
		"the file is shorter":             `lines: 7-90, says: "state_t"`,
		"no such path":                    `lines: "1", says: "x"}` + "\n" + `      - {repo: https://github.com/acme/kernels, commit: v1.0, path: src/gone.h, lines: "1", says: "x"`,
		"no such commit":                  `lines: "7", says: "state_t"}` + "\n" + `      - {repo: https://github.com/acme/kernels, commit: v9.9, path: src/qp.h, lines: "7", says: "state_t"`,
	} {
		rs := rulesWith(t, `      - {repo: https://github.com/acme/kernels, commit: v1.0, path: src/qp.h, `+cite+"}\n")
		out.Reset()
		if code := run(ctx, &out, rs, dir); code != exitFailed || !strings.Contains(out.String(), "FAIL X1 github.com/acme/kernels@") || !strings.Contains(out.String(), "rules.yaml:") {
			t.Errorf("%s: exit %d:\n%s", name, code, out.String())
		}
	}
	out.Reset()
	if code := run(ctx, &out, ok, ""); code != 0 || !strings.Contains(out.String(), "skipped: no mirror") {
		t.Errorf("no mirror: exit %d %s", code, out.String())
	}
	out.Reset()
	if code := run(ctx, &out, ok, filepath.Join(dir, "missing")); code != exitEnv {
		t.Errorf("a mirror that is not there: exit %d %s", code, out.String())
	}
}

// The embedded rules' citations all parse, and each names lines within one screen.
func TestEmbeddedCites(t *testing.T) {
	rs, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range rs.All() {
		for _, c := range r.Cites {
			n++
			if a, b, err := c.Range(); err != nil || b-a > 60 {
				t.Errorf("%s %s: %v (%d lines)", r.ID, c, err, b-a+1)
			}
		}
	}
	if n < 20 {
		t.Errorf("only %d citations", n)
	}
}
