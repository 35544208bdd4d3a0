package verify

import (
	"context"
	"testing"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/compat"
)

// The host stage reads the build facts the manifest recorded (builder's
// TestBuildRecordsRCLayout records these from a built NVSHMEM 3.5.0 tree): R24 is decided
// by the recorded layout, and the loaded version is compared with the headers' version.
func TestHostFactsFromTheRecordedBuild(t *testing.T) {
	recorded := map[string]string{manifest.FactRCLayout: "v2", manifest.FactHeaderVersion: "3.5.0"}
	rules, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	h, err := compat.LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	tree := []string{"nvshmem.commit=2c7f5a37b16d74166b7dfd30014bb1de1c6aaa0a", "nvshmem.version=3.5.0-0"}
	// the host stage: the install's facts, and a process that loads 3.4.5 (_v1)
	opts := HostOptions{Plan: fixture.PlanOf(t, "gcp-b200", tree...), Build: recorded}
	r24 := func(opts HostOptions) *compat.Finding {
		f := hostFacts(opts, nil, map[string]string{"nvshmem.loaded-version": "3.4.5"}, "")
		fs, err := compat.Evaluate(context.Background(), rules, f, compat.StageHost, h)
		if err != nil {
			t.Fatal(err)
		}
		for i := range fs {
			if fs[i].Name() == "R24/built-after-loaded-before" {
				return &fs[i]
			}
		}
		return nil
	}
	if f := r24(opts); f == nil || f.Unknown {
		t.Errorf("host: built _v2 (recorded), loaded 3.4.5: %+v", f)
	}
	opts.Build = nil
	if f := r24(opts); f == nil || !f.Unknown {
		t.Errorf("host: without the recorded fact, undecided: %+v", f)
	}
	// the loaded version is compared with the headers' version, not the label
	if v := builtNVSHMEMVersion(HostOptions{Plan: fixture.PlanOf(t, "gcp-b200"), Build: map[string]string{manifest.FactHeaderVersion: "3.5.0"}}); v != "3.5.0" {
		t.Errorf("built version %q, want the headers' 3.5.0 over the label 3.5.19", v)
	}
}
