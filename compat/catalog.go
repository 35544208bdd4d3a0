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
	// Prebuilt: the archive holds the vendor's built library (lib/, include/, bin/ under
	// its top directory), not source: the build copies it instead of running the
	// component's steps (NVIDIA publishes NVSHMEM 3.7 only so).
	Prebuilt bool `json:"prebuilt,omitempty"`
	// CUDA is the CUDA major a prebuilt archive was built for ("12", "13"): the plan's
	// CUDA picks one.
	CUDA string `json:"cuda,omitempty"`
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
	Devel bool `json:"devel,omitempty"`
	// BuiltHere false: the release is pinned from the vendor's published checksums and no
	// run of epbuild's own has built or tested it; PinnedFrom says where the sha256s were
	// read. Absent: true.
	BuiltHere  *bool  `json:"built-here,omitempty"`
	PinnedFrom string `json:"pinned-from,omitempty"`
	Pins       []Pin  `json:"pins"`
	v          Version
}

// IsBuiltHere reports whether epbuild's own runs have built the release.
func (r Release) IsBuiltHere() bool { return r.BuiltHere == nil || *r.BuiltHere }

// Note is what a plan pinned to the release says of it: nothing for a release built here.
func (r Release) Note(component string) string {
	if r.IsBuiltHere() {
		return ""
	}
	return fmt.Sprintf("%s %s is pinned by sha256 from %s; not built or tested by epbuild's own runs", component, r.Version, r.PinnedFrom)
}

// SourcePins are the release's pins of source trees (not prebuilt), preferred first.
func (r Release) SourcePins() []Pin {
	var out []Pin
	for _, p := range r.Pins {
		if !p.Prebuilt {
			out = append(out, p)
		}
	}
	return out
}

// Prebuilt gives the release's prebuilt archive for a CUDA major ("13").
func (r Release) Prebuilt(cudaMajor string) (Pin, bool) {
	for _, p := range r.Pins {
		if p.Prebuilt && p.CUDA == cudaMajor {
			return p, true
		}
	}
	return Pin{}, false
}

// PrebuiltCUDA lists the CUDA majors the release has prebuilt archives for.
func (r Release) PrebuiltCUDA() []string {
	var out []string
	for _, p := range r.Pins {
		if p.Prebuilt {
			out = append(out, p.CUDA)
		}
	}
	return out
}

// Catalog holds the known releases of each component.
type Catalog struct {
	components map[string][]Release
}

// LoadCatalog reads the catalogue built into the binary.
func LoadCatalog() (*Catalog, error) { return ParseCatalog("compat/catalog.yaml", catalogYAML) }

var (
	hex64     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	cudaMajor = regexp.MustCompile(`^[1-9][0-9]*$`)
)

// ParseCatalog decodes a catalogue strictly and checks every pin: full 40-hex commits,
// 64-hex sha256s, usable URLs, no version listed twice; a prebuilt pin is an archive
// naming its CUDA major, one per major, in a release that says it was not built here
// and where its sha256s come from.
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
			if !r.IsBuiltHere() {
				checkPinURL(d, p+".pinned-from", r.PinnedFrom)
			}
			cudas := map[string]bool{}
			for k, pin := range r.Pins {
				pp := fmt.Sprintf("%s.pins[%d]", p, k)
				switch {
				case pin.Prebuilt && pin.Archive == nil:
					d.at(pp, "a prebuilt pin is the vendor's archive of the built library: give archive: {url, sha256, strip}")
				case pin.Prebuilt && !hex64.MatchString(pin.Archive.SHA256):
					d.at(pp+".archive.sha256", "a prebuilt archive is pinned by its sha256 (%q is no 64-hex sha256): copy the sha256 given beside its relative_path in the vendor's redistrib JSON", pin.Archive.SHA256)
				case pin.Prebuilt && !cudaMajor.MatchString(pin.CUDA):
					d.at(pp+".cuda", "a prebuilt pin names the CUDA major it was built for (cuda: \"12\" or \"13\", from the archive's _cudaN suffix), not %q", pin.CUDA)
				case pin.Prebuilt && cudas[pin.CUDA]:
					d.at(pp+".cuda", "%s %s has two prebuilt pins for CUDA %s: keep one", name, r.Version, pin.CUDA)
				case pin.Prebuilt && r.IsBuiltHere():
					d.at(p+".built-here", "%s %s has a prebuilt pin: say built-here: false and pinned-from: <the URL its sha256s were read from>", name, r.Version)
				case !pin.Prebuilt && pin.CUDA != "":
					d.at(pp+".cuda", "cuda names the CUDA major of a prebuilt archive; a source pin builds with the plan's CUDA: drop it or add prebuilt: true")
				}
				cudas[pin.CUDA] = cudas[pin.CUDA] || pin.Prebuilt
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

// Lookup gives the preferred source pin of a component's release; false for a release
// published only prebuilt.
func (c *Catalog) Lookup(component, version string) (Pin, bool) {
	r, ok := c.Release(component, version)
	if !ok || len(r.SourcePins()) == 0 {
		return Pin{}, false
	}
	return r.SourcePins()[0], true
}

// LookupKind gives the release's source pin of a kind (git, archive), else its preferred
// source pin: a recipe that builds from git stays on git where the catalogue allows.
// False for a release published only prebuilt (Release.Prebuilt gives those).
func (c *Catalog) LookupKind(component, version, kind string) (Pin, bool) {
	r, ok := c.Release(component, version)
	if !ok {
		return Pin{}, false
	}
	src := r.SourcePins()
	for _, p := range src {
		if p.Kind() == kind {
			return p, true
		}
	}
	if len(src) == 0 {
		return Pin{}, false
	}
	return src[0], true
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

// CUDAMajor gives the one CUDA major a toolchain allows, for the prebuilt archive that
// fits it: from cuda when every version it allows has one major ("13.0", ">=13.0,<14"),
// else from the CUDA of a torch build it names ("2.11.0+cu130"); "" when neither says
// (">=12.9" allows 12.9 and 13.0).
func CUDAMajor(cuda, torch string) string {
	if cuda != "" {
		for m := 10; m < 30; m++ {
			c, err := ParseConstraint(fmt.Sprintf(">=%d.0, <%d.0", m, m+1))
			if err != nil {
				return ""
			}
			if t, _ := decideVersion("cuda", cuda, c); t == yes {
				return fmt.Sprint(m)
			}
		}
	}
	if v, err := ParseVersion(torch); err == nil {
		if cv, ok := v.CUDA(); ok {
			return fmt.Sprint(cv.major)
		}
	}
	return ""
}

// CMakeOff reports whether a CMake option's value is false as CMake reads it (0, OFF, NO…),
// as the rules' option conditions read it.
func CMakeOff(v string) bool {
	_, off := cmakeBool(v)
	return off
}
