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
package sbom

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/patches"
	"github.com/epbuild/epbuild/recipes/lock"
)

// SpecVersion is the CycloneDX version written.
const SpecVersion = "1.6"

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

// BOM is a CycloneDX document: the fields this writer fills, in the schema's names.
type BOM struct {
	Schema       string        `json:"$schema"`
	BOMFormat    string        `json:"bomFormat"`
	SpecVersion  string        `json:"specVersion"`
	SerialNumber string        `json:"serialNumber"`
	Version      int           `json:"version"`
	Metadata     Metadata      `json:"metadata"`
	Components   []*Component  `json:"components"`
	Dependencies []Dependency  `json:"dependencies"`
	Formulation  []Formulation `json:"formulation,omitempty"`
}

// Metadata says what the BOM describes and what wrote it.
type Metadata struct {
	Timestamp  string        `json:"timestamp"`
	Tools      Tools         `json:"tools"`
	Authors    []Contact     `json:"authors,omitempty"`
	Component  *Component    `json:"component"`
	Supplier   *Organization `json:"supplier,omitempty"`
	Properties []Property    `json:"properties,omitempty"`
}

// Contact is a person or team (CycloneDX organizationalContact).
type Contact struct {
	Name string `json:"name"`
}

// Organization is a CycloneDX organizationalEntity.
type Organization struct {
	Name string `json:"name"`
}

// Tools are what made the BOM.
type Tools struct {
	Components []*Component `json:"components"`
}

// Component is a CycloneDX component.
type Component struct {
	Type               string       `json:"type"`
	BOMRef             string       `json:"bom-ref,omitempty"`
	Name               string       `json:"name"`
	Version            string       `json:"version,omitempty"`
	Description        string       `json:"description,omitempty"`
	Hashes             []Hash       `json:"hashes,omitempty"`
	PURL               string       `json:"purl,omitempty"`
	ExternalReferences []ExtRef     `json:"externalReferences,omitempty"`
	Pedigree           *Pedigree    `json:"pedigree,omitempty"`
	Properties         []Property   `json:"properties,omitempty"`
	Components         []*Component `json:"components,omitempty"`
}

// Hash is one digest.
type Hash struct {
	Alg     string `json:"alg"`
	Content string `json:"content"`
}

// ExtRef is an external reference.
type ExtRef struct {
	Type    string `json:"type"`
	URL     string `json:"url"`
	Comment string `json:"comment,omitempty"`
	Hashes  []Hash `json:"hashes,omitempty"`
}

// Pedigree is where a modified component comes from and what changed it.
type Pedigree struct {
	Ancestors []*Component `json:"ancestors,omitempty"`
	Commits   []Commit     `json:"commits,omitempty"`
	Patches   []Patch      `json:"patches,omitempty"`
	Notes     string       `json:"notes,omitempty"`
}

// Commit is a commit a component derives from.
type Commit struct {
	UID string `json:"uid"`
	URL string `json:"url,omitempty"`
}

// Patch is one patch applied to a component.
type Patch struct {
	Type     string  `json:"type"`
	Diff     *Diff   `json:"diff,omitempty"`
	Resolves []Issue `json:"resolves,omitempty"`
}

// Diff is a patch's diff: its text, or where it is.
type Diff struct {
	Text *Attachment `json:"text,omitempty"`
	URL  string      `json:"url,omitempty"`
}

// Attachment is text carried in the BOM.
type Attachment struct {
	ContentType string `json:"contentType"`
	Encoding    string `json:"encoding,omitempty"`
	Content     string `json:"content"`
}

// Issue is what a patch resolves.
type Issue struct {
	Type        string       `json:"type"`
	ID          string       `json:"id,omitempty"`
	Name        string       `json:"name,omitempty"`
	Description string       `json:"description,omitempty"`
	Source      *IssueSource `json:"source,omitempty"`
	References  []string     `json:"references,omitempty"`
}

// IssueSource is where an issue is documented.
type IssueSource struct {
	Name string `json:"name,omitempty"`
	URL  string `json:"url,omitempty"`
}

// Property is a name-value fact.
type Property struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Dependency says what a component depends on.
type Dependency struct {
	Ref       string   `json:"ref"`
	DependsOn []string `json:"dependsOn,omitempty"`
}

