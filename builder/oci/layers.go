package oci

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
)

// ArtifactType is the OCI artifactType of an epbuild artifact's manifest (image-spec
// 1.1: config is the empty descriptor, the type says what the layers are).
const ArtifactType = "application/vnd.epbuild.artifact.v1"

// Media types of the layers.
const (
	MediaTypeArtifact = "application/vnd.epbuild.artifact.v1.tar+zstd"
	MediaTypeManifest = "application/vnd.epbuild.manifest.v1+json"
	// MediaTypeSBOM is CycloneDX's registered JSON type.
	MediaTypeSBOM   = "application/vnd.cyclonedx+json"
	MediaTypeSHA256 = "application/vnd.epbuild.sha256.v1+text"
	// MediaTypeWheel is a wheel the artifact's manifest lists (one layer each).
	MediaTypeWheel = "application/vnd.epbuild.wheel.v1+zip"
)

// Annotation keys on the OCI manifest, beside org.opencontainers.image.created. Layers
// carry org.opencontainers.image.title (their file name), which is also how `oras pull`
// names the files it writes.
const (
	AnnotationRecipe  = "io.github.epbuild.recipe"
	AnnotationPlanKey = "io.github.epbuild.plan-key"
	// AnnotationPins is a JSON array of Pin: every source the artifact was built from.
	AnnotationPins = "io.github.epbuild.pins"
	// AnnotationEpbuild is the epbuild that built the artifact (from its manifest).
	AnnotationEpbuild = "io.github.epbuild.epbuild"
	// AnnotationArtifact is the artifact's file name.
	AnnotationArtifact = "io.github.epbuild.artifact"
)

// Layer is one file of the OCI artifact, named by its suffix after the artifact's name
// ("" for the artifact itself).
type Layer struct {
	Suffix    string
	MediaType string
	// Required layers must be there on pull; an optional one is pushed when its file
	// lies beside the artifact.
	Required bool
	// Generated layers are made by push when their file is absent beside the artifact:
	// the manifest from inside the artifact, the .sha256 from its hash.
	Generated bool
	// PerWheel layers are one per wheel the artifact's manifest lists, each the file of
	// that name in the wheel directory beside the artifact (manifest.WheelDir), titled
	// "<dir>/<file>" (oras pull writes it there too); Suffix is "".
	PerWheel bool
}

// Layers is every layer an epbuild artifact can have, in the order the OCI manifest
// lists them. A new kind of file beside the artifact is one more row here; pull ignores
// media types it does not know, so older epbuilds still pull newer artifacts.
func Layers() []Layer {
	return []Layer{
		{Suffix: "", MediaType: MediaTypeArtifact, Required: true},
		{Suffix: ".manifest.json", MediaType: MediaTypeManifest, Required: true, Generated: true},
		{Suffix: ".cdx.json", MediaType: MediaTypeSBOM},
		{Suffix: ".sha256", MediaType: MediaTypeSHA256, Required: true, Generated: true},
		{MediaType: MediaTypeWheel, PerWheel: true},
	}
}

// wheelTitle is the title of the layer of wheel file beside the artifact named name.
func wheelTitle(name, file string) string { return manifest.WheelDir(name) + "/" + file }

// Pin is one source of the build, as the pins annotation lists it.
type Pin struct {
	Component string   `json:"component"`
	Version   string   `json:"version,omitempty"`
	URL       string   `json:"url,omitempty"`
	Commit    string   `json:"commit,omitempty"`
	SHA256    string   `json:"sha256,omitempty"`
	Package   string   `json:"package,omitempty"` // a Python package of the build environment
	PatchSets []string `json:"patch_sets,omitempty"`
}

// Pins lists the plan's sources and patch sets.
func Pins(p *plan.Plan) []Pin {
	var out []Pin
	for _, c := range p.Components {
		pin := Pin{Component: c.Name, Version: c.Version, PatchSets: c.Patches}
		switch s := c.Source; {
		case s.Git != nil:
			pin.URL, pin.Commit = s.Git.URL, s.Git.Commit
		case s.Archive != nil:
			pin.URL, pin.SHA256 = s.Archive.URL, s.Archive.SHA256
		case s.Python != nil:
			pin.Package = s.Python.Package
		}
		out = append(out, pin)
	}
	return out
}

func pinsAnnotation(p *plan.Plan) (string, error) {
	b, err := json.Marshal(Pins(p))
	if err != nil {
		return "", fmt.Errorf("encode the pins of %s: %w", p.Recipe, err)
	}
	return string(b), nil
}

// artifactSuffix is how every epbuild artifact's name ends.
const artifactSuffix = ".tar.zst"

// plainName reports whether name can be written into a directory as it is: one path
// element, no separators, not hidden, not . or ..
func plainName(name string) bool {
	return name != "" && !strings.ContainsAny(name, `/\`+"\x00") && !strings.HasPrefix(name, ".") && len(name) <= 255
}
