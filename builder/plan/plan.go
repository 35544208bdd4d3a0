// Package builder runs a plan: resolve a recipe into pinned inputs, fetch, patch,
// build, check, package, install and verify. The command line calls it; it calls
// recipes, patches and compat.
package plan

import (
	"fmt"

	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/patches"
	"github.com/epbuild/epbuild/recipes"
	"github.com/epbuild/epbuild/recipes/lock"
)

// Plan is a resolved recipe (the lock): every source pinned, every patch set expanded
// with its pins, the options and env. It is what `epbuild show` prints and what every
// stage's cache key derives from.
type Plan = lock.Plan

// PlanComponent is one component of a plan with its patch sets expanded.
type PlanComponent = lock.Component

// Resolver turns recipes into plans.
type Resolver struct {
	Library *recipes.Library
	// Patches holds the patch sets read so far: only those the recipes name.
	Patches *patches.Catalog
	// Catalog maps `--set COMPONENT.version=V` to V's pinned source.
	Catalog *compat.Catalog
	// Tags lists the tags that point at a commit of a repository (source.History.TagsAt),
	// for the version of a commit a --set names; nil: the catalogue alone.
	Tags func(repo, commit string) []string
}

// NewResolver uses lib for recipes and the embedded patch sets and version catalogue.
func NewResolver(lib *recipes.Library) (*Resolver, error) {
	versions, err := compat.LoadCatalog()
	if err != nil {
		return nil, fmt.Errorf("load the version catalogue: %w", err)
	}
	return &Resolver{Library: lib, Catalog: versions}, nil
}

// PatchSetLookup adapts the catalog for recipe validation.
func (r *Resolver) PatchSetLookup() recipes.PatchSetLookup {
	return func(name string) (string, bool) {
		if r.Patches == nil {
			return "", false
		}
		s, ok := r.Patches.Get(name)
		if !ok {
			return "", false
		}
		return string(s.Component), true
	}
}

// Load reads, overrides and validates a recipe, reading the patch sets it names.
func (r *Resolver) Load(name string, sets []string) (*recipes.Doc, error) {
	doc, err := r.Library.Load(name)
	if err != nil {
		return nil, err
	}
	pinned := map[string]string{}
	for _, c := range doc.Recipe.Components {
		if c.Source.Git != nil {
			pinned[c.Name] = c.Source.Git.Commit
		}
	}
	if err := doc.Apply(sets); err != nil {
		return nil, err
	}
	if err := ApplyCatalog(doc, sets, r.Catalog); err != nil {
		return nil, err
	}
	DeriveVersions(doc, sets, pinned, r.Catalog, r.Tags)
	doc.ApplyPreloads()
	var names []string
	for _, c := range doc.Recipe.Components {
		names = append(names, c.Patches...)
	}
	// the sets beside the recipe and in --patch-dir, then the shipped ones
	local := patches.Local{Dirs: r.Library.PatchSetDirs(doc), Shadow: r.Library.Shadow}
	if r.Patches, err = patches.LoadFor(local, names...); err != nil {
		return nil, fmt.Errorf("load patch sets: %w", err)
	}
	if err := doc.Validate(r.PatchSetLookup()); err != nil {
		return nil, err
	}
	return doc, nil
}

// Resolve loads a recipe with overrides and expands it into a plan.
func (r *Resolver) Resolve(name string, sets []string) (*Plan, error) {
	doc, err := r.Load(name, sets)
	if err != nil {
		return nil, err
	}
	rc := doc.Recipe
	p := &Plan{
		Recipe:    rc.Name,
		Cluster:   rc.Cluster,
		File:      doc.File,
		Overrides: sets,
		Toolchain: rc.Toolchain,
		Env:       rc.Env,
		Runtime:   rc.Runtime,
		Notes:     rc.Notes,
	}
	for _, name := range rc.Order() {
		c, _ := rc.Component(name)
		pc := PlanComponent{Component: *c}
		for _, ps := range c.Patches {
			s, _ := r.Patches.Get(ps)
			pc.PatchSets = append(pc.PatchSets, s)
		}
		p.Components = append(p.Components, pc)
	}
	if err := p.Seal(); err != nil {
		return nil, err
	}
	return p, nil
}

// UsageError is a bad option value or a bad argument: exit 2.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitCode: bad input.
func (e *UsageError) ExitCode() int { return 2 }
