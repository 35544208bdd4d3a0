package inspect

import (
	"github.com/epbuild/epbuild/builder/check"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func entry(arch string) CodeEntry {
	unknown := strings.HasSuffix(arch, "?")
	t, err := ParseTarget(strings.TrimSuffix(arch, "?"))
	if err != nil {
		panic(err)
	}
	e := CodeEntry{Kind: KindCubin, SM: t.SM, Variant: t.Variant, Arch: arch}
	if t.PTX {
		e.Kind = KindPTX
	}
	if unknown {
		e.Variant, e.Note = VariantUnknown, "no evidence"
	}
	return e
}

func infoOf(archs ...string) *ArchInfo {
	a := &ArchInfo{Path: "/prefix/lib/x.so"}
	for _, s := range archs {
		a.Entries = append(a.Entries, entry(s))
	}
	return a
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]Target{
		"sm_90":       {SM: 90, Variant: VariantBase},
		"sm_90a":      {SM: 90, Variant: VariantArch},
		"sm_100f":     {SM: 100, Variant: VariantFamily},
		"compute_90":  {PTX: true, SM: 90, Variant: VariantBase},
		"compute_90a": {PTX: true, SM: 90, Variant: VariantArch},
	} {
		got, err := ParseTarget(in)
		if err != nil || got != want {
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), in)
		}
	}
	for _, bad := range []string{"90a", "sm90", "sm_90b", "compute_", "SM_90", "sm_9"} {
		if _, err := ParseTarget(bad); err == nil {
			t.Errorf("ParseTarget(%q): no error", bad)
		}
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		have      []string
		target    string
		by        []string
		jit       bool
		uncertain bool
	}{
		// A base cubin runs on later minors of its major only.
		{have: []string{"sm_80"}, target: "sm_86", by: []string{"sm_80"}},
		{have: []string{"sm_80"}, target: "sm_90"},
		{have: []string{"sm_86"}, target: "sm_80"},
		// An "a" cubin runs on exactly its SM, and only it gives "a" features.
		{have: []string{"sm_90a"}, target: "sm_90", by: []string{"sm_90a"}},
		{have: []string{"sm_90a"}, target: "sm_90a", by: []string{"sm_90a"}},
		{have: []string{"sm_90"}, target: "sm_90a"},
		{have: []string{"sm_90a"}, target: "sm_100"},
		// "f" runs on later SMs of its family, not across families.
		{have: []string{"sm_100f"}, target: "sm_103", by: []string{"sm_100f"}},
		{have: []string{"sm_100f"}, target: "sm_103f", by: []string{"sm_100f"}},
		{have: []string{"sm_100f"}, target: "sm_120"},
		{have: []string{"sm_100f"}, target: "sm_100a"},
		{have: []string{"sm_100a"}, target: "sm_100f"},
		{have: []string{"sm_101f"}, target: "sm_103"},
		// PTX: the driver JITs base PTX for any later SM; cubins are preferred.
		{have: []string{"compute_80"}, target: "sm_90", by: []string{"compute_80"}, jit: true},
		{have: []string{"compute_80", "sm_90"}, target: "sm_90", by: []string{"sm_90"}},
		{have: []string{"compute_90a"}, target: "sm_90a", by: []string{"compute_90a"}, jit: true},
		{have: []string{"compute_90a"}, target: "sm_100"},
		{have: []string{"compute_100"}, target: "sm_90"},
		// Virtual targets need that exact PTX.
		{have: []string{"compute_90"}, target: "compute_90", by: []string{"compute_90"}},
		{have: []string{"sm_90"}, target: "compute_90"},
		{have: []string{"compute_80"}, target: "compute_90"},
		// Unknown variants never satisfy, but are reported.
		{have: []string{"sm_90?"}, target: "sm_90a", uncertain: true},
		{have: []string{"sm_90?"}, target: "sm_90", uncertain: true},
		{have: []string{"sm_90?"}, target: "sm_100"},
	}
	for _, tt := range tests {
		c, err := infoOf(tt.have...).Covers(tt.target)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(c.By, tt.by) || c.JIT != tt.jit || (len(c.Uncertain) > 0) != tt.uncertain {
			t.Errorf("%v covers %s: got %+v; want by=%v jit=%v uncertain=%v", tt.have, tt.target, c, tt.by, tt.jit, tt.uncertain)
		}
	}
	if _, err := infoOf("sm_90").Covers("hopper"); err == nil {
		t.Error("Covers(hopper): no error")
	}
}

func TestArchInfoCheck(t *testing.T) {
	tests := []struct {
		have   []string
		want   []string
		status check.Status
		why    string
	}{
		{[]string{"sm_90a", "sm_100a"}, []string{"sm_90a", "sm_100"}, check.Pass, ""},
		{[]string{"sm_90a", "compute_90"}, []string{"sm_90a", "sm_100"}, check.Warn, "JIT"},
		{[]string{"sm_90?"}, []string{"sm_90a"}, check.Warn, "unknown variant"},
		{[]string{"sm_90a", "compute_90"}, []string{"sm_90a", "sm_100a"}, check.Fail, "sm_100a: no cubin or PTX"},
		{[]string{"sm_90"}, []string{"sm_90a", "sm_100"}, check.Fail, "sm_90a"},
		{[]string{"sm_90"}, []string{"sm_90", "bogus"}, check.Fail, "bogus"},
		// A failure is not softened by a later warning.
		{[]string{"compute_90"}, []string{"sm_100a", "sm_100"}, check.Fail, "JIT"},
	}
	for _, tt := range tests {
		r := infoOf(tt.have...).Check(tt.want, false)
		if r.Status != tt.status || !strings.Contains(r.Why, tt.why) {
			t.Errorf("%v want %v: %+v; want status %s, why containing %q", tt.have, tt.want, r, tt.status, tt.why)
		}
		if r.ID != "cuda.archs:x.so" || !strings.Contains(r.Expected, strings.Join(tt.want, ", ")) {
			t.Errorf("ID/Expected: %+v", r)
		}
	}
}

func TestCheckArchsFile(t *testing.T) {
	dir := t.TempDir()
	so := sharedObjectWith(t, dir, "libdeep", SectionFatbin, syntheticFatbin(t, false))
	if r := CheckArchs(so, []string{"sm_90a", "sm_100a", "sm_100f"}, false); r.Status != check.Pass {
		t.Errorf("pass case: %+v", r)
	}
	if r := CheckArchs(so, []string{"sm_120"}, false); r.Status != check.Warn || !strings.Contains(r.Why, "compute_90") {
		t.Errorf("sm_120 only through PTX: %+v", r)
	}
	if r := CheckArchs(so, []string{"sm_120"}, true); r.Status != check.Fail || !strings.Contains(r.Why, "native: true") {
		t.Errorf("sm_120 only through PTX, machine code wanted: %+v", r)
	}
	if r := CheckArchs(so, []string{"sm_90a", "sm_100a"}, true); r.Status != check.Pass {
		t.Errorf("machine code for each: %+v", r)
	}
	if r := CheckArchs(so, []string{"sm_120a"}, false); r.Status != check.Fail {
		t.Errorf("sm_120a is not in the file: %+v", r)
	}
	if r := CheckArchs(filepath.Join(dir, "absent.so"), []string{"sm_90"}, false); r.Status != check.Fail || r.Why == "" {
		t.Errorf("unreadable file: %+v", r)
	}
}
