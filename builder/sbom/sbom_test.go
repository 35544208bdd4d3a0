package sbom_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/charmbracelet/log"
	"github.com/package-url/packageurl-go"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/sbom"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/patches"
	"github.com/epbuild/epbuild/recipes"
	"github.com/epbuild/epbuild/recipes/lock"
)

const bomSchemaID = "http://cyclonedx.org/schema/bom-1.6.schema.json"

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

// cyclonedx is the official CycloneDX 1.6 JSON schema (testdata/cyclonedx, with the SPDX
// and JSF schemas it refers to), formats asserted.
func cyclonedx(t *testing.T) *jsonschema.Schema {
	t.Helper()
	schemaOnce.Do(func() {
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		for _, f := range []string{"bom-1.6.schema.json", "spdx.schema.json", "jsf-0.82.schema.json"} {
			b, err := os.ReadFile(filepath.Join("testdata", "cyclonedx", f))
			if err != nil {
				schemaErr = err
				return
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
			if err != nil {
				schemaErr = fmt.Errorf("%s: %w", f, err)
				return
			}
			if err := c.AddResource("http://cyclonedx.org/schema/"+f, doc); err != nil {
				schemaErr = err
				return
			}
		}
		schema, schemaErr = c.Compile(bomSchemaID)
	})
	if schemaErr != nil {
		t.Fatalf("compile the CycloneDX schema: %v", schemaErr)
	}
	return schema
}

func validate(t *testing.T, b []byte) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	if err := cyclonedx(t).Validate(doc); err != nil {
		return fmt.Errorf("%#v", err) // the whole tree of what failed where
	}
	return nil
}

// inputFor is what a manifest of plan p would hold: every patch applied with a digest.
func inputFor(p *plan.Plan) sbom.Input {
	in := sbom.Input{Plan: p, Patches: map[string][]*patches.SetResult{}, Python: map[string]string{},
		Artifact: p.Recipe + ".tar.zst", ArtifactSHA256: strings.Repeat("ab", 32), BuiltBy: "1.0.0", Tool: "1.0.1", SourceDateEpoch: 1700000000,
		Toolchain:  []sbom.Tool{{Name: "gcc", Version: "13.3.0"}, {Name: "cuda", Version: "13.0", Path: "/usr/local/cuda/bin/nvcc"}, {Name: "torch", Version: "2.11.0+cu130", Package: true}},
		Properties: []sbom.Property{{Name: "epbuild:toolchain:os", Value: "linux"}}}
	for i, c := range p.Components {
		for _, s := range c.PatchSets {
			r := &patches.SetResult{Set: s.Name, Written: true}
			for j, pt := range s.Patches {
				r.Patches = append(r.Patches, patches.PatchResult{Name: pt.Name, Kind: pt.Kind(), Digest: fmt.Sprintf("%064x", i*100+j), Status: "applied"})
			}
			in.Patches[c.Name] = append(in.Patches[c.Name], r)
		}
		if c.Source.Python != nil {
			in.Python[c.Source.Python.Package] = "3.4.5"
			continue
		}
		in.Files = append(in.Files,
			archive.Entry{Path: c.Name, Type: archive.TypeDir, Mode: 0o755},
			archive.Entry{Path: c.Name + "/lib/lib" + c.Name + ".so", Type: archive.TypeFile, Mode: 0o755, Size: 3, SHA256: fmt.Sprintf("%064x", i+1)})
	}
	in.Files = append(in.Files, archive.Entry{Path: "env.sh", Type: archive.TypeFile, Mode: 0o755, Size: 1, SHA256: strings.Repeat("0", 64)})
	return in
}

