package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	Format          int               `json:"format"`
	Epbuild         string            `json:"epbuild"`
	Recipe          string            `json:"recipe"`
	PlanKey         string            `json:"plan_key"`
	Plan            *Plan             `json:"plan"`
	SourceDateEpoch int64             `json:"source_date_epoch"`
	Toolchain       *Toolchain        `json:"toolchain"`
	Components      []ComponentResult `json:"components"`
	Env             map[string]string `json:"env,omitempty"`
	Findings        []compat.Finding  `json:"findings,omitempty"`
	Files           []archive.Entry   `json:"files"`
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
	plan := *p
	plan.File = ""
	m := Manifest{
		Format: ManifestFormat, Epbuild: r.Version, Recipe: p.Recipe, PlanKey: p.Key, Plan: &plan,
		SourceDateEpoch: sde, Toolchain: r.Toolchain.Record(), Components: comps, Env: p.Env, Findings: r.Findings,
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
		Extra:   []archive.File{{Name: EnvName, Mode: 0o755, Data: []byte(envsh)}},
		Late: &archive.LateFile{Name: ManifestName, Mode: 0o644, Data: func(entries []archive.Entry) ([]byte, error) {
			m.Files = entries
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
	return os.WriteFile(out+".sha256", []byte(rep.SHA256+"  "+filepath.Base(out)+"\n"), 0o644)
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

// EnvScript writes env.sh: it finds its own directory (the install prefix) and exports
// the recipe's runtime env with {{C.prefix}} pointing into it, PYTHONPATH and
// LD_LIBRARY_PATH for the components (laid out under root) that have python/ and lib/. Values are single-quoted; only the prefix is expanded.
func EnvScript(p *Plan, root string, installed []string) (string, error) {
	return envScript(p, func(c string) string { return filepath.Join(root, c) }, installed)
}

// envScript is EnvScript with each installed component's tree at dirOf(component).
func envScript(p *Plan, dirOf func(string) string, installed []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# env.sh for %s (plan %s), written by epbuild. Source it: . %s\n", p.Recipe, p.Key[:12], EnvName)
	b.WriteString(`EPBUILD_PREFIX="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"` + "\nexport EPBUILD_PREFIX\n")
	has := map[string]bool{}
	for _, c := range installed {
		has[c] = true
	}
	var py, ld []string
	for _, c := range installed {
		if dirExists(filepath.Join(dirOf(c), "python")) {
			py = append(py, `"$EPBUILD_PREFIX"/`+shellQuote(c+"/python"))
		}
		if dirExists(filepath.Join(dirOf(c), "lib")) {
			ld = append(ld, `"$EPBUILD_PREFIX"/`+shellQuote(c+"/lib"))
		}
	}
	if len(py) > 0 {
		fmt.Fprintf(&b, "export PYTHONPATH=%s\"${PYTHONPATH:+:$PYTHONPATH}\"\n", strings.Join(py, ":"))
	}
	if len(ld) > 0 {
		fmt.Fprintf(&b, "export LD_LIBRARY_PATH=%s\"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\"\n", strings.Join(ld, ":"))
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		v, err := shellTemplate(p.Env[k], has)
		if err != nil {
			return "", fmt.Errorf("env.sh for %s: %s: %w", p.Recipe, k, err)
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, v)
	}
	return b.String(), nil
}

// shellTemplate turns "{{nvshmem.prefix}}/lib/x" into "$EPBUILD_PREFIX"/'nvshmem/lib/x'.
func shellTemplate(v string, installed map[string]bool) (string, error) {
	var out strings.Builder
	rest := v
	for {
		loc := templRe.FindStringSubmatchIndex(rest)
		if loc == nil {
			break
		}
		lit, ref := rest[:loc[0]], rest[loc[2]:loc[3]]
		if lit != "" {
			out.WriteString(shellQuote(lit))
		}
		switch {
		case ref == "prefix":
			out.WriteString(`"$EPBUILD_PREFIX"`)
		case strings.HasSuffix(ref, ".prefix") && installed[strings.TrimSuffix(ref, ".prefix")]:
			out.WriteString(`"$EPBUILD_PREFIX"/` + shellQuote(strings.TrimSuffix(ref, ".prefix")))
		default:
			return "", fmt.Errorf("{{%s}} does not name an installed component", ref)
		}
		rest = rest[loc[1]:]
	}
	if rest != "" || out.Len() == 0 {
		out.WriteString(shellQuote(rest))
	}
	return out.String(), nil
}

// shellQuote single-quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
