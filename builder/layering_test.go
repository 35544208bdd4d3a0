package builder

import (
	"os/exec"
	"strings"
	"testing"
)

// layers is the house, ground floor first: a package of builder may import the packages of
// the floors below its own, never one of its floor or above (doc.go says why each stands
// where it does). A package that is on no floor fails the test until it is placed.
var layers = [][]string{
	// leaves: one job each, no other package of builder but the leaves before them
	{"quote", "check", "procgroup", "progress", "sha256x2", "sign", "embedded", "wheel",
		"benchcmp", "netbench", "host/hostfixture", "oci/ocitest"},
	{"archive", "cache", "inspect", "host", "smoke", "acceptance", "modulefile"},
	{"disk", "diff", "sbom", "source"},
	// what a build will be, and where its stages are kept
	{"plan", "store"},
	// what the build host offers a plan; the fixtures the tests of builder and verify share
	{"toolchain", "internal/fixture"},
	// what a build and an install leave on record
	{"manifest"},
	{"envsh"},
	// what is checked of a build and an install, and what a cache holds
	{"cachegc", "verify"},
	// the pipeline: Open/Job and the stages not yet moved out of it
	{""},
	// the pipeline's users beside the command line
	{"drift", "fleet", "oci"},
}

const module = "github.com/epbuild/epbuild"

// TestImportsRunOneWay fails when a package of builder imports one on its own floor or
// above, or when recipes, patches or compat import builder beyond its leaves.
func TestImportsRunOneWay(t *testing.T) {
	floor := map[string]int{}
	for i, names := range layers {
		for _, n := range names {
			p := module + "/builder"
			if n != "" {
				p += "/" + n
			}
			floor[p] = i
		}
	}
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"/...").Output()
	if err != nil {
		t.Fatalf("go list the module's packages: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		inBuilder := pkg == module+"/builder" || strings.HasPrefix(pkg, module+"/builder/")
		if !inBuilder {
			if strings.HasPrefix(pkg, module+"/cmd/") {
				continue
			}
			for _, imp := range imports {
				if g, ok := floor[imp]; ok && g == 0 {
					continue // a leaf (builder/quote) serves the whole module
				}
				if imp == module+"/builder" || strings.HasPrefix(imp, module+"/builder/") {
					t.Errorf("%s imports %s: only the command line and builder's own packages may", pkg, imp)
				}
			}
			continue
		}
		f, ok := floor[pkg]
		if !ok {
			t.Errorf("%s is on no floor: add it to layers in layering_test.go and say why in doc.go", pkg)
			continue
		}
		for _, imp := range imports {
			g, ok := floor[imp]
			if ok && g >= f {
				t.Errorf("%s (floor %d) imports %s (floor %d): imports run downward only", pkg, f, imp, g)
			}
		}
	}
}
