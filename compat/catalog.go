package compat

import (
	_ "embed"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
)

//go:embed catalog.yaml
var catalogYAML []byte

// Pin is where one release of a component comes from: a git commit or an archive.
// Exactly one of Git and Archive is set.
type Pin struct {
	Git     *GitPin     `json:"git,omitempty"`
	Archive *ArchivePin `json:"archive,omitempty"`
}

// GitPin is a full commit of a repository; Ref, when given, must point at Commit.
type GitPin struct {
	URL    string `json:"url"`
	Commit string `json:"commit"`
	Ref    string `json:"ref,omitempty"`
}

// ArchivePin is a tarball pinned by sha256; Strip drops leading directories.
type ArchivePin struct {
	URL    string `json:"url"`
	SHA256 string `json:"sha256"`
	Strip  int    `json:"strip,omitempty"`
}

// Kind names the pin's source kind: git or archive.
func (p Pin) Kind() string {
	if p.Git != nil {
		return "git"
	}
	return "archive"
}

// Release is one known version of a component with its pins, preferred first.
type Release struct {
	Version string `json:"version"`
	// Devel marks a pinned tree that is no published release (a fork's devel branch): it
	// resolves only by its whole version, and the release condition is false for it.
	Devel bool  `json:"devel,omitempty"`
	Pins  []Pin `json:"pins"`
	v     Version
}

// Catalog holds the known releases of each component.
type Catalog struct {
	components map[string][]Release
}

// LoadCatalog reads the catalogue built into the binary.
func LoadCatalog() (*Catalog, error) { return ParseCatalog("compat/catalog.yaml", catalogYAML) }

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// ParseCatalog decodes a catalogue strictly and checks every pin: full 40-hex commits,
// 64-hex sha256s, usable URLs, no version listed twice.
func ParseCatalog(file string, data []byte) (*Catalog, error) {
	var raw struct {
		Components map[string][]Release `json:"components"`
	}
	d, err := decodeStrict(file, data, &raw)
	if err != nil {
		return nil, err
	}
	for name, rels := range raw.Components {
		for i := range rels {
			r := &rels[i]
			p := fmt.Sprintf("$.components.%s[%d]", name, i)
			v, err := ParseVersion(r.Version)
			if err != nil {
				d.at(p+".version", "%v", err)
			}
			r.v = v
			if r.Devel && v.local == "" {
				d.at(p+".version", "%s %s: a devel tree needs a local part (3.5.20+devel.COMMIT), so that no release of that number resolves to it", name, r.Version)
			}
			for j := range i {
				if err == nil && rels[j].v.Equal(v) {
					d.at(p+".version", "%s %s is listed twice (also as %s)", name, r.Version, rels[j].Version)
				}
			}
			if len(r.Pins) == 0 {
				d.at(p, "%s %s: needs at least one pin", name, r.Version)
			}
			for k, pin := range r.Pins {
				pp := fmt.Sprintf("%s.pins[%d]", p, k)
				switch {
				case (pin.Git == nil) == (pin.Archive == nil):
					d.at(pp, "a pin has exactly one of git and archive")
				case pin.Git != nil:
					if !full40.MatchString(pin.Git.Commit) {
						d.at(pp+".git.commit", "%q is not a full 40-hex commit id", pin.Git.Commit)
					}
					checkPinURL(d, pp+".git.url", pin.Git.URL)
				default:
					if !hex64.MatchString(pin.Archive.SHA256) {
						d.at(pp+".archive.sha256", "%q is not a 64-hex sha256", pin.Archive.SHA256)
					}
					if pin.Archive.Strip < 0 {
						d.at(pp+".archive.strip", "strip must be 0 or more")
					}
					checkPinURL(d, pp+".archive.url", pin.Archive.URL)
				}
			}
		}
		sort.SliceStable(rels, func(i, j int) bool { return rels[i].v.Less(rels[j].v) })
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return &Catalog{components: raw.Components}, nil
}

func checkPinURL(d *yamlDoc, p, raw string) {
	if u, err := url.Parse(raw); err != nil || u.Scheme != "https" || u.Host == "" {
		d.at(p, "%q is not an https URL", raw)
	}
}

// Has reports whether the catalogue lists any release of the component.
func (c *Catalog) Has(component string) bool { return len(c.components[component]) > 0 }

// Versions lists the known versions of a component, oldest first.
func (c *Catalog) Versions(component string) []string {
	var out []string
	for _, r := range c.components[component] {
		out = append(out, r.Version)
	}
	return out
}

// Components lists the components the catalogue knows, sorted.
func (c *Catalog) Components() []string {
	var out []string
	for n := range c.components {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Release finds a release by version with vendor meaning: "3.4.5" and "3.4.5-0" are one
// release; a version without a revision ("3.5.19") names the only release of that core
// when there is exactly one ("3.5.19-1").
func (c *Catalog) Release(component, version string) (Release, bool) {
	v, err := ParseVersion(version)
	if err != nil {
		return Release{}, false
	}
	rels := c.components[component]
	for _, r := range rels {
		if r.v.Equal(v) {
			return r, true
		}
	}
	if v.hasRev || v.local != "" {
		return Release{}, false
	}
	var found []Release
	for _, r := range rels {
		if r.v.Core() == v.Core() && !r.Devel {
			found = append(found, r)
		}
	}
	if len(found) == 1 {
		return found[0], true
	}
	return Release{}, false
}

// Lookup gives the preferred pin of a component's release.
func (c *Catalog) Lookup(component, version string) (Pin, bool) {
	r, ok := c.Release(component, version)
	if !ok {
		return Pin{}, false
	}
	return r.Pins[0], true
}

// LookupKind gives the release's pin of a source kind (git, archive), else its preferred
// pin: a recipe that builds from git stays on git where the catalogue allows.
func (c *Catalog) LookupKind(component, version, kind string) (Pin, bool) {
	r, ok := c.Release(component, version)
	if !ok {
		return Pin{}, false
	}
	for _, p := range r.Pins {
		if p.Kind() == kind {
			return p, true
		}
	}
	return r.Pins[0], true
}

// ReleaseAt finds the release of a component whose git pin is commit of repo (compared
// as RepoKey): what `--set COMPONENT.commit=` names when it names a known release.
func (c *Catalog) ReleaseAt(component, repo, commit string) (Release, bool) {
	for _, r := range c.components[component] {
		for _, p := range r.Pins {
			if p.Git != nil && p.Git.Commit == commit && RepoKey(p.Git.URL) == RepoKey(repo) {
				return r, true
			}
		}
	}
	return Release{}, false
}
