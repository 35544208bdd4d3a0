// Package sbom writes a CycloneDX 1.6 software bill of materials (JSON) of an epbuild
// artifact from what its manifest and receipt recorded; it derives nothing itself.
//
// The BOM describes the artifact (metadata.component: the recipe at its plan key, with
// the artifact file's sha256) and holds:
//
//   - one component per recipe component: its pin as a purl (pkg:github/OWNER/REPO@COMMIT
//     for GitHub, else pkg:generic with vcs_url or download_url and checksum, pkg:pypi for a
//     package of the Python environment), a vcs or distribution reference, and, when it was
//     patched, a pedigree: the unpatched upstream as ancestor, the pinned commit, and one
//     patch entry per patch applied (its kind, its diff's text where epbuild ships the
//     patch file, the upstream diff's URL and the pull request it comes from where known);
//     each patch's sha256 is a property epbuild:patch:SET/NAME; a patched component's purl
//     has the qualifier epbuild.patches (the upstream's purl stays on the ancestor);
//   - under each component, the files the artifact carries for it, with their sha256, and
//     the wheel made of it (beside the artifact);
//   - the dependencies between components;
//   - the toolchain that built it, as the formulation.
//
// The document is made of the CycloneDX Go library's types and written by its encoder;
// the purls are the purl library's canonical form.
package sbom

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/package-url/packageurl-go"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/patches"
	"github.com/epbuild/epbuild/recipes/lock"
)

// SpecVersion is the CycloneDX version written.
const SpecVersion = cdx.SpecVersion1_6

// schemaURL is SpecVersion's JSON schema, the document's $schema (the library fills it
// only when converting between versions, which would also mend what it deems invalid).
const schemaURL = "http://cyclonedx.org/schema/bom-1.6.schema.json"

// Input is what the manifest and the receipt recorded about one artifact.
type Input struct {
	Plan *lock.Plan
	// Patches are the patch outcomes per component (the manifest's components[].patches).
	Patches map[string][]*patches.SetResult
	// Python maps a Python-environment component's package to the version the build found.
	Python map[string]string
	// Toolchain is what built it, in a stable order.
	Toolchain []Tool
	// Files are the artifact's entries (manifest.json's files).
	Files []archive.Entry
	// Wheels are the wheels made beside the artifact.
	Wheels []Wheel
	// Artifact is the artifact's file name and sha256 (the receipt's for an install);
	// empty when unknown.
	Artifact, ArtifactSHA256 string
	// BuiltBy is the epbuild that built the artifact; Tool the one writing the BOM.
	BuiltBy, Tool   string
	SourceDateEpoch int64
	// Properties are further facts of the build (os, arch), in order.
	Properties []Property
	// PatchDiffs are the patches' bytes epbuild ships (the shipped sets' patch files), by
	// their sha256 (hex): a patch applied with these bytes carries them as its diff.
	PatchDiffs map[string][]byte
	// Supplier and Authors name who supplies the artifact and who made it (the BOM's
	// metadata.supplier and metadata.authors); none when empty.
	Supplier string
	Authors  []string
}

// MaxDiffBytes bounds a patch's diff carried in the BOM: a larger one is named by its URL
// and sha256 alone.
const MaxDiffBytes = 1 << 20

// PatchedQualifier is the purl qualifier of a patched component: the first 12 hex digits
// of the sha256 of its patches' sha256s (hex, in the order applied, one a line).
const PatchedQualifier = "epbuild.patches"

// Tool is one tool of the build host.
type Tool struct {
	Name, Version, Path string
	// Package: a Python distribution (a pkg:pypi purl).
	Package bool
}

// Wheel is a wheel made of a component.
type Wheel struct {
	Component, File, Dir, SHA256 string
	Size                         int64
}

// Property is a name-value fact (the library's).
type Property = cdx.Property

// BOM is the CycloneDX document Build makes, built of the CycloneDX library's types.
type BOM struct{ *cdx.BOM }

