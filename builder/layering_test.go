package builder

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// layers is the house, ground floor first: a package of builder may import the packages of
// the floors below its own, never one of its floor or above (doc.go says why each stands
// where it does). A package that is on no floor fails the test until it is placed.
var layers = [][]string{
	// leaves: one job each, no other package of builder but the leaves before them
	{"quote", "check", "procgroup", "progress", "sha256x2", "sign", "embedded", "wheel",
		"benchcmp", "netbench", "host/hostfixture", "oci/ocitest", "source/gitobj", "source/dirhandle", "host/sysroot", "archive/seekable"},
	{"archive", "cache", "inspect", "host", "smoke", "acceptance", "modulefile"},
	{"disk", "diff", "sbom", "source"},
	// what a build will be, and where its stages are kept
	{"plan", "store"},
	// the sources a set of plans needs, written out for a builder without network
	{"mirror"},
	// what the build host offers a plan
	{"toolchain"},
	// what a build and an install leave on record
	{"manifest"},
	// the environment of a build's products; the fixtures the tests of builder's packages
	// share (only tests import them)
	{"envsh", "internal/fixture"},
	// what is checked of a build and an install, and what a cache holds
	{"cachegc", "verify"},
	// an artifact put in place and checked; the tests an install carries
	{"install"},
	// an artifact written from staged prefixes, what lies beside it, where it is published
	{"pack"},
	// the stage runner: patch, build, check, package, each through the store
	{"stage"},
	// the matrix run: each cell built (by a function the pipeline gives), installed, tested
	{"matrix"},
	// the pipeline: Open/Job, the stages' order and policy
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

// maxPackageLines bounds the hand-written Go of one package of builder: past it, a package
// holds more than one room, and the next one that stands alone moves out (as the git
// object store left builder/source for builder/source/gitobj).
const maxPackageLines = 3000

// TestPackagesStaySmall fails when a package under builder has more than maxPackageLines
// lines of Go, its tests and generated files not counted, files for other systems counted
// (they are the package's code too).
func TestPackagesStaySmall(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{.Dir}}|{{join .GoFiles ","}},{{join .CgoFiles ","}},{{join .IgnoredGoFiles ","}}`, module+"/builder/...").Output()
	if err != nil {
		t.Fatalf("go list the packages of builder: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, rest, _ := strings.Cut(line, "|")
		dir, files, _ := strings.Cut(rest, "|")
		n := 0
		for _, f := range strings.Split(files, ",") {
			if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil {
				t.Fatalf("%s: %v", pkg, err)
			}
			if isGenerated(b) {
				continue
			}
			n += bytes.Count(b, []byte("\n"))
		}
		if n > maxPackageLines {
			t.Errorf("%s has %d lines of Go (tests and generated files aside), more than %d: move the next room that stands alone into a package of its own, its doc saying what it owns and may not touch", strings.TrimPrefix(pkg, module+"/"), n, maxPackageLines)
		}
	}
}

// isGenerated says whether a Go file says it is generated, as go generate marks one.
func isGenerated(b []byte) bool {
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "package ") {
			return false
		}
		if strings.HasPrefix(l, "// Code generated ") && strings.HasSuffix(strings.TrimSpace(l), " DO NOT EDIT.") {
			return true
		}
	}
	return false
}
