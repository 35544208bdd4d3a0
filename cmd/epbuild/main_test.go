package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"testing"
)

// run executes epbuild in-process with buffers and a fixed environment.
func run(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string { return env[k] }
	code = Main(args, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, getenv)
	return code, out.String(), errb.String()
}

func TestListShowsRecipes(t *testing.T) {
	code, out, errs := run(t, nil, "list")
	if code != 0 {
		t.Fatalf("list exit %d: %s", code, errs)
	}
	for _, n := range []string{"efa-aws", "gcp-b200", "ibrc-dualport", "single-node"} {
		if !strings.Contains(out, n) {
			t.Errorf("list does not show %s:\n%s", n, out)
		}
	}
	if strings.Contains(errs, "\x1b[") {
		t.Errorf("stderr has terminal escapes though it is not a terminal: %q", errs)
	}
}

func TestShowJSONPins(t *testing.T) {
	code, out, errs := run(t, nil, "show", "gcp-b200", "--json")
	if code != 0 {
		t.Fatalf("show exit %d: %s", code, errs)
	}
	for _, pin := range []string{"29d31c095796f3c8ece47ee9cdcc167051bbeed9", "8a07e7e7ed57cfc63005f670d64d410cb30b061b", "919760f413fb834e76382d129ba9c3314ce722be"} {
		if !strings.Contains(out, pin) {
			t.Errorf("show gcp-b200 --json lacks %s", pin)
		}
	}
	var plan struct {
		Key        string `json:"key"`
		Components []struct {
			Name   string `json:"name"`
			Source struct {
				Git *struct{ Commit string } `json:"git"`
			} `json:"source"`
		} `json:"components"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("show --json is not JSON: %v", err)
	}
	const other = "131da55f643ac87c810ba0bc51d359258bf433a1"
	code, out2, errs := run(t, nil, "show", "gcp-b200", "--json", "--set", "nvshmem.commit="+other)
	if code != 0 {
		t.Fatalf("show --set exit %d: %s", code, errs)
	}
	var plan2 = plan
	if err := json.Unmarshal([]byte(out2), &plan2); err != nil {
		t.Fatal(err)
	}
	if plan2.Components[0].Name != "nvshmem" || plan2.Components[0].Source.Git.Commit != other {
		t.Errorf("--set nvshmem.commit did not change the resolved pin: %+v", plan2.Components[0])
	}
	if plan2.Key == plan.Key {
		t.Errorf("the plan key did not change with the pin")
	}
}

func TestBadRecipeExitCodes(t *testing.T) {
	dir := t.TempDir()
	good := `name: t
cluster: test
description: test
components:
  - name: deepep
    source:
      git:
        url: https://github.com/deepseek-ai/DeepEP
        commit: 29d31c095796f3c8ece47ee9cdcc167051bbeed9
`
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok.yaml", good)
	misspelt := write("misspelt.yaml", strings.Replace(good, "    source:", "    sorce:", 1))
	short := write("short.yaml", strings.Replace(good, "29d31c095796f3c8ece47ee9cdcc167051bbeed9", "29d31c0", 1))

	if code, out, errs := run(t, nil, "validate", ok); code != 0 || !strings.Contains(out, "ok") {
		t.Errorf("validate good: exit %d %s %s", code, out, errs)
	}
	code, _, errs := run(t, nil, "validate", misspelt)
	if code != 2 || !strings.Contains(errs, "misspelt.yaml:6:5") || !strings.Contains(errs, "sorce") {
		t.Errorf("misspelt key: exit %d, stderr %q; want 2 and file:line:col", code, errs)
	}
	code, _, errs = run(t, nil, "show", short)
	if code != 2 || !strings.Contains(errs, "full 40-hex commit is required") || !strings.Contains(errs, "short.yaml:9:17") {
		t.Errorf("short SHA: exit %d, stderr %q", code, errs)
	}
	code, _, errs = run(t, nil, "show", "gcp-b200", "--set", "nvshmem.commit=919760f")
	if code != 2 || !strings.Contains(errs, "--set nvshmem.commit=919760f") {
		t.Errorf("short SHA in --set: exit %d, stderr %q", code, errs)
	}
	if code, _, _ := run(t, nil, "show", "no-such-recipe"); code != 2 {
		t.Errorf("unknown recipe: exit %d, want 2", code)
	}
	if code, _, _ := run(t, nil, "list", "--bogus"); code != 2 {
		t.Errorf("unknown flag: exit %d, want 2", code)
	}
	if code, _, _ := run(t, nil, "--log-level", "loud", "list"); code != 2 {
		t.Errorf("bad log level: exit %d, want 2", code)
	}
}

func TestRecipeDir(t *testing.T) {
	dir := t.TempDir()
	body := `name: mine
cluster: local
description: mine
components:
  - name: deepep
    source:
      git: {url: "https://github.com/deepseek-ai/DeepEP", commit: 29d31c095796f3c8ece47ee9cdcc167051bbeed9}
`
	if err := os.WriteFile(filepath.Join(dir, "mine.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, nil, "--recipe-dir", dir, "list")
	if code != 0 || !strings.Contains(out, "mine") || !strings.Contains(out, "gcp-b200") {
		t.Errorf("list with --recipe-dir: exit %d\n%s\n%s", code, out, errs)
	}
}

// The committed schema must be what the Go types generate (make schema).
func TestSchemaUpToDate(t *testing.T) {
	want, err := recipeSchema()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("..", "..", "recipes", "schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("recipes/schema.json is stale: run `make schema`")
	}
}

func TestVersionAndLogFormat(t *testing.T) {
	code, out, _ := run(t, nil, "version")
	if code != 0 || !strings.HasPrefix(out, "epbuild ") {
		t.Errorf("version: %d %q", code, out)
	}
	code, _, errs := run(t, map[string]string{"NO_COLOR": "1"}, "--log-format", "json", "--log-level", "debug", "show", "no-such")
	if code != 2 || !strings.Contains(errs, "no recipe named") {
		t.Errorf("show no-such: %d %q", code, errs)
	}
}

func TestBadSourceDateEpoch(t *testing.T) {
	code, _, errs := run(t, map[string]string{"SOURCE_DATE_EPOCH": "yesterday", "EPBUILD_CACHE": t.TempDir()}, "recipe", "demo", "-o", t.TempDir())
	if code != 2 || !strings.Contains(errs, "SOURCE_DATE_EPOCH") {
		t.Errorf("bad SOURCE_DATE_EPOCH: exit %d, stderr %q", code, errs)
	}
}

// A tiny hostile recipe is refused at once, naming the limit, not decoded into gigabytes.
func TestValidateRefusesAnAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString("name: bomb\ncluster: c\ndescription: d\nnotes: &a0 [x, x, x, x, x, x, x, x, x]\nmatrix:\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [", i, i)
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	p := filepath.Join(t.TempDir(), "bomb.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := run(t, nil, "validate", p)
	if code != 2 || !strings.Contains(errs, "bomb.yaml:") || !strings.Contains(errs, "MaxAliasNodes") {
		t.Errorf("alias bomb (%d bytes): exit %d, %q", b.Len(), code, errs)
	}
}

// EPBUILD_CACHE=$HOME (a typo): cache gc, ls and du refuse it (exit 2, naming it and the
// fix) and remove or make nothing there.
func TestCacheCommandsRefuseHome(t *testing.T) {
	home := t.TempDir()
	for _, n := range []string{"tmp/project/notes.txt", "logs/2023/app.log"} {
		p := filepath.Join(home, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"cache", "gc", "--older-than", "0s"}, {"cache", "ls"}, {"cache", "du"}} {
		code, _, errs := run(t, map[string]string{"EPBUILD_CACHE": home, "HOME": home}, args...)
		if code != 2 || !strings.Contains(errs, home) || !strings.Contains(errs, "EPBUILD_CACHE") {
			t.Errorf("%v: exit %d: %s", args, code, errs)
		}
	}
	des, _ := os.ReadDir(home)
	if len(des) != 2 {
		t.Errorf("the home directory holds %v", des)
	}
	for _, n := range []string{"tmp/project/notes.txt", "logs/2023/app.log"} {
		if _, err := os.Stat(filepath.Join(home, n)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// With HOME unset the cache commands use the private directory in the temporary one.
func TestCacheWithoutHome(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("HOME", "")
	t.Setenv("XDG_CACHE_HOME", "")
	t.Setenv("EPBUILD_CACHE", "")
	t.Setenv("TMPDIR", tmp)
	code, out, errs := run(t, nil, "cache", "du")
	if code != 0 || !strings.Contains(out, filepath.Join(tmp, fmt.Sprintf("epbuild-cache-%d", os.Getuid()))) {
		t.Errorf("exit %d: %s%s", code, out, errs)
	}
}

// What gc leaves alone in a cache is listed with its name shown safely (no terminal
// escapes from a file name).
func TestCacheGCShowsForeignNamesSafely(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := run(t, map[string]string{"EPBUILD_CACHE": dir}, "cache", "du"); code != 0 {
		t.Fatalf("du: %s", errs)
	}
	if err := os.WriteFile(filepath.Join(dir, "EPBUILD-CACHE"), []byte("epbuild cache\nformat: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "tmp", "evil\x1b]0;x\x07"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errs := run(t, map[string]string{"EPBUILD_CACHE": dir}, "cache", "gc", "--older-than", "0s")
	if code != 0 || !strings.Contains(out, "not epbuild's: left alone") || strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("exit %d: %q %s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "tmp", "evil\x1b]0;x\x07")); err != nil {
		t.Error(err)
	}
}

// hybrid-ep's GB200/GB300 variant is three --set flags (the recipe's notes): show says the
// build host it needs and what a node must have; a build host of another machine exits 3
// saying where to build, before anything is built.
func TestHostArchVariant(t *testing.T) {
	code, out, errs := run(t, nil, "show", "hybrid-ep", "--set", "toolchain.host-arch=aarch64", "--set", "runtime.gpus-per-node=4", "--set", "runtime.mnnvl=true")
	for _, w := range []string{"build host aarch64 (uname -m", "runtime node\n  4 GPUs a node", "MNNVL: GPU memory shared across the nodes", "IMEX channel"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("show of the GB200 variant: exit %d, no %q\n%s%s", code, w, out, errs)
		}
	}
	if _, out, _ := run(t, nil, "show", "hybrid-ep"); strings.Contains(out, "build host") || strings.Contains(out, "runtime node") {
		t.Errorf("hybrid-ep itself names no build host nor node shape:\n%s", out)
	}
	other, want := "aarch64", "build on an aarch64 host, a Grace node"
	if goruntime.GOARCH == "arm64" {
		other, want = "x86_64", "build on a x86_64 host"
	}
	env := nodeEnv("EPBUILD_CACHE", filepath.Join(t.TempDir(), "cache"))
	outDir := t.TempDir()
	code, out, errs = run(t, env, "recipe", "demo", "-o", outDir, "--set", "toolchain.host-arch="+other)
	if code != 3 || !strings.Contains(errs, "build host machine: need "+other) || !strings.Contains(errs, want) {
		t.Errorf("a build host of another machine: exit %d\n%s%s", code, out, errs)
	}
	if entries, _ := os.ReadDir(outDir); len(entries) > 0 {
		t.Errorf("refused at preflight, yet wrote %v", entries)
	}
}