// serialNamespace is the UUID namespace of epbuild's BOM serial numbers (version 5
// UUIDs of the artifact's sha256 and plan key: the same artifact, the same BOM).
var serialNamespace = [16]byte{0x5b, 0x1e, 0x0c, 0x8a, 0x2f, 0x43, 0x4d, 0x6e, 0x9a, 0x71, 0x0e, 0x6d, 0x3c, 0x52, 0xb4, 0x19}

func uuid5(name string) string {
	h := sha1.New()
	h.Write(serialNamespace[:])
	h.Write([]byte(name))
	s := h.Sum(nil)[:16]
	s[6] = s[6]&0x0f | 0x50
	s[8] = s[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16])
}

// Build makes the BOM of in.
func Build(in Input) (*BOM, error) {
	p := in.Plan
	if p == nil || p.Key == "" {
		return nil, fmt.Errorf("sbom: no plan")
	}
	short := p.Key[:min(12, len(p.Key))]
	art := &cdx.Component{Type: cdx.ComponentTypeApplication, BOMRef: "artifact", Name: p.Recipe, Version: short, Description: p.Cluster}
	if in.ArtifactSHA256 != "" {
		art.Hashes = sha256Hashes(in.ArtifactSHA256)
	}
	ap := props("epbuild:plan-key", p.Key, "epbuild:artifact", in.Artifact)
	for _, o := range p.Overrides {
		ap = append(ap, Property{Name: "epbuild:override", Value: o})
	}
	art.Properties = list(ap)
	meta := &cdx.Metadata{
		Timestamp: time.Unix(in.SourceDateEpoch, 0).UTC().Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{
			{Type: cdx.ComponentTypeApplication, BOMRef: "tool:epbuild", Name: "epbuild", Version: in.Tool}}},
		Component: art,
		Properties: list(props("epbuild:version", in.Tool, "epbuild:built-by", in.BuiltBy, "epbuild:recipe", p.Recipe,
			"epbuild:source-date-epoch", strconv.FormatInt(in.SourceDateEpoch, 10))),
	}
	if in.Supplier != "" {
		meta.Supplier = &cdx.OrganizationalEntity{Name: in.Supplier}
	}
	var authors []cdx.OrganizationalContact
	for _, a := range in.Authors {
		authors = append(authors, cdx.OrganizationalContact{Name: a})
	}
	meta.Authors = list(authors)

	// components are values in the library's tree: each is filled (its files and wheel
	// included) before it is copied into the BOM
	var comps, loose []*cdx.Component
	byComp := map[string]*cdx.Component{}
	kids := map[*cdx.Component][]cdx.Component{}
	top := cdx.Dependency{Ref: art.BOMRef}
	var topDeps []string
	for _, c := range p.Components {
		comp, err := component(c, in)
		if err != nil {
			return nil, err
		}
		byComp[c.Name] = comp
		comps = append(comps, comp)
		topDeps = append(topDeps, comp.BOMRef)
	}
	top.Dependencies = list(topDeps)
	// the artifact's files, under the component whose directory holds them
	for _, e := range in.Files {
		if e.Type != archive.TypeFile {
			continue
		}
		f := cdx.Component{Type: cdx.ComponentTypeFile, BOMRef: "file:" + e.Path, Name: e.Path, Hashes: sha256Hashes(e.SHA256),
			Properties: list(props("epbuild:mode", fmt.Sprintf("%04o", e.Mode.Perm()), "epbuild:size", strconv.FormatInt(e.Size, 10)))}
		first, _, _ := strings.Cut(e.Path, "/")
		if owner, ok := byComp[first]; ok && first != e.Path {
			kids[owner] = append(kids[owner], f)
		} else {
			loose = append(loose, &f)
		}
	}
	for _, w := range in.Wheels {
		owner, ok := byComp[w.Component]
		if !ok {
			return nil, fmt.Errorf("sbom: a wheel of %s, which the plan does not have", w.Component)
		}
		name := path.Join(w.Dir, w.File)
		kids[owner] = append(kids[owner], cdx.Component{Type: cdx.ComponentTypeFile, BOMRef: "wheel:" + name, Name: name,
			Hashes: sha256Hashes(w.SHA256), Properties: list(props("epbuild:size", strconv.FormatInt(w.Size, 10), "epbuild:beside-artifact", "true"))})
	}
	var all []cdx.Component
	for _, c := range append(comps, loose...) {
		c.Components = list(kids[c])
		all = append(all, *c)
	}

	deps := []cdx.Dependency{top}
	for _, c := range p.Components {
		var on []string
		for _, dep := range c.Depends {
			if dc, ok := byComp[dep]; ok {
				on = append(on, dc.BOMRef)
			}
		}
		deps = append(deps, cdx.Dependency{Ref: byComp[c.Name].BOMRef, Dependencies: list(on)})
	}

	var tools []cdx.Component
	for _, t := range in.Toolchain {
		if t.Version == "" {
			continue
		}
		tc := cdx.Component{Type: cdx.ComponentTypeApplication, BOMRef: "tool:" + t.Name, Name: t.Name, Version: t.Version}
		if t.Package {
			pu, err := purl(packageurl.NewPackageURL(packageurl.TypePyPi, "", t.Name, t.Version, nil, ""))
			if err != nil {
				return nil, fmt.Errorf("sbom: tool %s: %w", t.Name, err)
			}
			tc.Type, tc.BOMRef, tc.PackageURL = cdx.ComponentTypeLibrary, "tool:pypi:"+t.Name, pu
		}
		if t.Path != "" {
			tc.Properties = list(props("epbuild:path", t.Path))
		}
		tools = append(tools, tc)
	}
	fp := slices.Clone(in.Properties) // the caller's slice stays as it is
	for _, r := range p.Toolchain.Arch {
		fp = append(fp, Property{Name: "epbuild:cuda-arch", Value: r})
	}

	bom := &cdx.BOM{
		JSONSchema: schemaURL, BOMFormat: cdx.BOMFormat, SpecVersion: SpecVersion,
		SerialNumber: "urn:uuid:" + uuid5(in.ArtifactSHA256+" "+p.Key), Version: 1,
		Metadata:     meta,
		Components:   list(all),
		Dependencies: &deps,
		Formulation:  &[]cdx.Formula{{BOMRef: "formulation:build", Components: list(tools), Properties: list(fp)}},
	}
	return &BOM{bom}, nil
}

