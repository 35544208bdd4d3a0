package stage

import (
	"github.com/epbuild/epbuild/builder/install"

	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
)

// The one line of NVSHMEM's nvshmem_common_ibgda.h each layout is known by.
const (
	typedefV1 = "typedef nvshmemi_ibgda_device_state_v1 nvshmemi_ibgda_device_state_t;"
	typedefV2 = "typedef nvshmemi_ibgda_device_state_v2 nvshmemi_ibgda_device_state_t;"
)

// ibgdaHeaderText is a header of the installed form around typedef (the structs are
// stand-ins: only the typedef is read).
func ibgdaHeaderText(typedef string) string {
	return "#ifndef FIXTURE_IBGDA_H\n#define FIXTURE_IBGDA_H\n/* stand-ins for the device state structs */\n" +
		"typedef struct { int rcs; } nvshmemi_ibgda_device_state_v1;\n" +
		"typedef struct { int rcs; } nvshmemi_ibgda_device_state_v2;\n" +
		typedef + "\n#endif\n"
}

func versionHeaderText(major, minor, patch string) string {
	return "#define NVSHMEM_VENDOR_MAJOR_VERSION " + major + "\n#define NVSHMEM_VENDOR_MINOR_VERSION " + minor +
		"\n#define NVSHMEM_VENDOR_PATCH_VERSION " + patch + "\n#define NVSHMEM_VENDOR_PACKAGE_VERSION 0\n" +
		"#define NVSHMEM_BUILD_VARS \"NVSHMEM_IBGDA_SUPPORT=1\"\n"
}

func TestParseRCLayout(t *testing.T) {
	for _, c := range []struct {
		name, src, want string
		err             []string
	}{
		{"v1", ibgdaHeaderText(typedefV1), "v1", nil},
		{"v2", ibgdaHeaderText(typedefV2), "v2", nil},
		{"v2 over lines, with comments", "typedef   nvshmemi_ibgda_device_state_v2 /* the new order */\n\tnvshmemi_ibgda_device_state_t ;  // QP-major\n", "v2", nil},
		{"a commented-out typedef is not one", "// " + typedefV2 + "\n/* " + typedefV2 + "\n */\n" + typedefV1 + "\n", "v1", nil},
		{"the plain struct before the versioned ones", "typedef struct {\n    int num_rc_per_pe;\n} nvshmemi_ibgda_device_state_t;\n", "v1", nil},
		{"two typedefs", "#if NEW\n" + typedefV2 + "\n#else\n" + typedefV1 + "\n#endif\n", "", []string{"undecided", "2 definitions", "line 2 (v2)", "line 4 (v1)"}},
		{"none", "typedef struct { int x; } something_else_t;\n", "", []string{"undecided", "no typedef of nvshmemi_ibgda_device_state_t"}},
		{"an unknown form", "\ntypedef struct nvshmemi_ibgda_device_state_v3 nvshmemi_ibgda_device_state_t;\n", "", []string{"line 2", "undecided", "does not know"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseRCLayout([]byte(c.src))
			if got != c.want {
				t.Errorf("layout %q, want %q (%v)", got, c.want, err)
			}
			if (err != nil) != (c.err != nil) {
				t.Fatalf("error %v", err)
			}
			for _, w := range c.err {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q: %v", w, err)
				}
			}
		})
	}
}

