package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/compat"
)

// ManifestFormat is the version of manifest.json's layout.
const ManifestFormat = 1

// zstdLevel is pinned: the level changes the artifact's bytes.
const zstdLevel = zstd.SpeedDefault

// Manifest travels inside the artifact and lands in the install prefix: everything that
// went into the build and a hash of every file, so that verify-install can check an
// installed copy against what was built.
type Manifest struct {
	Format int `json:"format"`
	// Epbuild was the version of the epbuild that built it, in artifacts made before the
	// version left the reproducible bytes (it is in the SBOM and the OCI annotations now).
	Epbuild         string            `json:"epbuild,omitempty"`
	Recipe          string            `json:"recipe"`
	PlanKey         string            `json:"plan_key"`
	Plan            *Plan             `json:"plan"`
	SourceDateEpoch int64             `json:"source_date_epoch"`
	Toolchain       *Toolchain        `json:"toolchain"`
	Components      []ComponentResult `json:"components"`
	Env             map[string]string `json:"env,omitempty"`
	Findings        []compat.Finding  `json:"findings,omitempty"`
	Files           []archive.Entry   `json:"files"`
	// Wheels are written beside the artifact (WheelDir), not in it.
	Wheels []WheelFile `json:"wheels,omitempty"`
}

// ManifestName and EnvName are the generated files at the top of an artifact.
const (
	ManifestName = "manifest.json"
	EnvName      = "env.sh"
)

func (r *Runner) sourceDateEpoch(res *Result) (int64, error) {
	if r.SourceDateEpoch != "" {
		n, err := strconv.ParseInt(r.SourceDateEpoch, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", r.SourceDateEpoch)
		}
		return n, nil
	}
	// default: the newest pinned commit's time, so the same pins give the same bytes
	var t int64
	for _, c := range res.Components {
		if c.CommitTime > t {
			t = c.CommitTime
		}
	}
	return t, nil
}

// packageStage writes env.sh and the manifest and packs them with the staged prefixes,
// each under its component's name, reproducibly into dir/<artifact>.
func (r *Runner) packageStage(ctx context.Context, p *Plan, res *Result, dir string) error {
	return r.pack(ctx, p, res, dir, func() ([]ComponentResult, error) { return res.Components, nil })
}

// pack is packageStage with the components' results as the manifest records them
// coming from checked, which pack calls when it reaches the manifest, after the files
// before it: Run packs the prefixes while the checks run. An error from checked stops
// the pack; res's components give the prefixes and times.
func (r *Runner) pack(ctx context.Context, p *Plan, res *Result, dir string, checked func() ([]ComponentResult, error)) error {
	sde, err := r.sourceDateEpoch(res)
	if err != nil {
		return err
	}
	comps := res.Components
	// The prefixes are packed where they are: no tree is laid out for the artifact.
	var mounts []archive.Mount
	prefixes := map[string]string{}
	for _, c := range comps {
		if pc, _ := p.Component(c.Name); pc.Source.Python == nil && c.Prefix != "" {
			mounts = append(mounts, archive.Mount{Name: c.Name, Dir: c.Prefix})
			prefixes[c.Name] = c.Prefix
		}
	}
	envsh, err := envScript(p, func(c string) string { return prefixes[c] }, installedComponents(p, res))
	if err != nil {
		return err
	}
	wheels, err := packWheels(p, res, dir, sde)
	if err != nil {
		return err
	}
	plan := *p
	plan.File = ""
	m := Manifest{
		Format: ManifestFormat, Recipe: p.Recipe, PlanKey: p.Key, Plan: &plan,
		SourceDateEpoch: sde, Toolchain: r.Toolchain.Record(), Env: p.Env, Findings: r.Findings,
		Wheels: wheels,
	}
	out := filepath.Join(dir, ArtifactName(p))
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("package %s: %w", p.Recipe, err)
	}
	// One pass: the manifest, which holds every file's hash, is made from the hashes Pack
	// computes as it reads the tree, and the artifact's own sha256 as it is written.
	rep, err := archive.Pack(ctx, "", f, archive.PackOptions{
		Mounts:  mounts,
		ModTime: time.Unix(sde, 0),
		Level:   zstdLevel,
		Extra:   []archive.File{{Name: EnvName, Mode: envMode, Data: []byte(envsh)}},
		Late: &archive.LateFile{Name: ManifestName, Mode: 0o644, Data: func(entries []archive.Entry) ([]byte, error) {
			comps, err := checked()
			if err != nil {
				return nil, err
			}
			m.Components, m.Files = comps, entries
			mb, err := json.MarshalIndent(m, "", "  ")
			if err != nil {
				return nil, fmt.Errorf("encode manifest: %w", err)
			}
			return append(mb, '\n'), nil
		}},
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("package %s: %w", p.Recipe, err)
	}
	if err := os.WriteFile(out+".sha256", []byte(rep.SHA256+"  "+filepath.Base(out)+"\n"), 0o644); err != nil {
		return err
	}
	// who built it is provenance: in the SBOM beside the artifact, not in its bytes
	built := m
	built.Epbuild = r.Version
	bom, err := sbomBytes(&built, filepath.Base(out), rep.SHA256, r.Version)
	if err != nil {
		return fmt.Errorf("package %s: %w", p.Recipe, err)
	}
	return os.WriteFile(out+SBOMSuffix, bom, 0o644)
}

// installedComponents lists the components whose files the artifact carries.
func installedComponents(p *Plan, res *Result) []string {
	var out []string
	for _, c := range res.Components {
		pc, _ := p.Component(c.Name)
		if pc.Source.Python == nil && c.Prefix != "" {
			out = append(out, c.Name)
		}
	}
	return out
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