// Marshal is the BOM as indented JSON with a final newline, by the library's encoder,
// which escapes every string as JSON. It writes the document as it is, at its own spec
// version: converting would mend a wrong field where the schema tests must see it.
func (b BOM) Marshal() ([]byte, error) {
	var buf bytes.Buffer
	if err := cdx.NewBOMEncoder(&buf, cdx.BOMFileFormatJSON).SetPretty(true).Encode(b.BOM); err != nil {
		return nil, fmt.Errorf("sbom: encode: %w", err)
	}
	return buf.Bytes(), nil
}

// list is s as the library's optional list: nil, so left out, when empty.
func list[T any](s []T) *[]T {
	if len(s) == 0 {
		return nil
	}
	return &s
}

func sha256Hashes(sum string) *[]cdx.Hash {
	return &[]cdx.Hash{{Algorithm: cdx.HashAlgoSHA256, Value: sum}}
}

func props(kv ...string) []Property {
	var out []Property
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			out = append(out, Property{Name: kv[i], Value: kv[i+1]})
		}
	}
	return out
}

// purl is p in the purl specification's canonical form: the type's own rules applied
// (a GitHub owner and repository, a PyPI name lowercased), qualifiers sorted, every
// part percent-encoded.
func purl(p *packageurl.PackageURL) (string, error) {
	if err := p.Normalize(); err != nil {
		return "", fmt.Errorf("purl of %s: %w", p.Name, err)
	}
	return p.ToString(), nil
}