// Formulation is how the artifact was made: the build host's tools.
type Formulation struct {
	BOMRef     string       `json:"bom-ref"`
	Components []*Component `json:"components,omitempty"`
	Properties []Property   `json:"properties,omitempty"`
}

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
	art := &Component{Type: "application", BOMRef: "artifact", Name: p.Recipe, Version: short, Description: p.Cluster}
	if in.ArtifactSHA256 != "" {
		art.Hashes = []Hash{{"SHA-256", in.ArtifactSHA256}}
	}
	art.Properties = props("epbuild:plan-key", p.Key, "epbuild:artifact", in.Artifact)
	for _, o := range p.Overrides {
		art.Properties = append(art.Properties, Property{"epbuild:override", o})
	}
	bom := &BOM{
		Schema: "http://cyclonedx.org/schema/bom-1.6.schema.json", BOMFormat: "CycloneDX", SpecVersion: SpecVersion,
		SerialNumber: "urn:uuid:" + uuid5(in.ArtifactSHA256+" "+p.Key), Version: 1,
		Metadata: Metadata{
			Timestamp: time.Unix(in.SourceDateEpoch, 0).UTC().Format(time.RFC3339),
			Tools:     Tools{Components: []*Component{{Type: "application", BOMRef: "tool:epbuild", Name: "epbuild", Version: in.Tool}}},
			Component: art,
			Properties: props("epbuild:version", in.Tool, "epbuild:built-by", in.BuiltBy, "epbuild:recipe", p.Recipe,
				"epbuild:source-date-epoch", strconv.FormatInt(in.SourceDateEpoch, 10)),
		},
	}
	if in.Supplier != "" {
		bom.Metadata.Supplier = &Organization{Name: in.Supplier}
	}
	for _, a := range in.Authors {
		bom.Metadata.Authors = append(bom.Metadata.Authors, Contact{Name: a})
	}
	byComp := map[string]*Component{}
	top := Dependency{Ref: art.BOMRef}
	for _, c := range p.Components {
		comp, err := component(c, in)
		if err != nil {
			return nil, err
		}
		byComp[c.Name] = comp
		bom.Components = append(bom.Components, comp)
		top.DependsOn = append(top.DependsOn, comp.BOMRef)
	}
	// the artifact's files, under the component whose directory holds them
	for _, e := range in.Files {
		if e.Type != archive.TypeFile {
			continue
		}
		f := &Component{Type: "file", BOMRef: "file:" + e.Path, Name: e.Path, Hashes: []Hash{{"SHA-256", e.SHA256}},
			Properties: props("epbuild:mode", fmt.Sprintf("%04o", e.Mode.Perm()), "epbuild:size", strconv.FormatInt(e.Size, 10))}
		first, _, _ := strings.Cut(e.Path, "/")
		if owner, ok := byComp[first]; ok && first != e.Path {
			owner.Components = append(owner.Components, f)
		} else {
			bom.Components = append(bom.Components, f)
		}
	}
	for _, w := range in.Wheels {
		owner, ok := byComp[w.Component]
		if !ok {
			return nil, fmt.Errorf("sbom: a wheel of %s, which the plan does not have", w.Component)
		}
		name := path.Join(w.Dir, w.File)
		owner.Components = append(owner.Components, &Component{Type: "file", BOMRef: "wheel:" + name, Name: name,
			Hashes: []Hash{{"SHA-256", w.SHA256}}, Properties: props("epbuild:size", strconv.FormatInt(w.Size, 10), "epbuild:beside-artifact", "true")})
	}
	bom.Dependencies = append(bom.Dependencies, top)
	for _, c := range p.Components {
		d := Dependency{Ref: byComp[c.Name].BOMRef}
		for _, dep := range c.Depends {
			if dc, ok := byComp[dep]; ok {
				d.DependsOn = append(d.DependsOn, dc.BOMRef)
			}
		}
		bom.Dependencies = append(bom.Dependencies, d)
	}
	f := Formulation{BOMRef: "formulation:build", Properties: in.Properties}
	for _, t := range in.Toolchain {
		if t.Version == "" {
			continue
		}
		tc := &Component{Type: "application", BOMRef: "tool:" + t.Name, Name: t.Name, Version: t.Version}
		if t.Package {
			tc.Type, tc.BOMRef, tc.PURL = "library", "tool:pypi:"+t.Name, "pkg:pypi/"+pypiName(t.Name)+"@"+t.Version
		}
		if t.Path != "" {
			tc.Properties = props("epbuild:path", t.Path)
		}
		f.Components = append(f.Components, tc)
	}
	for _, r := range p.Toolchain.Arch {
		f.Properties = append(f.Properties, Property{"epbuild:cuda-arch", r})
	}
	bom.Formulation = []Formulation{f}
	return bom, nil
}