// TestRecipesSBOMValid: the SBOM of every shipped recipe's plan is valid CycloneDX 1.6,
// with each pin, patch digest and pedigree where the recipe has them.
func TestRecipesSBOMValid(t *testing.T) {
	lib := recipes.NewLibrary()
	res, err := plan.NewResolver(lib)
	if err != nil {
		t.Fatal(err)
	}
	names, err := lib.Names()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, name := range names {
		p, err := res.Resolve(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		bom, err := sbom.Build(inputFor(p))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := bom.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := validate(t, b); err != nil {
			t.Errorf("%s: the SBOM is not valid CycloneDX 1.6: %v", name, err)
			continue
		}
		if again, _ := sbom.Build(inputFor(p)); again == nil || !bytes.Equal(must(again.Marshal()), b) {
			t.Errorf("%s: two SBOMs of one input differ", name)
		}
		for _, c := range *bom.Components {
			if c.Type == cdx.ComponentTypeFile {
				continue
			}
			switch {
			case strings.HasPrefix(c.PackageURL, "pkg:github/"):
				seen["github"] = true
			case strings.Contains(c.PackageURL, "download_url="):
				seen["archive"] = true
			case strings.HasPrefix(c.PackageURL, "pkg:pypi/"):
				seen["pypi"] = true
			case strings.Contains(c.PackageURL, "vcs_url="):
				seen["vcs"] = true
			default:
				t.Errorf("%s: component %s has no pin: %q", name, c.Name, c.PackageURL)
			}
			if c.Pedigree != nil {
				for _, pt := range *c.Pedigree.Patches {
					seen["patch "+string(pt.Type)] = true
					for _, r := range *pt.Resolves {
						if r.Source != nil && strings.Contains(r.Source.URL, "/pull/") {
							seen["pull request"] = true
						}
					}
				}
			}
		}
	}
	for _, k := range []string{"github", "archive", "pypi", "vcs", "patch cherry-pick", "patch unofficial", "pull request"} {
		if !seen[k] {
			t.Errorf("no recipe gave a %s: the test covers less than it says", k)
		}
	}
}

// TestGCPB200Pedigree: the PR #466 patch of gcp-b200 is a cherry-pick of DeepEP's own
// pull request, with the diff's URL, the pull request and its digest.
func TestGCPB200Pedigree(t *testing.T) {
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve("gcp-b200", nil)
	if err != nil {
		t.Fatal(err)
	}
	in := inputFor(p)
	bom, err := sbom.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	dep := named(bom, "deepep")
	// patched: its own purl says with what; the ancestor keeps the upstream's
	upstream := "pkg:github/deepseek-ai/deepep@29d31c095796f3c8ece47ee9cdcc167051bbeed9"
	digest := in.Patches["deepep"][0].Patches[0].Digest
	sum := sha256.Sum256([]byte(digest + "\n"))
	if dep == nil || dep.PackageURL != upstream+"?epbuild.patches="+hex.EncodeToString(sum[:])[:12] {
		t.Fatalf("deepep: %+v", dep)
	}
	ped := dep.Pedigree
	if ped == nil || len(*ped.Patches) != 1 || len(*ped.Ancestors) != 1 || len(*ped.Commits) != 1 || (*ped.Ancestors)[0].PackageURL != upstream {
		t.Fatalf("pedigree: %+v", ped)
	}
	pt := (*ped.Patches)[0]
	want := "https://github.com/deepseek-ai/DeepEP/compare/29d31c095796f3c8ece47ee9cdcc167051bbeed9...8a07e7e7ed57cfc63005f670d64d410cb30b061b.diff"
	// an upstream diff is computed when applied: its URL (and its digest below), no text
	if pt.Type != cdx.PatchTypeCherryPick || pt.Diff == nil || pt.Diff.URL != want || pt.Diff.Text != nil || len(*pt.Resolves) != 1 ||
		(*pt.Resolves)[0].Source == nil || (*pt.Resolves)[0].Source.URL != "https://github.com/deepseek-ai/DeepEP/pull/466" || (*pt.Resolves)[0].ID != "466" {
		t.Errorf("patch entry: %+v %+v", pt, pt.Diff)
	}
	if !slices.Contains(*dep.Properties, sbom.Property{Name: "epbuild:patch:deepep-pr466/pr466:sha256", Value: digest}) {
		t.Errorf("no digest property: %+v", dep.Properties)
	}
	// the same input, the same bytes
	a, _ := bom.Marshal()
	bom2, _ := sbom.Build(in)
	b, _ := bom2.Marshal()
	if !bytes.Equal(a, b) {
		t.Error("two SBOMs of one input differ")
	}
}

// TestSchemaCatchesMistakes: the validator fails what CycloneDX 1.6 forbids, so a pass
// above means something.
func TestSchemaCatchesMistakes(t *testing.T) {
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve("efa-aws", nil)
	if err != nil {
		t.Fatal(err)
	}
	bom, err := sbom.Build(inputFor(p))
	if err != nil {
		t.Fatal(err)
	}
	deepep := func(b *sbom.BOM) *cdx.Component {
		c := named(b, "deepep")
		if c == nil {
			t.Fatal("no deepep component")
		}
		return c
	}
	for name, mutate := range map[string]func(b *sbom.BOM){
		"a short hash":            func(b *sbom.BOM) { (*(*deepep(b).Components)[0].Hashes)[0].Value = "abc" },
		"an unknown type":         func(b *sbom.BOM) { deepep(b).Type = "tarball" },
		"an unknown patch type":   func(b *sbom.BOM) { (*deepep(b).Pedigree.Patches)[0].Type = "hotfix" },
		"an unknown issue type":   func(b *sbom.BOM) { (*(*deepep(b).Pedigree.Patches)[0].Resolves)[0].Type = "bug" },
		"a bad serial":            func(b *sbom.BOM) { b.SerialNumber = "urn:uuid:1" },
		"a timestamp not RFC3339": func(b *sbom.BOM) { b.Metadata.Timestamp = "yesterday" },
	} {
		cp, _ := bom.Marshal()
		c := decode(t, cp)
		mutate(c)
		b, _ := c.Marshal()
		if err := validate(t, b); err == nil {
			t.Errorf("%s passed the schema", name)
		}
	}
}

// TestDemoSBOM builds the demo: the SBOM beside its artifact is valid CycloneDX 1.6,
// lists every file the manifest lists with its sha256, the wheel, each patch's digest
// and the epbuild that wrote it; epbuild sbom of the artifact and of its install give
// the same bytes.
func TestDemoSBOM(t *testing.T) {
	ctx := context.Background()
	out := t.TempDir()
	j, err := builder.Open(builder.Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: t.TempDir(), Log: log.New(io.Discard), Progress: source.ProgressOff})
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Build(ctx, builder.BuildOptions{OutDir: out, Version: "9.9.9-test", Environ: os.Environ(), Getenv: os.Getenv})
	if err != nil {
		t.Fatal(err)
	}
	if res.SBOM != res.Artifact+".cdx.json" {
		t.Fatalf("SBOM at %q", res.SBOM)
	}
	b, err := os.ReadFile(res.SBOM)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, b); err != nil {
		t.Fatalf("the demo's SBOM is not valid CycloneDX 1.6: %v", err)
	}
	bom := decode(t, b)
	if (*bom.Metadata.Tools.Components)[0].Version != "9.9.9-test" || !slices.Contains(*bom.Metadata.Component.Hashes, cdx.Hash{Algorithm: cdx.HashAlgoSHA256, Value: res.SHA256}) {
		t.Errorf("metadata: %+v", bom.Metadata)
	}
	hashes := map[string]string{}
	var walk func(*[]cdx.Component)
	walk = func(cs *[]cdx.Component) {
		if cs == nil {
			return
		}
		for _, c := range *cs {
			if c.Type == cdx.ComponentTypeFile {
				hashes[c.Name] = (*c.Hashes)[0].Value
			}
			walk(c.Components)
		}
	}
	walk(bom.Components)
	prefix := filepath.Join(t.TempDir(), "demo")
	if _, err := install.Install(ctx, install.InstallOptions{Artifact: res.Artifact, Prefix: prefix, Version: "9.9.9-test"}); err != nil {
		t.Fatal(err)
	}
	m, _, err := manifest.ReadInstalledManifest(prefix)
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, e := range m.Files {
		if e.Type == archive.TypeFile {
			files++
			if hashes[e.Path] != e.SHA256 {
				t.Errorf("%s: the SBOM says %q, the manifest %s", e.Path, hashes[e.Path], e.SHA256)
			}
		}
	}
	if w := m.Wheels[0]; hashes[pack.WheelDir(m.Plan)+"/"+w.File] != w.SHA256 {
		t.Errorf("the wheel %s is not in the SBOM with its sha256", w.File)
	}
	if len(hashes) != files+len(m.Wheels) {
		t.Errorf("the SBOM lists %d files, the manifest %d and %d wheels", len(hashes), files, len(m.Wheels))
	}
	for _, c := range m.Components {
		for _, s := range c.Patches {
			for _, pt := range s.Patches {
				if !bytes.Contains(b, []byte(fmt.Sprintf(`"name": "epbuild:patch:%s/%s:sha256",
          "value": "%s"`, s.Set, pt.Name, pt.Digest))) {
					t.Errorf("%s: patch %s/%s: no digest %s in the SBOM", c.Name, s.Set, pt.Name, pt.Digest)
				}
			}
		}
	}
	// each shipped patch file travels as its diff's text, the bytes of the repository's file
	if bom.Metadata.Supplier != nil || bom.Metadata.Authors != nil {
		t.Errorf("a supplier or authors nobody gave: %+v", bom.Metadata)
	}
	texts := 0
	for _, c := range *bom.Components {
		if c.Pedigree == nil {
			continue
		}
		if up := (*c.Pedigree.Ancestors)[0].PackageURL; !strings.Contains(c.PackageURL, "?epbuild.patches=") || strings.Contains(up, "epbuild.patches") {
			t.Errorf("%s: purl %s, ancestor %s", c.Name, c.PackageURL, up)
		}
		for _, pt := range *c.Pedigree.Patches {
			if pt.Diff == nil || pt.Diff.Text == nil || pt.Diff.Text.ContentType != "text/x-diff" {
				t.Errorf("%s: a patch without its diff: %+v", c.Name, pt)
				continue
			}
			files, _ := filepath.Glob(filepath.Join("..", "..", "patches", (*pt.Resolves)[0].Name, "*.patch"))
			want, err := os.ReadFile(files[0])
			if err != nil || pt.Diff.Text.Content != string(want) {
				t.Errorf("%s: the diff's text is not %v: %v", c.Name, files, err)
			}
			texts++
		}
	}
	if texts != 2 {
		t.Errorf("%d diffs carried, want the demo's 2", texts)
	}
	// the supplier and authors given to epbuild sbom
	credited, err := pack.SBOM(ctx, res.Artifact, "9.9.9-test", pack.SBOMCredits{Supplier: "ACME HPC \"ops\"", Authors: []string{"Site Team", "Ana"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(t, credited); err != nil {
		t.Errorf("the SBOM with a supplier is not valid CycloneDX 1.6: %v", err)
	}
	if cb := decode(t, credited); cb.Metadata.Supplier == nil || cb.Metadata.Supplier.Name != "ACME HPC \"ops\"" ||
		cb.Metadata.Authors == nil || len(*cb.Metadata.Authors) != 2 || (*cb.Metadata.Authors)[1].Name != "Ana" {
		t.Errorf("supplier and authors: %+v", cb.Metadata)
	}
	for _, from := range []string{res.Artifact, prefix} {
		got, err := pack.SBOM(ctx, from, "9.9.9-test", pack.SBOMCredits{})
		if err != nil {
			t.Fatal(err)
		}
		// but for the epbuild that built it: the manifest no longer records it, only the
		// SBOM written beside the artifact knows it (docs/reproducible.md)
		if !bytes.Equal(got, withoutBuiltBy(t, b)) {
			t.Errorf("epbuild sbom %s differs from the SBOM beside the artifact:\n%s", from, got)
		}
	}
}

// TestPatchDiffText: a patch's bytes, when epbuild has them, are its diff's text (UTF-8
// as it is, anything else base64), up to MaxDiffBytes; past that the BOM names the
// patch by its digest alone. Valid CycloneDX 1.6 every way.
func TestPatchDiffText(t *testing.T) {
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve("demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		diff     []byte
		encoding string
		text     bool
	}{
		"text":       {[]byte("diff --git a/x b/x\n"), "", true},
		"not UTF-8":  {[]byte("diff --git a/x b/x\n\xff\xfe\n"), "base64", true},
		"at the cap": {bytes.Repeat([]byte("+"), sbom.MaxDiffBytes), "", true},
		"too large":  {bytes.Repeat([]byte("+"), sbom.MaxDiffBytes+1), "", false},
	} {
		in := inputFor(p)
		in.PatchDiffs = map[string][]byte{in.Patches["libdemo"][0].Patches[0].Digest: tc.diff}
		bom, err := sbom.Build(in)
		if err != nil {
			t.Fatal(err)
		}
		d := (*named(bom, "libdemo").Pedigree.Patches)[0].Diff
		switch {
		case !tc.text && d != nil && d.Text != nil:
			t.Errorf("%s: carried whole", name)
		case tc.text && (d == nil || d.Text == nil || d.Text.Encoding != tc.encoding):
			t.Errorf("%s: %+v", name, d)
		case tc.text && tc.encoding == "" && d.Text.Content != string(tc.diff):
			t.Errorf("%s: the text is not the patch", name)
		}
		b, _ := bom.Marshal()
		if err := validate(t, b); err != nil {
			t.Errorf("%s: not valid CycloneDX 1.6: %v", name, err)
		}
	}
}

// withoutBuiltBy is the BOM b without its epbuild:built-by property.
func withoutBuiltBy(t *testing.T, b []byte) []byte {
	t.Helper()
	bom := decode(t, b)
	props := *bom.Metadata.Properties
	n := len(props)
	props = slices.DeleteFunc(props, func(p sbom.Property) bool { return p.Name == "epbuild:built-by" })
	bom.Metadata.Properties = &props
	if len(props) != n-1 {
		t.Errorf("the SBOM beside the artifact does not name the epbuild that built it")
	}
	out, err := bom.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decode reads a BOM written by Marshal with the library's decoder.
func decode(t *testing.T, b []byte) *sbom.BOM {
	t.Helper()
	var bom cdx.BOM
	if err := cdx.NewBOMDecoder(bytes.NewReader(b), cdx.BOMFileFormatJSON).Decode(&bom); err != nil {
		t.Fatal(err)
	}
	return &sbom.BOM{BOM: &bom}
}

// named is the top-level component name of b, or nil.
func named(b *sbom.BOM, name string) *cdx.Component {
	for i, c := range *b.Components {
		if c.Name == name {
			return &(*b.Components)[i]
		}
	}
	return nil
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestPURLs: each kind of pin is a purl in the specification's canonical form, which
// the purl library parses back to what was pinned: a GitHub owner and repository
// lowercased, a PyPI name lowercased with '_' as '-' (a '.' stays: the purl
// specification's rule, not PEP 503's), a '+' of a version percent-encoded, qualifiers
// sorted, their ':' kept and every other reserved character encoded.
func TestPURLs(t *testing.T) {
	commit, sum := strings.Repeat("1f", 20), strings.Repeat("e3", 32)
	comp := func(name, version string, src recipes.Source) lock.Component {
		return lock.Component{Component: recipes.Component{Name: name, Version: version, Source: src}}
	}
	in := sbom.Input{
		Plan: &lock.Plan{Recipe: "r", Key: strings.Repeat("c", 64), Components: []lock.Component{
			comp("gh", "", recipes.Source{Git: &recipes.GitSource{URL: "https://github.com/DeepSeek-AI/DeepEP.git", Commit: commit}}),
			comp("other", "1.0+local", recipes.Source{Git: &recipes.GitSource{URL: "https://git.example.org/a/b.git", Commit: commit}}),
			comp("tar", "3.2.5-1", recipes.Source{Archive: &recipes.ArchiveSource{URL: "https://example.org/x/src 3.2.5-1.txz?a=b&c=d", SHA256: sum}}),
			comp("py", "", recipes.Source{Python: &recipes.PythonSource{Package: "NVIDIA_NCCL_cu12"}}),
		}},
		Python:    map[string]string{"NVIDIA_NCCL_cu12": "2.27.3+cuda12.9"},
		Toolchain: []sbom.Tool{{Name: "Torch_Vision", Version: "0.26.0+cu130", Package: true}, {Name: "zope.interface", Version: "7.0", Package: true}},
	}
	bom, err := sbom.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, c := range *bom.Components {
		got[c.BOMRef] = c.PackageURL
	}
	for _, c := range *(*bom.Formulation)[0].Components {
		got[c.BOMRef] = c.PackageURL
	}
	for ref, want := range map[string]struct {
		purl                 string
		name, version, quals string
	}{
		"component:gh": {"pkg:github/deepseek-ai/deepep@" + commit, "deepep", commit, ""},
		"component:other": {"pkg:generic/other@1.0%2Blocal?vcs_url=git%2Bhttps:%2F%2Fgit.example.org%2Fa%2Fb.git%40" + commit,
			"other", "1.0+local", "vcs_url=git+https://git.example.org/a/b.git@" + commit},
		"component:tar": {"pkg:generic/tar@3.2.5-1?checksum=sha256:" + sum + "&download_url=https:%2F%2Fexample.org%2Fx%2Fsrc%203.2.5-1.txz%3Fa%3Db%26c%3Dd",
			"tar", "3.2.5-1", "checksum=sha256:" + sum + " download_url=https://example.org/x/src 3.2.5-1.txz?a=b&c=d"},
		"component:py":             {"pkg:pypi/nvidia-nccl-cu12@2.27.3%2Bcuda12.9", "nvidia-nccl-cu12", "2.27.3+cuda12.9", ""},
		"tool:pypi:Torch_Vision":   {"pkg:pypi/torch-vision@0.26.0%2Bcu130", "torch-vision", "0.26.0+cu130", ""},
		"tool:pypi:zope.interface": {"pkg:pypi/zope.interface@7.0", "zope.interface", "7.0", ""},
	} {
		if got[ref] != want.purl {
			t.Errorf("%s: purl %q, want %q", ref, got[ref], want.purl)
			continue
		}
		p, err := packageurl.FromString(got[ref])
		var quals []string
		for _, q := range p.Qualifiers {
			quals = append(quals, q.Key+"="+q.Value)
		}
		if err != nil || p.Name != want.name || p.Version != want.version || strings.Join(quals, " ") != want.quals {
			t.Errorf("%s: %s parses as %+v (%v)", ref, got[ref], p, err)
		}
	}
}

// TestHostileStrings: what a recipe, manifest or the command line gives stays data in
// the JSON (quotes, markup, newlines, escape sequences, line separators), the document
// stays valid CycloneDX 1.6 and reads back to the same strings, and the same input gives
// the same bytes.
func TestHostileStrings(t *testing.T) {
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve("demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	const bad = "\"</script><b>&amp;\\\n\r\t\x00\x1b[31m\u2028\u2029\u202e$(id)`id`'"
	in := inputFor(p)
	in.Supplier, in.Authors, in.Artifact = bad, []string{bad, "x" + bad}, bad+".tar.zst"
	in.Toolchain = append(in.Toolchain, sbom.Tool{Name: "cc", Version: bad, Path: bad})
	in.Properties = append(in.Properties, sbom.Property{Name: "epbuild:toolchain:os", Value: bad})
	bom, err := sbom.Build(in)
	if err != nil {
		t.Fatal(err)
	}
	b := must(bom.Marshal())
	if again, err := sbom.Build(in); err != nil || !bytes.Equal(must(again.Marshal()), b) {
		t.Error("two SBOMs of one input differ")
	}
	for _, raw := range []string{"</script>", "<b>", "\x00", "\x1b", "\u2028", "\u2029", bad} {
		if bytes.Contains(b, []byte(raw)) {
			t.Errorf("%q is in the JSON as it is", raw)
		}
	}
	if err := validate(t, b); err != nil {
		t.Fatalf("not valid CycloneDX 1.6: %v", err)
	}
	back := decode(t, b)
	m := back.Metadata
	tools := *(*back.Formulation)[0].Components
	cc := tools[len(tools)-1]
	if m.Supplier.Name != bad || (*m.Authors)[0].Name != bad || (*m.Authors)[1].Name != "x"+bad ||
		!slices.Contains(*m.Component.Properties, sbom.Property{Name: "epbuild:artifact", Value: bad + ".tar.zst"}) ||
		cc.Version != bad || (*cc.Properties)[0].Value != bad ||
		!slices.Contains(*(*back.Formulation)[0].Properties, sbom.Property{Name: "epbuild:toolchain:os", Value: bad}) {
		t.Errorf("the strings did not come back as given: %+v %+v", m, cc)
	}
}