// github splits a github.com URL into owner and repository.
func github(raw string) (owner, repo string, ok bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Host != "github.com" {
		return "", "", false
	}
	parts := strings.Split(strings.Trim(strings.TrimSuffix(u.Path, ".git"), "/"), "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

func sameRepo(a, b string) bool {
	n := func(s string) string { return strings.TrimSuffix(strings.TrimSuffix(s, "/"), ".git") }
	return n(a) == n(b)
}

func component(c lock.Component, in Input) (*cdx.Component, error) {
	comp := &cdx.Component{Type: cdx.ComponentTypeLibrary, BOMRef: "component:" + c.Name, Name: c.Name, Version: c.Version}
	var pu *packageurl.PackageURL
	var cp []Property
	s := c.Source
	switch {
	case s.Git != nil:
		if o, r, ok := github(s.Git.URL); ok {
			pu = packageurl.NewPackageURL(packageurl.TypeGithub, o, r, s.Git.Commit, nil, "")
		} else {
			pu = packageurl.NewPackageURL(packageurl.TypeGeneric, "", c.Name, c.Version,
				packageurl.Qualifiers{{Key: "vcs_url", Value: "git+" + s.Git.URL + "@" + s.Git.Commit}}, "")
		}
		comment := "commit " + s.Git.Commit
		if s.Git.Ref != "" {
			comment += " (" + s.Git.Ref + ")"
		}
		comp.ExternalReferences = &[]cdx.ExternalReference{{Type: cdx.ERTypeVCS, URL: s.Git.URL, Comment: comment}}
		cp = props("epbuild:commit", s.Git.Commit, "epbuild:ref", s.Git.Ref)
	case s.Archive != nil:
		pu = packageurl.NewPackageURL(packageurl.TypeGeneric, "", c.Name, c.Version, packageurl.Qualifiers{
			{Key: "checksum", Value: "sha256:" + s.Archive.SHA256}, {Key: "download_url", Value: s.Archive.URL}}, "")
		comp.Hashes = sha256Hashes(s.Archive.SHA256)
		comp.ExternalReferences = &[]cdx.ExternalReference{{Type: cdx.ERTypeDistribution, URL: s.Archive.URL, Hashes: sha256Hashes(s.Archive.SHA256)}}
		cp = props("epbuild:sha256", s.Archive.SHA256)
	case s.Python != nil:
		v := in.Python[s.Python.Package]
		comp.Name, comp.Version = s.Python.Package, v
		if v != "" {
			pu = packageurl.NewPackageURL(packageurl.TypePyPi, "", s.Python.Package, v, nil, "")
		}
		cp = props("epbuild:component", c.Name, "epbuild:source", "the Python environment of the build host",
			"epbuild:version-constraint", s.Python.Version)
	default:
		return nil, fmt.Errorf("sbom: component %s has no source", c.Name)
	}
	if pu != nil {
		var err error
		if comp.PackageURL, err = purl(pu); err != nil {
			return nil, fmt.Errorf("sbom: component %s: %w", c.Name, err)
		}
	}
	if len(c.PatchSets) == 0 {
		comp.Properties = list(cp)
		return comp, nil
	}
	ancestor := cdx.Component{Type: comp.Type, BOMRef: comp.BOMRef + "@upstream", Name: comp.Name, Version: comp.Version,
		PackageURL: comp.PackageURL, Hashes: comp.Hashes, ExternalReferences: comp.ExternalReferences}
	ped := &cdx.Pedigree{Ancestors: &[]cdx.Component{ancestor},
		Notes: fmt.Sprintf("patched by epbuild with %d patch sets, in order: %s", len(c.PatchSets), setNames(c.PatchSets))}
	if s.Git != nil {
		cm := cdx.Commit{UID: s.Git.Commit}
		if o, r, ok := github(s.Git.URL); ok {
			cm.URL = "https://github.com/" + o + "/" + r + "/commit/" + s.Git.Commit
		}
		ped.Commits = &[]cdx.Commit{cm}
	}
	results := map[string]*patches.SetResult{}
	for _, r := range in.Patches[c.Name] {
		results[r.Set] = r
	}
	var entries []cdx.Patch
	applied := sha256.New() // the patches' digests in order: the patched purl's qualifier
	for _, set := range c.PatchSets {
		sr := results[set.Name]
		if sr == nil {
			return nil, fmt.Errorf("sbom: component %s: the manifest has no outcome of patch set %s", c.Name, set.Name)
		}
		cp = append(cp, Property{Name: "epbuild:patch-set:" + set.Name, Value: set.Origin()})
		for i, pt := range set.Patches {
			if i >= len(sr.Patches) || sr.Patches[i].Name != pt.Name {
				return nil, fmt.Errorf("sbom: component %s: patch set %s: the manifest's outcomes do not follow its patches", c.Name, set.Name)
			}
			res := sr.Patches[i]
			id := set.Name + "/" + pt.Name
			cp = append(cp,
				Property{Name: "epbuild:patch:" + id + ":sha256", Value: res.Digest},
				Property{Name: "epbuild:patch:" + id + ":kind", Value: string(res.Kind)},
				Property{Name: "epbuild:patch:" + id + ":status", Value: string(res.Status)})
			fmt.Fprintln(applied, res.Digest)
			e := patchEntry(set, pt, c)
			if b, ok := in.PatchDiffs[res.Digest]; ok && len(b) <= MaxDiffBytes {
				if e.Diff == nil {
					e.Diff = &cdx.Diff{}
				}
				e.Diff.Text = diffText(b)
			}
			entries = append(entries, e)
		}
	}
	ped.Patches = list(entries)
	comp.Pedigree = ped
	comp.Properties = list(cp)
	if pu != nil {
		pu.Qualifiers = append(pu.Qualifiers, packageurl.Qualifier{Key: PatchedQualifier, Value: hex.EncodeToString(applied.Sum(nil))[:12]})
		var err error
		if comp.PackageURL, err = purl(pu); err != nil {
			return nil, fmt.Errorf("sbom: component %s: %w", c.Name, err)
		}
	}
	return comp, nil
}

// diffText is a patch's bytes as an attachment: as they are when they are UTF-8 text,
// else base64.
func diffText(b []byte) *cdx.AttachedText {
	if utf8.Valid(b) {
		return &cdx.AttachedText{ContentType: "text/x-diff", Content: string(b)}
	}
	return &cdx.AttachedText{ContentType: "text/x-diff", Encoding: "base64", Content: base64.StdEncoding.EncodeToString(b)}
}

func setNames(sets []*patches.Set) string {
	var n []string
	for _, s := range sets {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

var pullRefRe = regexp.MustCompile(`^refs/pull/([0-9]+)/head$`)

// patchEntry is the pedigree entry of one patch: a diff of the component's own
// repository is a cherry-pick (the upstream diff's URL and the pull request it comes
// from, where known); anything else is unofficial.
func patchEntry(set *patches.Set, pt patches.Patch, c lock.Component) cdx.Patch {
	e := cdx.Patch{Type: cdx.PatchTypeUnofficial}
	issue := cdx.Issue{Type: cdx.IssueTypeEnhancement, Name: set.Name, Description: strings.TrimSpace(set.Description)}
	switch {
	case pt.UpstreamDiff != nil:
		d := pt.UpstreamDiff
		if c.Source.Git != nil && sameRepo(d.Repo, c.Source.Git.URL) {
			e.Type = cdx.PatchTypeCherryPick
		}
		if o, r, ok := github(d.Repo); ok {
			e.Diff = &cdx.Diff{URL: "https://github.com/" + o + "/" + r + "/compare/" + d.Base + "..." + d.Head + ".diff"}
			if m := pullRefRe.FindStringSubmatch(d.Ref); m != nil {
				pr := "https://github.com/" + o + "/" + r + "/pull/" + m[1]
				issue.ID, issue.Name = m[1], o+"/"+r+"#"+m[1]
				issue.Source, issue.References = &cdx.Source{Name: "github.com/" + o + "/" + r, URL: pr}, &[]string{pr}
			}
		}
	case pt.UpstreamFile != nil:
		if o, r, ok := github(pt.UpstreamFile.Repo); ok {
			e.Diff = &cdx.Diff{URL: "https://raw.githubusercontent.com/" + o + "/" + r + "/" + pt.UpstreamFile.Commit + "/" + pt.UpstreamFile.Path}
		}
	}
	e.Resolves = &[]cdx.Issue{issue}
	return e
}
