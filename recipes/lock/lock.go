// Package lock is the resolved recipe, the plan: every source pinned, every patch set
// expanded with its pins, the options and the env. Every stage's cache key derives from
// it, the manifest records it, and the checks read it; it sits below the builder (which
// resolves and runs it) and below the host checks (which read its runtime settings).
package lock

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/epbuild/epbuild/patches"
	"github.com/epbuild/epbuild/recipes"
)

// Plan is a resolved recipe. It is what `epbuild show` prints.
type Plan struct {
	Recipe     string            `json:"recipe"`
	Cluster    string            `json:"cluster"`
	File       string            `json:"file"`
	Overrides  []string          `json:"overrides,omitempty"`
	Toolchain  recipes.Toolchain `json:"toolchain"`
	Components []Component       `json:"components"`
	Env        map[string]string `json:"env,omitempty"`
	// Runtime is the recipe's runtime: (what a job asks of each GPU); left out of the
	// JSON, and so of the key, when the recipe declares nothing.
	Runtime recipes.Runtime `json:"runtime,omitzero"`
	Notes   []string        `json:"notes,omitempty"`
	// Key is the sha256 of the plan's JSON without the key itself.
	Key string `json:"key"`
}

// Component is one component with its patch sets expanded.
type Component struct {
	recipes.Component
	PatchSets []*patches.Set `json:"patch-sets,omitempty"`
}

// Component returns the plan's component with that name.
func (p *Plan) Component(name string) (*Component, bool) {
	for i := range p.Components {
		if p.Components[i].Name == name {
			return &p.Components[i], true
		}
	}
	return nil, false
}

// Seal computes the plan's key. The key depends on what is built, not on how it was
// asked for: the file and the overrides are left out.
func (p *Plan) Seal() error {
	keyed := *p
	keyed.File, keyed.Overrides, keyed.Key = "", nil, ""
	b, err := json.Marshal(keyed)
	if err != nil {
		return fmt.Errorf("hash plan of %s: %w", p.Recipe, err)
	}
	sum := sha256.Sum256(b)
	p.Key = hex.EncodeToString(sum[:])
	return nil
}

// PatchSetOrigins maps each patch set of the plan to where it was read from:
// "embedded", or its local directory. It is not part of the plan's key: a set's
// pins are, wherever it lies.
func (p *Plan) PatchSetOrigins() map[string]string {
	out := map[string]string{}
	for _, c := range p.Components {
		for _, s := range c.PatchSets {
			out[s.Name] = s.Origin()
		}
	}
	return out
}