// Marshal is the BOM as indented JSON with a final newline.
func (b *BOM) Marshal() ([]byte, error) {
	out, err := json.MarshalIndent(b, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("sbom: encode: %w", err)
	}
	return append(out, '\n'), nil
}

func props(kv ...string) []Property {
	var out []Property
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			out = append(out, Property{kv[i], kv[i+1]})
		}
	}
	return out
}

var pypiNormRe = regexp.MustCompile(`[-_.]+`)

func pypiName(n string) string { return strings.ToLower(pypiNormRe.ReplaceAllString(n, "-")) }

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

// purlVersion escapes a version for a purl.
func purlVersion(v string) string { return strings.ReplaceAll(url.PathEscape(v), "+", "%2B") }

func component(c lock.Component, in Input) (*Component, error) {
	comp := &Component{Type: "library", BOMRef: "component:" + c.Name, Name: c.Name, Version: c.Version}
	s := c.Source
	switch {
	case s.Git != nil:
		if o, r, ok := github(s.Git.URL); ok {
			comp.PURL = "pkg:github/" + strings.ToLower(o) + "/" + strings.ToLower(r) + "@" + s.Git.Commit
		} else {
			comp.PURL = "pkg:generic/" + c.Name + versionPart(c.Version) + "?vcs_url=" + url.QueryEscape("git+"+s.Git.URL+"@"+s.Git.Commit)
		}
		comment := "commit " + s.Git.Commit
		if s.Git.Ref != "" {
			comment += " (" + s.Git.Ref + ")"
		}
		comp.ExternalReferences = []ExtRef{{Type: "vcs", URL: s.Git.URL, Comment: comment}}
		comp.Properties = props("epbuild:commit", s.Git.Commit, "epbuild:ref", s.Git.Ref)
	case s.Archive != nil:
		comp.PURL = "pkg:generic/" + c.Name + versionPart(c.Version) + "?checksum=" + url.QueryEscape("sha256:"+s.Archive.SHA256) +
			"&download_url=" + url.QueryEscape(s.Archive.URL)
		comp.Hashes = []Hash{{"SHA-256", s.Archive.SHA256}}
		comp.ExternalReferences = []ExtRef{{Type: "distribution", URL: s.Archive.URL, Hashes: []Hash{{"SHA-256", s.Archive.SHA256}}}}
		comp.Properties = props("epbuild:sha256", s.Archive.SHA256)
	case s.Python != nil:
		v := in.Python[s.Python.Package]
		comp.Name, comp.Version = s.Python.Package, v
		if v != "" {
			comp.PURL = "pkg:pypi/" + pypiName(s.Python.Package) + "@" + purlVersion(v)
		}
		comp.Properties = props("epbuild:component", c.Name, "epbuild:source", "the Python environment of the build host",
			"epbuild:version-constraint", s.Python.Version)
	default:
		return nil, fmt.Errorf("sbom: component %s has no source", c.Name)
	}
	if len(c.PatchSets) == 0 {
		return comp, nil
	}
	ancestor := &Component{Type: comp.Type, BOMRef: comp.BOMRef + "@upstream", Name: comp.Name, Version: comp.Version, PURL: comp.PURL,
		Hashes: comp.Hashes, ExternalReferences: comp.ExternalReferences}
	ped := &Pedigree{Ancestors: []*Component{ancestor},
		Notes: fmt.Sprintf("patched by epbuild with %d patch sets, in order: %s", len(c.PatchSets), setNames(c.PatchSets))}
	if s.Git != nil {
		cm := Commit{UID: s.Git.Commit}
		if o, r, ok := github(s.Git.URL); ok {
			cm.URL = "https://github.com/" + o + "/" + r + "/commit/" + s.Git.Commit
		}
		ped.Commits = []Commit{cm}
	}
	results := map[string]*patches.SetResult{}
	for _, r := range in.Patches[c.Name] {
		results[r.Set] = r
	}
	applied := sha256.New() // the patches' digests in order: the patched purl's qualifier
	for _, set := range c.PatchSets {
		sr := results[set.Name]
		if sr == nil {
			return nil, fmt.Errorf("sbom: component %s: the manifest has no outcome of patch set %s", c.Name, set.Name)
		}
		comp.Properties = append(comp.Properties, Property{"epbuild:patch-set:" + set.Name, set.Origin()})
		for i, pt := range set.Patches {
			if i >= len(sr.Patches) || sr.Patches[i].Name != pt.Name {
				return nil, fmt.Errorf("sbom: component %s: patch set %s: the manifest's outcomes do not follow its patches", c.Name, set.Name)
			}
			res := sr.Patches[i]
			id := set.Name + "/" + pt.Name
			comp.Properties = append(comp.Properties,
				Property{"epbuild:patch:" + id + ":sha256", res.Digest},
				Property{"epbuild:patch:" + id + ":kind", string(res.Kind)},
				Property{"epbuild:patch:" + id + ":status", string(res.Status)})
			fmt.Fprintln(applied, res.Digest)
			e := patchEntry(set, pt, c)
			if b, ok := in.PatchDiffs[res.Digest]; ok && len(b) <= MaxDiffBytes {
				if e.Diff == nil {
					e.Diff = &Diff{}
				}
				e.Diff.Text = diffText(b)
			}
			ped.Patches = append(ped.Patches, e)
		}
	}
	comp.Pedigree = ped
	if comp.PURL != "" {
		comp.PURL = withQualifier(comp.PURL, PatchedQualifier, hex.EncodeToString(applied.Sum(nil))[:12])
	}
	return comp, nil
}

