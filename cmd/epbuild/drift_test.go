package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/drift"
)

// TestDriftCommand: drift over the demo's embedded repositories prints a table per
// component and JSON; bad options are bad input.
func TestDriftCommand(t *testing.T) {
	env := map[string]string{"EPBUILD_CACHE": t.TempDir()}
	code, out, errs := run(t, env, "drift", "demo")
	if code != 0 {
		t.Fatalf("drift demo: exit %d\n%s", code, errs)
	}
	for _, want := range []string{"libdemo  https://epbuild.invalid/demo/libdemo", "set demo-py-lanes (max-offset 0, embedded)", "(pinned) v1.0.0", "clean"} {
		if !strings.Contains(out, want) {
			t.Errorf("drift demo lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = run(t, env, "drift", "demo", "--component", "pydemo", "--json")
	var rep struct {
		Tables []struct {
			Component string `json:"component"`
			Rows      []struct {
				Sets []struct {
					Set   string `json:"set"`
					State string `json:"state"`
				} `json:"sets"`
			} `json:"rows"`
		} `json:"tables"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Tables) != 1 || rep.Tables[0].Component != "pydemo" ||
		rep.Tables[0].Rows[0].Sets[0].State != "clean" {
		t.Fatalf("drift --json: exit %d %+v\n%s", code, rep, errs)
	}
	// a recipe without patch sets says so instead of printing nothing
	if code, out, errs := run(t, env, "drift", "hybrid-ep"); code != 0 || !strings.Contains(out, "hybrid-ep: no component carries a patch set") {
		t.Errorf("drift hybrid-ep: exit %d\n%s%s", code, out, errs)
	}
	// history comes from a mirror; the cache has only pinned commits
	if code, _, errs := run(t, env, "drift", "gcp-b200"); code != exitBadInput || !strings.Contains(errs, "give a mirror") {
		t.Errorf("drift without a mirror: exit %d, want 2\n%s", code, errs)
	}
	for _, args := range [][]string{
		{"--every", "-1"}, {"--repo", "nope"}, {"--repo", "other=https://example.invalid/x"},
		{"--component", "other"}, {"--commits", "v1.0.0...main"}, {"--commits", "ab8d30a.."},
	} {
		if code, _, errs := run(t, env, append([]string{"drift", "demo"}, args...)...); code != exitBadInput {
			t.Errorf("drift %v: exit %d, want 2\n%s", args, code, errs)
		}
	}
}

// What drift prints from a mirror (subjects, tags, file names in cells) and from a
// recipe reaches the terminal escaped: a commit subject cannot clear the screen or
// forge a line.
func TestWriteDriftHostile(t *testing.T) {
	evil := "\x1b[2J\x1b]0;owned\x07\nfake\u202e"
	rep := &drift.Report{Recipe: "r", Tables: []drift.Table{{
		Component: "c", Repo: "https://example.invalid/" + evil,
		Sets: []drift.SetInfo{{Name: "s" + evil, Origin: "o" + evil}},
		Rows: []drift.Row{
			{Commit: strings.Repeat("a", 40), Subject: "subject " + evil, Tags: []string{"v1" + evil}, Cells: []drift.Cell{{State: drift.Clean}}},
			{Commit: strings.Repeat("b", 40), Subject: "x", Cells: []drift.Cell{{State: drift.Conflict, File: "f" + evil, Line: 3}}},
		},
		Breaks: []drift.Break{{Set: "s" + evil, At: strings.Repeat("b", 40), After: strings.Repeat("a", 40), Cell: drift.Cell{State: drift.FileGone, File: "f" + evil}}},
	}}, Skipped: []drift.Skip{{Component: "d" + evil, Why: "why" + evil}}}
	var b strings.Builder
	writeDrift(&b, rep, false)
	out := b.String()
	if strings.ContainsAny(out, "\x1b\x07\u202e") || strings.Contains(out, "\nfake") {
		t.Errorf("a string from the mirror reached the terminal as it is:\n%q", out)
	}
	if !strings.Contains(out, `subject \x1b[2J\x1b]0;owned\x07\nfake\u202e`) {
		t.Errorf("the subject is not shown escaped:\n%s", out)
	}
}
