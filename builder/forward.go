package builder

import (
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/recipes"
)

// Names that builder/sbom's tests still reach at the root while that package is being
// rewritten beside this split; they go once it imports builder/plan itself.

// Plan is plan.Plan.
type Plan = plan.Plan

// NewResolver is plan.NewResolver.
func NewResolver(lib *recipes.Library) (*plan.Resolver, error) { return plan.NewResolver(lib) }

// ReadInstalledManifest is manifest.ReadInstalledManifest.
func ReadInstalledManifest(prefix string) (*manifest.Manifest, []byte, error) {
	return manifest.ReadInstalledManifest(prefix)
}
