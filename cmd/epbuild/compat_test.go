package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// wired fails the test with what to do when the root command lacks a subcommand.
func wired(t *testing.T, name string) {
	t.Helper()
	var b bytes.Buffer
	root := NewRootCmd(&App{Streams: Streams{Out: &b, Err: &b}, Getenv: func(string) string { return "" }})
	for _, c := range root.Commands() {
		if c.Name() == name {
			return
		}
	}
	t.Fatalf("epbuild has no %q command: add new%sCmd(app) to root.AddCommand in app.go", name, strings.ToUpper(name[:1])+name[1:])
}

func TestCompatCheckNewNVSHMEMOnOldDeepEP(t *testing.T) {
	wired(t, "compat")
	code, out, errs := run(t, nil, "compat", "check", "ibrc-dualport", "--set", "nvshmem.version=3.5.19-1")
	if code != 2 {
		t.Fatalf("exit %d, want 2\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "error  R3/qp-layout") && !strings.Contains(out, "error  R5") {
		t.Errorf("R3 or R5 not cited:\n%s", out)
	}
	if !strings.Contains(out, "fix: --set deepep.commit=29d31c095796f3c8ece47ee9cdcc167051bbeed9") {
		t.Errorf("R3's fix not printed:\n%s", out)
	}
	if !strings.Contains(errs, "ibrc-dualport breaks") || !strings.Contains(errs, "R3") {
		t.Errorf("stderr should name the broken rules: %q", errs)
	}
}

func TestCompatCheckNCCLWarns(t *testing.T) {
	wired(t, "compat")
	code, out, errs := run(t, nil, "compat", "check", "ibrc-dualport", "--set", "nccl.version=2.22.3-1")
	if code != 0 {
		t.Fatalf("exit %d, want 0 (warnings only)\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "warn   R18/runtime-connect") || !strings.Contains(out, "NCCL_RUNTIME_CONNECT=0") {
		t.Errorf("R18 and its env fix not printed:\n%s", out)
	}
	// the same recipe on NCCL 2.21.5 has no R18
	code, out, _ = run(t, nil, "compat", "check", "ibrc-dualport", "--set", "nccl.version=2.21.5-1")
	if code != 0 || strings.Contains(out, "R18") || !strings.Contains(out, "0 errors") {
		t.Errorf("ibrc-dualport on NCCL 2.21.5-1: exit %d\n%s", code, out)
	}
	// on torch's NCCL the version is known at preflight only: R18 is undecided at plan
	code, out, _ = run(t, nil, "compat", "check", "ibrc-dualport")
	if code != 0 || !strings.Contains(out, "R18/runtime-connect") || !strings.Contains(out, "could not decide (nccl: no version known)") {
		t.Errorf("ibrc-dualport on torch's NCCL: exit %d\n%s", code, out)
	}
}

func TestCompatCheckJSON(t *testing.T) {
	wired(t, "compat")
	code, out, errs := run(t, nil, "compat", "check", "gcp-b200", "--set", "deepep.commit=9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee", "--json")
	if code != 2 {
		t.Fatalf("v1.2.1 on NVSHMEM 3.5.19-1: exit %d, want 2\n%s", code, errs)
	}
	var res struct {
		Recipe   string `json:"recipe"`
		Stage    string `json:"stage"`
		Findings []struct {
			ID       string   `json:"id"`
			Case     string   `json:"case"`
			Severity string   `json:"severity"`
			Sources  []string `json:"sources"`
			Fix      *struct {
				Set []string `json:"set"`
			} `json:"fix"`
		} `json:"findings"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	var ids []string
	for _, f := range res.Findings {
		ids = append(ids, f.ID+"/"+f.Case+"/"+f.Severity)
	}
	if res.Recipe != "gcp-b200" || res.Stage != "plan" || !slices.Contains(ids, "R3/qp-layout/error") || !slices.Contains(ids, "R4//error") {
		t.Errorf("findings %v", ids)
	}
	// a commit no history at hand knows: the error-level rules it leaves undecided stop the
	// check, naming the question; --allow-undecided lets it pass with warnings, never silently
	env := map[string]string{"EPBUILD_CACHE": t.TempDir()}
	unknown := "deepep.commit=" + strings.Repeat("ab", 20)
	code, out, errs = run(t, env, "compat", "check", "gcp-b200", "--set", unknown)
	if code != 2 || !strings.Contains(errs, "could not be decided") || !strings.Contains(errs, "R3/qp-layout") ||
		!strings.Contains(errs, "whether deepep abababababab contains 29d31c095796") || !strings.Contains(errs, "--allow-undecided") {
		t.Errorf("unknown commit: exit %d\n%s", code, errs)
	}
	code, out, _ = run(t, env, "compat", "check", "gcp-b200", "--set", unknown, "--allow-undecided")
	if code != 0 || !strings.Contains(out, "warn   R3/qp-layout") || !strings.Contains(out, "unknown: could not decide") {
		t.Errorf("unknown commit, --allow-undecided: exit %d\n%s", code, out)
	}
}

func TestCompatCheckBadInput(t *testing.T) {
	wired(t, "compat")
	if code, _, errs := run(t, nil, "compat", "check", "no-such-recipe"); code != 2 || !strings.Contains(errs, "no recipe named") {
		t.Errorf("unknown recipe: exit %d %q", code, errs)
	}
	if code, _, errs := run(t, nil, "compat", "check", "gcp-b200", "--set", "nvshmem.version=x"); code != 2 {
		t.Errorf("bad version: exit %d %q", code, errs)
	}
	dir := t.TempDir()
	for _, args := range [][]string{{"compat", "check"}, {"compat", "check", "gcp-b200", "--prefix", dir}, {"compat", "check", "--prefix", dir, "--set", "runtime.ranks=8"}} {
		if code, _, errs := run(t, nil, args...); code != 2 || !strings.Contains(errs, "a RECIPE (with --set overrides) or --prefix DIR") {
			t.Errorf("%v: exit %d %q", args, code, errs)
		}
	}
	if code, _, errs := run(t, nil, "compat", "check", "--prefix", dir); code != 2 || !strings.Contains(errs, "manifest") {
		t.Errorf("--prefix of no install: exit %d %q", code, errs)
	}
}

func TestCompatListAndExplain(t *testing.T) {
	wired(t, "compat")
	code, out, errs := run(t, nil, "compat", "list")
	if code != 0 {
		t.Fatalf("list: exit %d %s", code, errs)
	}
	for i := 1; i <= 31; i++ {
		if !strings.Contains(out, fmt.Sprintf("\nR%d ", i)) {
			t.Errorf("compat list lacks R%d:\n%s", i, out)
		}
	}
	code, out, _ = run(t, nil, "compat", "list", "--json")
	var list struct{ Rules []struct{ ID string } }
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Rules) < 31 {
		t.Errorf("list --json: exit %d, %d rules, %v", code, len(list.Rules), err)
	}
	code, out, _ = run(t, nil, "compat", "explain", "R3")
	for _, want := range []string{"R3  NVSHMEM >= 3.5.19", "case qp-layout", "before: 29d31c095796f3c8ece47ee9cdcc167051bbeed9", "satisfies: \">=3.5.19\"", "why: NVSHMEM 3.5.19 changed", "sources:\n  - DeepEP #553",
		"build facts (recorded by the build in the install's manifest):\n  - nvshmem.rc-layout: After the nvshmem component is built"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("explain R3 lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(t, nil, "compat", "explain", "r18", "--json")
	var r struct {
		ID    string `json:"id"`
		Cases []struct {
			Name string `json:"name"`
		} `json:"cases"`
	}
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.ID != "R18" || len(r.Cases) != 3 {
		t.Errorf("explain r18 --json: exit %d %v %+v", code, err, r)
	}
	if code, _, errs := run(t, nil, "compat", "explain", "R99"); code != 2 || !strings.Contains(errs, "no rule") {
		t.Errorf("unknown rule: exit %d %q", code, errs)
	}
}

// Every rule explains itself: why, a fix (the rule's or each case's), its sources, and
// what each host fact it reads is.
func TestCompatExplainEveryRule(t *testing.T) {
	wired(t, "compat")
	code, out, _ := run(t, nil, "compat", "list", "--json")
	var list struct {
		Rules []struct {
			ID    string   `json:"id"`
			Cases []string `json:"cases"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("list --json: exit %d %v", code, err)
	}
	// one explain of every rule (the rules are read once): each rule's part runs from its
	// header to the next one's
	ids := []string{"compat", "explain"}
	for _, r := range list.Rules {
		ids = append(ids, r.ID)
	}
	code, all, errs := run(t, nil, ids...)
	if code != 0 {
		t.Fatalf("explain every rule: exit %d %s", code, errs)
	}
	starts := make([]int, len(list.Rules)+1)
	from := 0
	for i, r := range list.Rules {
		at := strings.Index(all[from:], r.ID+"  ")
		if at < 0 || (from+at > 0 && all[from+at-1] != '\n') {
			t.Fatalf("explain prints no part for %s in order", r.ID)
		}
		starts[i], from = from+at, from+at+1
	}
	starts[len(list.Rules)] = len(all)
	for i, r := range list.Rules {
		out := all[starts[i]:starts[i+1]]
		for _, want := range []string{r.ID + "  ", "\nwhy: ", "fix: ", "\nsources:\n  - "} {
			if !strings.Contains(out, want) {
				t.Errorf("explain %s lacks %q:\n%s", r.ID, want, out)
			}
		}
		for _, c := range r.Cases {
			if !strings.Contains(out, "\ncase "+c+" (") {
				t.Errorf("explain %s lacks case %s", r.ID, c)
			}
		}
		if strings.Contains(out, "(not described)") {
			t.Errorf("explain %s reads a host fact that host-facts.yaml does not describe:\n%s", r.ID, out)
		}
	}
	_, out, _ = run(t, nil, "compat", "explain", "R31")
	if !strings.Contains(out, "host facts (read on a node by verify-install --host):\n  - ib.link-layer: ") {
		t.Errorf("explain R31 does not say what its host facts are:\n%s", out)
	}
}

type matrixJSON struct {
	Recipe string `json:"recipe"`
	Cells  []struct {
		Name    string            `json:"name"`
		Values  map[string]string `json:"values"`
		Sets    []string          `json:"sets"`
		Command string            `json:"command"`
		Env     map[string]string `json:"env"`
	} `json:"cells"`
	Excluded []struct {
		Name   string            `json:"name"`
		Values map[string]string `json:"values"`
		Rules  []string          `json:"rules"`
	} `json:"excluded"`
}

func TestMatrixExcludesWithRuleIDs(t *testing.T) {
	wired(t, "matrix")
	code, out, errs := run(t, nil, "matrix", "ibrc-dualport", "--axis", "nvshmem=3.2.5-1,3.5.19-1", "--axis", "nccl=2.21.5-1,2.22.3-1", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var m matrixJSON
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if len(m.Cells) != 2 || len(m.Excluded) != 2 {
		t.Fatalf("want 2 cells and 2 exclusions:\n%s", out)
	}
	for _, e := range m.Excluded {
		if e.Values["nvshmem"] != "3.5.19-1" || !slices.Contains(e.Rules, "R3") || !slices.Contains(e.Rules, "R5") {
			t.Errorf("exclusion %s: %v", e.Name, e.Rules)
		}
	}
	for _, c := range m.Cells {
		if c.Values["nvshmem"] != "3.2.5-1" {
			t.Errorf("allowed cell %s", c.Name)
		}
		if lazy := c.Values["nccl"] == "2.22.3-1"; lazy != (c.Env["NCCL_RUNTIME_CONNECT"] == "0") {
			t.Errorf("cell %s env %v", c.Name, c.Env)
		}
		want := "epbuild recipe ibrc-dualport --set nvshmem.version=3.2.5-1 --set nccl.version=" + c.Values["nccl"]
		if c.Command != want {
			t.Errorf("command %q, want %q", c.Command, want)
		}
	}
}

func TestMatrixFormats(t *testing.T) {
	wired(t, "matrix")
	// no --axis: the recipe's matrix: field (nccl 2.21.5-1, 2.22.3-1)
	code, out, errs := run(t, nil, "matrix", "ibrc-dualport", "--format", "github")
	if code != 0 {
		t.Fatalf("exit %d %s", code, errs)
	}
	var gh struct {
		Include []struct {
			Recipe, Name, Sets, Command string
			Env                         map[string]string
		} `json:"include"`
	}
	if err := json.Unmarshal([]byte(out), &gh); err != nil || len(gh.Include) != 2 {
		t.Fatalf("github: %v\n%s", err, out)
	}
	if gh.Include[0].Recipe != "ibrc-dualport" || gh.Include[0].Sets != "--set nccl.version=2.21.5-1" || gh.Include[1].Env["NCCL_RUNTIME_CONNECT"] != "0" {
		t.Errorf("github include: %+v", gh.Include)
	}
	code, out, _ = run(t, nil, "matrix", "ibrc-dualport", "--format", "gitlab", "--axis", "nccl=2.22.3-1")
	var gl struct {
		Parallel struct {
			Matrix []map[string]string `yaml:"matrix"`
		} `yaml:"parallel"`
	}
	if err := yaml.Unmarshal([]byte(out), &gl); code != 0 || err != nil || len(gl.Parallel.Matrix) != 1 ||
		gl.Parallel.Matrix[0]["NCCL_RUNTIME_CONNECT"] != "0" || gl.Parallel.Matrix[0]["EPBUILD_SETS"] != "--set nccl.version=2.22.3-1" {
		t.Errorf("gitlab: exit %d %v\n%s", code, err, out)
	}
	code, out, _ = run(t, nil, "matrix", "gcp-b200", "--axis", "nvshmem=3.5.19-1")
	if code != 0 || !strings.Contains(out, "gcp-b200 nvshmem=3.5.19-1  run") || !strings.Contains(out, "epbuild recipe gcp-b200 --set nvshmem.version=3.5.19-1") {
		t.Errorf("text: exit %d\n%s", code, out)
	}
	for _, bad := range [][]string{
		{"matrix", "gcp-b200", "--format", "yaml"},
		{"matrix", "gcp-b200", "--axis", "nvshmem=3.x"},
		{"matrix", "gcp-b200", "--axis", "nvshmem=3.4.5", "--axis", "nvshmem=3.5.19-1"},
		{"matrix", "gcp-b200", "--axis", "nothere=1.0"},
	} {
		if code, _, errs := run(t, nil, bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", bad, code, errs)
		}
	}
}

// The matrix excludes a combination an error-level rule cannot decide, unless allowed.
func TestMatrixUndecidedCells(t *testing.T) {
	wired(t, "matrix")
	env := map[string]string{"EPBUILD_CACHE": t.TempDir()}
	axis := "deepep.commit=29d31c095796f3c8ece47ee9cdcc167051bbeed9," + strings.Repeat("cd", 20)
	code, out, errs := run(t, env, "matrix", "gcp-b200", "--axis", axis, "--format", "json")
	var m struct {
		Cells    []struct{ Name string }
		Excluded []struct {
			Name      string
			Rules     []string
			Undecided []string
		}
	}
	if err := json.Unmarshal([]byte(out), &m); code != 0 || err != nil {
		t.Fatalf("exit %d, %v\n%s", code, err, errs)
	}
	if len(m.Cells) != 1 || len(m.Excluded) != 1 || len(m.Excluded[0].Rules) != 0 || !slices.Contains(m.Excluded[0].Undecided, "R3") {
		t.Errorf("want the pinned commit as a cell and the unknown one excluded as undecided: %+v", m)
	}
	code, out, _ = run(t, env, "matrix", "gcp-b200", "--axis", axis, "--allow-undecided")
	if code != 0 || !strings.Contains(out, "deepep.commit="+strings.Repeat("cd", 20)+"  run") {
		t.Errorf("--allow-undecided: exit %d\n%s", code, out)
	}
}

// The case against the real history: DeepEP 309785a is before 29d31c0, which only
// a clone of DeepEP can tell; with the mirror, R3 and R4 are errors, not undecided.
func TestUpstreamCompatCheckDecidesFromTheMirror(t *testing.T) {
	mirror := os.Getenv("EPBUILD_TEST_MIRROR")
	if mirror == "" {
		t.Skip("EPBUILD_TEST_MIRROR is unset: no upstream mirror to decide from")
	}
	env := map[string]string{"EPBUILD_CACHE": t.TempDir()}
	const old = "deepep.commit=309785a94dedeb9ca3cb01091048584a31bfc799"
	code, _, errs := run(t, env, "compat", "check", "gcp-b200", "--set", old)
	if code != 2 || !strings.Contains(errs, "could not be decided") {
		t.Errorf("without a mirror: exit %d\n%s", code, errs)
	}
	code, out, errs := run(t, env, "compat", "check", "gcp-b200", "--set", old, "--mirror", mirror)
	if code != 2 || !strings.Contains(out, "error  R3/qp-layout") || !strings.Contains(out, "error  R4:") || !strings.Contains(errs, "gcp-b200 breaks R3: NVSHMEM >= 3.5.19 changed the RC-QP layout") ||
		!strings.Contains(errs, "; R4: DeepEP before 29d31c0") || !strings.Contains(errs, "(`epbuild compat explain R3`, `epbuild compat explain R4` say why") {
		t.Errorf("with the mirror: exit %d\n%s\n%s", code, out, errs)
	}
}

// single-node pins no CUDA beyond ">=12.3": R26 and R27 cannot be decided at plan time,
// but preflight asks them again with the build host's CUDA, so the matrix keeps the cells
// (the cell's build decides), while an unknown commit, which only the plan asks about,
// still excludes its cell (above).
func TestMatrixKeepsCellsPreflightDecides(t *testing.T) {
	wired(t, "matrix")
	env := map[string]string{"EPBUILD_CACHE": t.TempDir()}
	code, out, errs := run(t, env, "matrix", "single-node", "--axis", "nccl=bundled,2.28.3-1", "--format", "json")
	var m struct {
		Cells []struct {
			Name     string
			Findings []struct {
				ID      string
				Unknown bool
			}
		}
		Excluded []struct{ Name string }
	}
	if err := json.Unmarshal([]byte(out), &m); code != 0 || err != nil {
		t.Fatalf("exit %d, %v\n%s", code, err, errs)
	}
	if len(m.Cells) != 2 || len(m.Excluded) != 0 {
		t.Fatalf("want both cells kept: %+v", m)
	}
	undecided := 0
	for _, f := range m.Cells[0].Findings {
		if f.Unknown && (f.ID == "R26" || f.ID == "R27") {
			undecided++
		}
	}
	if undecided == 0 {
		t.Errorf("no undecided R26/R27 in the cell's findings (the test proves nothing): %+v", m.Cells[0])
	}
}

// compat explain takes the case ids compat check prints, and marks that case; an
// unknown case or rule is bad input naming what exists.
func TestCompatExplainCaseID(t *testing.T) {
	if code, _, errs := run(t, nil, "compat", "explain", "R1", "R2", "--json"); code != 2 || !strings.Contains(errs, "--json prints one rule") {
		t.Errorf("two ids with --json: exit %d %s", code, errs)
	}
	if code, _, errs := run(t, nil, "compat", "explain", "R1", "R999"); code != 2 || !strings.Contains(errs, "no rule R999") {
		t.Errorf("a bad id among several: exit %d %s", code, errs)
	}
	code, out, errs := run(t, nil, "compat", "explain", "R16/host-setup")
	if code != 0 || !strings.Contains(out, "R16  ") || !strings.Contains(out, "\n>> case host-setup (") {
		t.Fatalf("exit %d\n%s%s", code, out, errs)
	}
	if strings.Count(out, ">> case") != 1 {
		t.Errorf("more than the one case marked:\n%s", out)
	}
	if code, _, errs := run(t, nil, "compat", "explain", "R16/no-such-case"); code != 2 || !strings.Contains(errs, "host-setup") {
		t.Errorf("unknown case: exit %d %q", code, errs)
	}
	if code, _, errs := run(t, nil, "compat", "explain", "R166"); code != 2 || !strings.Contains(errs, "the closest: R16") {
		t.Errorf("unknown rule: exit %d %q", code, errs)
	}
}

// An --ignore-rule id that names no rule is bad input naming the nearest ids, not a
// flag accepted and ignored.
func TestIgnoreRuleUnknown(t *testing.T) {
	env := map[string]string{"EPBUILD_CACHE": t.TempDir()}
	code, out, errs := run(t, env, "recipe", "ibrc-dualport", "--plan", "--ignore-rule", "R99")
	if code != 2 || !strings.Contains(errs, "--ignore-rule R99: no such rule; the closest: R9") {
		t.Errorf("exit %d\n%s%s", code, out, errs)
	}
}
