package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"

	"github.com/epbuild/epbuild/builder/sbom"
)

// TestSBOMCLI: epbuild sbom of the artifact and of its install print the SBOM epbuild
// recipe wrote beside the artifact; a damaged artifact and a directory with no install
// are bad input.
func TestSBOMCLI(t *testing.T) {
	art := demoArtifact(t)
	want, err := os.ReadFile(art + ".cdx.json")
	if err != nil {
		t.Fatalf("epbuild recipe wrote no SBOM beside the artifact: %v", err)
	}
	if !strings.Contains(string(want), `"specVersion": "1.6"`) {
		t.Fatalf("not a CycloneDX 1.6 document:\n%.400s", want)
	}
	// epbuild sbom writes it again from the manifest, which does not name the epbuild that
	// built the artifact: all of it but that
	var doc cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(want), cdx.BOMFileFormatJSON).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	props := slices.DeleteFunc(*doc.Metadata.Properties, func(p sbom.Property) bool { return p.Name == "epbuild:built-by" })
	doc.Metadata.Properties = &props
	if want, err = (sbom.BOM{BOM: &doc}).Marshal(); err != nil {
		t.Fatal(err)
	}
	env := nodeEnv()
	prefix := pristineInstall(t)
	for _, from := range []string{art, prefix} {
		code, out, errs := run(t, env, "sbom", from)
		if code != 0 || out != string(want) {
			t.Errorf("sbom %s: exit %d, %d bytes (want %d)\n%s", from, code, len(out), len(want), errs)
		}
	}
	file := filepath.Join(t.TempDir(), "x.cdx.json")
	if code, _, errs := run(t, env, "sbom", prefix, "-o", file); code != 0 {
		t.Fatalf("sbom -o: exit %d %s", code, errs)
	}
	if got, _ := os.ReadFile(file); string(got) != string(want) {
		t.Error("sbom -o wrote another document")
	}
	// the supplier and authors given, none by default
	code, out, errs := run(t, env, "sbom", art, "--supplier", "ACME HPC", "--author", "Site Team", "--author", "Ana")
	var cb cdx.BOM
	if err := cdx.NewBOMDecoder(strings.NewReader(out), cdx.BOMFileFormatJSON).Decode(&cb); code != 0 || err != nil || cb.Metadata.Supplier == nil ||
		cb.Metadata.Supplier.Name != "ACME HPC" || cb.Metadata.Authors == nil || len(*cb.Metadata.Authors) != 2 || (*cb.Metadata.Authors)[0].Name != "Site Team" {
		t.Errorf("sbom --supplier --author: exit %d %v %+v\n%s", code, err, cb.Metadata, errs)
	}
	if strings.Contains(string(want), `"supplier"`) || strings.Contains(string(want), `"authors"`) {
		t.Error("a supplier or authors nobody gave")
	}
	// a copy whose .sha256 does not match, a directory with no install, nothing at all
	bad := filepath.Join(t.TempDir(), filepath.Base(art))
	b, _ := os.ReadFile(art)
	if err := os.WriteFile(bad, b[:len(b)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	sum, _ := os.ReadFile(art + ".sha256")
	if err := os.WriteFile(bad+".sha256", sum, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, arg := range []string{bad, t.TempDir(), filepath.Join(t.TempDir(), "none")} {
		if code, _, errs := run(t, env, "sbom", arg); code != exitBadInput || errs == "" {
			t.Errorf("sbom %s: exit %d, want %d: %s", arg, code, exitBadInput, errs)
		}
	}
}
