package wheel

import (
	"strings"
	"testing"
)

// A requirement comes from a recipe (the package name) and from the build host's
// environment (the version): one that is not a name or a version never reaches the
// headers, where a newline would add a field of its own.
func TestWithRequirementsRefusesWhatIsNotARequirement(t *testing.T) {
	for _, r := range []Requirement{
		{"nvidia-nvshmem-cu13\nRequires-Dist: evil", "3.4.5"},
		{"nvidia-nvshmem-cu13", "3.4.5\nRequires-Dist: evil"},
		{"nvidia-nvshmem-cu13", "3.4.5; python_version < '3'"},
		{"nvidia nvshmem", "3.4.5"},
		{"-nvshmem", "3.4.5"},
		{"nvidia-nvshmem-cu13", ""},
	} {
		m := &metadata{Headers: []header{{"Name", "deep-ep"}, {"Version", "1.0"}}}
		if err := withRequirements(m, []Requirement{r}); err == nil {
			t.Errorf("%q==%q: taken: %s", r.Name, r.Version, m.bytes())
		}
	}
	m := &metadata{Headers: []header{{"Name", "deep-ep"}, {"Version", "1.0"}, {"Requires-Dist", "Nvidia_NVSHMEM.cu13 (>=3.3)"}, {"Summary", "s"}}}
	if err := withRequirements(m, []Requirement{{"nvidia-nvshmem-cu13", "3.4.5+cu13.post1"}, {"nvidia-nvshmem-cu13", "3.4.5+cu13.post1"}}); err != nil {
		t.Fatal(err)
	}
	if got, want := string(m.bytes()), "Name: deep-ep\nVersion: 1.0\nRequires-Dist: nvidia-nvshmem-cu13==3.4.5+cu13.post1\nSummary: s\n"; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, strings.TrimSpace(want))
	}
}
