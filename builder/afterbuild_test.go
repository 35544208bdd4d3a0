package builder

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// The rules after the build stop a plan the recorded layout decides against, saying
// what the build read; the other layout passes.
func TestRulesAfterBuild(t *testing.T) {
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "gcp-b200", AllowUndecided: true, CacheDir: filepath.Join(t.TempDir(), "cache"),
		Sets: []string{"nvshmem.commit=2c7f5a37b16d74166b7dfd30014bb1de1c6aaa0a", "nvshmem.version=3.5.0-0",
			"deepep.commit=e995aa22db1f5d204e5841cc8e73c670c772494b", "env.NVSHMEM_SYMMETRIC_SIZE=4G", "nccl.package=nvidia-nccl-cu13"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = j.rulesAfterBuild(context.Background(), gpuMachine(), map[string]string{manifest.FactRCLayout: "v2"})
	var re *RulesError
	var ae *AfterBuildError
	if !errors.As(err, &re) || !errors.As(err, &ae) || !slices.ContainsFunc(re.Findings, func(f compat.Finding) bool { return f.Name() == "R3/qp-layout" }) ||
		!strings.Contains(err.Error(), "nvshmem.rc-layout=v2") {
		t.Fatalf("want R3 after the build read _v2, got %v", err)
	}
	fs, err := j.rulesAfterBuild(context.Background(), gpuMachine(), map[string]string{manifest.FactRCLayout: "v1"})
	if errors.As(err, &re) && slices.ContainsFunc(re.Findings, func(f compat.Finding) bool { return f.ID == "R3" }) {
		t.Fatalf("_v1: %v", err)
	}
	if slices.ContainsFunc(fs, func(f compat.Finding) bool { return f.ID == "R3" }) {
		t.Errorf("_v1: R3 found: %v", compat.IDs(fs))
	}
}

// compat check --prefix: the rules on an install read its manifest's build facts; the
// same install without them leaves R3 undecided.
func TestCheckInstallReadsBuildFacts(t *testing.T) {
	p := fixture.PlanOf(t, "gcp-b200", "nvshmem.commit=2c7f5a37b16d74166b7dfd30014bb1de1c6aaa0a", "nvshmem.version=3.5.0-0",
		"deepep.commit=e995aa22db1f5d204e5841cc8e73c670c772494b")
	installed := func(build map[string]string) string {
		dir := t.TempDir()
		b, err := json.MarshalIndent(manifest.Manifest{Format: manifest.ManifestFormat, Recipe: p.Recipe, Plan: p, BuildFacts: build,
			PlanKey: "test", Files: []archive.Entry{{Path: "env.sh", Mode: 0o644}}}, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, manifest.ManifestName), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	opts := Options{AllowUndecided: true, CacheDir: filepath.Join(t.TempDir(), "cache")}
	_, fs, err := CheckInstall(context.Background(), installed(map[string]string{manifest.FactRCLayout: "v2"}), opts)
	var re *RulesError
	if !errors.As(err, &re) || !slices.ContainsFunc(re.Findings, func(f compat.Finding) bool { return f.Name() == "R3/qp-layout" && !f.Unknown }) {
		t.Fatalf("recorded _v2: want R3, got %v (%v)", err, compat.IDs(fs))
	}
	_, fs, err = CheckInstall(context.Background(), installed(nil), opts)
	if errors.As(err, &re) && slices.ContainsFunc(re.Findings, func(f compat.Finding) bool { return f.ID == "R3" }) {
		t.Fatalf("nothing recorded: R3 stops: %v", err)
	}
	if !slices.ContainsFunc(fs, func(f compat.Finding) bool { return f.Name() == "R3/qp-layout" && f.Unknown }) {
		t.Errorf("nothing recorded: want R3 undecided, got %v", compat.IDs(fs))
	}
}

// A rule left undecided by a build fact is decided by building, not by a mirror: the
// refusal's fix says which, and both when both are unknown.
func TestUndecidedFix(t *testing.T) {
	fact := "build fact nvshmem.rc-layout is not recorded (it is read from the built tree)"
	history := "whether deepep 309785a94ded contains 29d31c095796"
	for _, c := range []struct {
		qs        []string
		want, not string
	}{
		{[]string{fact}, "--allow-undecided builds, and the rules judge again", "--mirror"},
		{[]string{history}, "Give --mirror DIR", "judge again"},
		{[]string{history, fact}, "decide the rest; the build facts are read by the build", ""},
	} {
		got := undecidedFix(c.qs)
		if !strings.Contains(got, c.want) || (c.not != "" && strings.Contains(got, c.not)) {
			t.Errorf("%q: %q", c.qs, got)
		}
	}
}