// diffText is a patch's bytes as an attachment: as they are when they are UTF-8 text,
// else base64.
func diffText(b []byte) *Attachment {
	if utf8.Valid(b) {
		return &Attachment{ContentType: "text/x-diff", Content: string(b)}
	}
	return &Attachment{ContentType: "text/x-diff", Encoding: "base64", Content: base64.StdEncoding.EncodeToString(b)}
}

// withQualifier adds key=value to a purl's qualifiers, keeping them sorted by key as the
// purl specification's canonical form has them (key lowercase, value percent-encoded).
func withQualifier(purl, key, value string) string {
	base, query, _ := strings.Cut(purl, "?")
	quals := []string{key + "=" + url.QueryEscape(value)}
	if query != "" {
		quals = append(quals, strings.Split(query, "&")...)
	}
	sort.Slice(quals, func(i, j int) bool {
		ki, _, _ := strings.Cut(quals[i], "=")
		kj, _, _ := strings.Cut(quals[j], "=")
		return ki < kj
	})
	return base + "?" + strings.Join(quals, "&")
}

func versionPart(v string) string {
	if v == "" {
		return ""
	}
	return "@" + purlVersion(v)
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
func patchEntry(set *patches.Set, pt patches.Patch, c lock.Component) Patch {
	e := Patch{Type: "unofficial"}
	issue := Issue{Type: "enhancement", Name: set.Name, Description: strings.TrimSpace(set.Description)}
	switch {
	case pt.UpstreamDiff != nil:
		d := pt.UpstreamDiff
		if c.Source.Git != nil && sameRepo(d.Repo, c.Source.Git.URL) {
			e.Type = "cherry-pick"
		}
		if o, r, ok := github(d.Repo); ok {
			e.Diff = &Diff{URL: "https://github.com/" + o + "/" + r + "/compare/" + d.Base + "..." + d.Head + ".diff"}
			if m := pullRefRe.FindStringSubmatch(d.Ref); m != nil {
				pr := "https://github.com/" + o + "/" + r + "/pull/" + m[1]
				issue.ID, issue.Name = m[1], o+"/"+r+"#"+m[1]
				issue.Source, issue.References = &IssueSource{Name: "github.com/" + o + "/" + r, URL: pr}, []string{pr}
			}
		}
	case pt.UpstreamFile != nil:
		if o, r, ok := github(pt.UpstreamFile.Repo); ok {
			e.Diff = &Diff{URL: "https://raw.githubusercontent.com/" + o + "/" + r + "/" + pt.UpstreamFile.Commit + "/" + pt.UpstreamFile.Path}
		}
	}
	e.Resolves = []Issue{issue}
	return e
}