// writeNVSHMEMInclude lays out an installed NVSHMEM's include/ under dir: the IBGDA
// header with typedef (none: no header) and nvshmem_version.h of version.
func writeNVSHMEMInclude(t *testing.T, dir, typedef string, version [3]string) string {
	t.Helper()
	inc := filepath.Join(dir, "include")
	files := map[string]string{filepath.Join(inc, "non_abi", "nvshmem_version.h"): versionHeaderText(version[0], version[1], version[2])}
	if typedef != "" {
		files[filepath.Join(inc, "device_host_transport", "nvshmem_common_ibgda.h")] = ibgdaHeaderText(typedef)
	}
	for p, body := range files {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return inc
}

func TestNVSHMEMIncludeFacts(t *testing.T) {
	inc := writeNVSHMEMInclude(t, t.TempDir(), typedefV2, [3]string{"3", "5", "0"})
	facts, notes := nvshmemIncludeFacts(inc)
	if facts[manifest.FactRCLayout] != "v2" || facts[manifest.FactHeaderVersion] != "3.5.0" || notes != nil {
		t.Errorf("facts %v, notes %v", facts, notes)
	}
	// no IBGDA header: the layout is unset, and the note says why
	inc = writeNVSHMEMInclude(t, t.TempDir(), "", [3]string{"3", "2", "5"})
	facts, notes = nvshmemIncludeFacts(inc)
	if _, ok := facts[manifest.FactRCLayout]; ok || facts[manifest.FactHeaderVersion] != "3.2.5" || !strings.Contains(notes[manifest.FactRCLayout], "no IBGDA header") {
		t.Errorf("no IBGDA header: facts %v, notes %v", facts, notes)
	}
	// two typedefs: undecided, naming the file
	inc = writeNVSHMEMInclude(t, t.TempDir(), typedefV1+"\n"+typedefV2, [3]string{"3", "5", "0"})
	facts, notes = nvshmemIncludeFacts(inc)
	hdr := filepath.Join(inc, "device_host_transport", "nvshmem_common_ibgda.h")
	if _, ok := facts[manifest.FactRCLayout]; ok || !strings.Contains(notes[manifest.FactRCLayout], hdr) || !strings.Contains(notes[manifest.FactRCLayout], "undecided") {
		t.Errorf("two typedefs: facts %v, notes %v", facts, notes)
	}
	// a FIFO in the header's place is an error naming it, not a hang
	inc = writeNVSHMEMInclude(t, t.TempDir(), "", [3]string{"3", "5", "0"})
	fifo := filepath.Join(inc, "device_host_transport", "nvshmem_common_ibgda.h")
	if err := os.MkdirAll(filepath.Dir(fifo), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, notes = nvshmemIncludeFacts(inc); !strings.Contains(notes[manifest.FactRCLayout], fifo) {
		t.Errorf("a FIFO: %v", notes)
	}
}

const factsRecipe = `name: facts
cluster: test
description: an NVSHMEM whose tree calls itself 3.5.0 and has the new layout
components:
  - name: nvshmem
    version: 3.5.0-0
    source: {git: {url: "URL_nvshmem", commit: COMMIT_nvshmem}}
    build:
      - command: {run: [sh, -c, 'mkdir -p "$DESTDIR$PREFIX" && cp -R include "$DESTDIR$PREFIX/"']}
    checks: [{file: include/non_abi/nvshmem_version.h}]
`

// A tree labelled 3.5.0 (no release) whose header says _v2: the build records the layout
// in the manifest, has the rules evaluated again with it, and the rules read from the
// manifest put DeepEP on the _v2 side (R3 before 29d31c0 at plan, R24 at the host), where
// the label leaves them undecided.
func TestBuildRecordsRCLayout(t *testing.T) {
	s := fixture.NewShape(t, map[string]map[string]string{"nvshmem": {
		"include/device_host_transport/nvshmem_common_ibgda.h": ibgdaHeaderText(typedefV2),
		"include/non_abi/nvshmem_version.h":                    versionHeaderText("3", "5", "0"),
	}}, factsRecipe)
	r, p := shapeRunner(t, s, 1)
	var asked map[string]string
	r.AfterBuild = func(_ context.Context, _ *toolchain.Toolchain, build map[string]string) ([]compat.Finding, error) {
		asked = build
		return nil, nil
	}
	res, err := r.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(res.Artifact)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := install.ReadArtifactManifest(context.Background(), res.Artifact, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{manifest.FactRCLayout: "v2", manifest.FactHeaderVersion: "3.5.0"}
	if !maps.Equal(m.BuildFacts, want) || m.BuildFactNotes != nil || !maps.Equal(asked, want) {
		t.Fatalf("manifest build facts %v (notes %v); the rules were asked with %v", m.BuildFacts, m.BuildFactNotes, asked)
	}

	// the manifest's facts, under a plan that pins such a tree (NVSHMEM main, 3.5.0-0)
	rules, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	h, err := compat.LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	tree := []string{"nvshmem.commit=2c7f5a37b16d74166b7dfd30014bb1de1c6aaa0a", "nvshmem.version=3.5.0-0"}
	old := plan.FactsFromPlan(fixture.PlanOf(t, "gcp-b200", append(tree, "deepep.commit=e995aa22db1f5d204e5841cc8e73c670c772494b")...))
	r3 := func(build map[string]string) *compat.Finding {
		f := old
		f.Build = build
		fs, err := compat.Evaluate(context.Background(), rules, f, compat.StagePlan, h)
		if err != nil {
			t.Fatal(err)
		}
		for i := range fs {
			if fs[i].Name() == "R3/qp-layout" {
				return &fs[i]
			}
		}
		return nil
	}
	if f := r3(nil); f == nil || !f.Unknown {
		t.Errorf("by the label alone R3 is undecided: %+v", f)
	}
	if f := r3(m.BuildFacts); f == nil || f.Unknown || f.Severity != compat.SeverityError {
		t.Errorf("with the recorded _v2, R3 holds: %+v", f)
	}
	if f := r3(map[string]string{manifest.FactRCLayout: "v1"}); f != nil {
		t.Errorf("with a recorded _v1, R3 does not hold: %+v", f)
	}
}

// A recipe that takes the NVSHMEM wheel reads the facts from the wheel's package
// (nvidia/nvshmem/include); a plan without NVSHMEM records nothing (its manifest keeps
// its bytes).
func TestBuildFactsOfTheWheel(t *testing.T) {
	p := fixture.PlanOf(t, "single-node")
	pkg := filepath.Join(t.TempDir(), "site-packages", "nvidia", "nvshmem")
	writeNVSHMEMInclude(t, pkg, typedefV1, [3]string{"3", "4", "5"})
	facts, notes := buildFacts(p, []manifest.ComponentResult{{Name: "nvshmem", Prefix: pkg}, {Name: "deepep"}})
	if facts[manifest.FactRCLayout] != "v1" || facts[manifest.FactHeaderVersion] != "3.4.5" || notes != nil {
		t.Errorf("the wheel's facts %v, notes %v", facts, notes)
	}
	if facts, notes := buildFacts(&plan.Plan{Recipe: "demo"}, []manifest.ComponentResult{{Name: "libdemo", Prefix: pkg}}); facts != nil || notes != nil {
		t.Errorf("no NVSHMEM: %v %v", facts, notes)
	}
}
