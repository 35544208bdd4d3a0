package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// matrix run over the demo, in the cache the demo artifact was built in: the cells change
// only the runtime env, so every build is reused; the table shows each cell's steps, the
// number its test printed and what was reused; a failing test makes the exit 1 and is
// named under the table; --json carries the same.
func TestMatrixRunCommand(t *testing.T) {
	demoArtifact(t)
	env := nodeEnv("EPBUILD_CACHE", filepath.Join(shared.dir, "cache"))
	out := filepath.Join(t.TempDir(), "m")
	test := `cd / && python3 -c 'import os, pydemo; print("channels:", pydemo.Channel(0).channels); raise SystemExit(os.environ["DEMO_EXTRA"] == "y")'`
	args := []string{"matrix", "run", "demo", "--axis", "env.DEMO_EXTRA=x,y", "-o", out, "--test", test, "--metric", `channels: ([0-9]+)`}
	code, stdout, stderr := run(t, env, args...)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (cell y's test fails)\n%s\n%s", code, stdout, stderr)
	}
	lines := strings.Split(stdout, "\n")
	if !strings.HasPrefix(lines[0], "CELL") || !strings.Contains(lines[0], "REUSED") {
		t.Errorf("no table header:\n%s", stdout)
	}
	x, y := lines[1], lines[2]
	for _, want := range []string{"demo env.DEMO_EXTRA=x", "ok", "pass", "m1=4", "build libdemo", "build pydemo"} {
		if !strings.Contains(x, want) {
			t.Errorf("cell x's row lacks %q: %s", want, x)
		}
	}
	for _, want := range []string{"demo env.DEMO_EXTRA=y", "fail (1)", "m1=4"} {
		if !strings.Contains(y, want) {
			t.Errorf("cell y's row lacks %q: %s", want, y)
		}
	}
	if !strings.Contains(stdout, "# demo env.DEMO_EXTRA=y: the test exited 1 (log "+out) {
		t.Errorf("the failing cell is not named under the table:\n%s", stdout)
	}
	if !strings.Contains(stderr, "channels: 4") {
		t.Errorf("the test's output should go to stderr:\n%s", stderr)
	}

	code, stdout, _ = run(t, env, append(args, "--json")...)
	var res struct {
		Recipe string `json:"recipe"`
		Cells  []struct {
			Name, Build, Verify, Test string
			Reused                    []string
			Metrics                   []struct {
				Name   string
				Values []float64
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || code != 1 || res.Recipe != "demo" || len(res.Cells) != 2 {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, stdout)
	}
	if c := res.Cells[0]; c.Build != "ok" || c.Test != "pass" || len(c.Metrics) != 1 || len(c.Metrics[0].Values) != 1 || c.Metrics[0].Values[0] != 4 || len(c.Reused) < 4 {
		t.Errorf("--json cell x: %+v", c)
	}

	if code, _, stderr := run(t, env, "matrix", "run", "demo", "--axis", "env.X=1", "--metric", "("); code != 2 || !strings.Contains(stderr, "--metric") {
		t.Errorf("a bad --metric: exit %d\n%s", code, stderr)
	}
}
