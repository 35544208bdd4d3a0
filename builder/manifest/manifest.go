package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/builder/wheel"
	"github.com/epbuild/epbuild/patches"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/compat"
)

// ManifestFormat is the version of manifest.json's layout.
const ManifestFormat = 1

// Manifest travels inside the artifact and lands in the install prefix: everything that
// went into the build and a hash of every file, so that verify-install can check an
// installed copy against what was built.
type Manifest struct {
	Format int `json:"format"`
	// Epbuild was the version of the epbuild that built it, in artifacts made before the
	// version left the reproducible bytes (it is in the SBOM and the OCI annotations now).
	Epbuild         string               `json:"epbuild,omitempty"`
	Recipe          string               `json:"recipe"`
	PlanKey         string               `json:"plan_key"`
	Plan            *plan.Plan           `json:"plan"`
	SourceDateEpoch int64                `json:"source_date_epoch"`
	Toolchain       *toolchain.Toolchain `json:"toolchain"`
	Components      []ComponentResult    `json:"components"`
	Env             map[string]string    `json:"env,omitempty"`
	Findings        []compat.Finding     `json:"findings,omitempty"`
	// BuildFacts are what the build read of what it built (builder/stage's facts.go:
	// nvshmem.rc-layout, nvshmem.header-version), for the rules after the build; BuildFactNotes say why one
	// is not there. Absent where nothing was read: a plan without NVSHMEM keeps its bytes.
	BuildFacts     map[string]string `json:"build_facts,omitempty"`
	BuildFactNotes map[string]string `json:"build_fact_notes,omitempty"`
	Files          []archive.Entry   `json:"files"`
	// Wheels are written beside the artifact (WheelDir), not in it.
	Wheels []WheelFile `json:"wheels,omitempty"`
}

// ManifestName and EnvName are the generated files at the top of an artifact.
const (
	ManifestName = "manifest.json"
	EnvName      = "env.sh"
)

func SHA256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ComponentResult is what the stages produced for one component.
type ComponentResult struct {
	Name        string               `json:"name"`
	PatchKey    string               `json:"patch_key,omitempty"`
	BuildKey    string               `json:"build_key,omitempty"`
	CheckKey    string               `json:"check_key,omitempty"`
	Tree        string               `json:"-"`
	Prefix      string               `json:"-"`
	CommitTime  int64                `json:"commit_time,omitempty"`
	Patches     []*patches.SetResult `json:"patches,omitempty"`
	TreeEffects []check.Result       `json:"tree_effects,omitempty"`
	Checks      []check.Result       `json:"checks,omitempty"`
}

// WheelFile is a wheel the package stage made of a component's python/ tree, or of a
// component built here in the layout of the Python package it replaces (python-wheel).
type WheelFile struct {
	Component string `json:"component"`
	wheel.Info
	// Replaces is the package of the build's Python environment this wheel takes the place
	// of, at the version the build saw there ("" when it had none): what undoes its install.
	Replaces *Replaced `json:"replaces,omitempty"`
}

// WheelDir is the directory beside an artifact (of that file name or path) that holds
// the wheels its build wrote: <recipe>-<plan>.wheels.
func WheelDir(artifact string) string { return strings.TrimSuffix(artifact, ".tar.zst") + ".wheels" }

// Replaced is a Python package a wheel takes the place of.
type Replaced struct {
	Package string `json:"package"`
	Version string `json:"version,omitempty"`
}

// Undo is the command that puts the replaced package back into a Python environment
// (the package and version quoted for a POSIX shell), or removes the wheel's package
// when the build's environment had none.
func (r *Replaced) Undo() string {
	if r.Version == "" {
		return "pip uninstall -y " + quote.Shell(r.Package)
	}
	return "pip install --no-deps --force-reinstall " + quote.Shell(r.Package+"=="+r.Version)
}

// ReadInstalledManifest reads and decodes dir/manifest.json, returning its bytes too. It
// reads a regular file only, never through a symlink (readTopFile).
func ReadInstalledManifest(dir string) (*Manifest, []byte, error) {
	raw, err := readTopFile(dir, ManifestName, MaxManifestSize)
	if err != nil {
		return nil, nil, fmt.Errorf("read the manifest of %s: %w", dir, err)
	}
	m, err := DecodeManifest(raw, filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, raw, err
	}
	return m, raw, nil
}

// decodeManifest decodes a manifest, installed or read from an artifact (shown names it
// in errors), and refuses one epbuild did not write or cannot read.
func DecodeManifest(raw []byte, shown string) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", shown, err)
	}
	switch {
	case m.Format != ManifestFormat:
		return nil, fmt.Errorf("%s: format %d; this epbuild reads format %d (use the epbuild that built it, or a newer one)", shown, m.Format, ManifestFormat)
	case m.Plan == nil || m.Recipe == "" || m.PlanKey == "" || len(m.Files) == 0:
		return nil, fmt.Errorf("%s: no recipe, plan or file list: not written by epbuild", shown)
	}
	return &m, nil
}

// installedPrefixes maps the components whose files the install carries (a top-level
// directory of the manifest) to their directories.
func InstalledPrefixes(m *Manifest, prefix string) map[string]string {
	top := map[string]bool{}
	for _, e := range m.Files {
		if e.Type == archive.TypeDir && !strings.Contains(e.Path, "/") {
			top[e.Path] = true
		}
	}
	out := map[string]string{}
	for _, c := range m.Plan.Components {
		if c.Source.Python == nil && top[c.Name] {
			out[c.Name] = filepath.Join(prefix, c.Name)
		}
	}
	return out
}

// The build facts: what a build read of what it built, recorded in the manifest
// (Manifest.BuildFacts) and given to the rules after the build as compat.Facts.Build.
// They are read from the headers DeepEP compiles against, not from the recipe's labels:
// a GitHub tree that calls itself 3.5.0 already has the layout released in 3.5.19.
const (
	// FactRCLayout is the RC-QP layout of NVSHMEM's IBGDA device state (v1 or v2).
	FactRCLayout = "nvshmem.rc-layout"
	// FactHeaderVersion is the X.Y.Z of the NVSHMEM headers the build compiled against.
	FactHeaderVersion = "nvshmem.header-version"
	// FactHiddenSizes are the hidden sizes DeepEP's low-latency kernels are compiled for
	// (SWITCH_HIDDEN of the patched tree), comma-separated.
	FactHiddenSizes = "deepep.hidden-sizes"
)

// TestsDir is where a component's declared tests lie in its prefix.
const TestsDir = "tests"
