package pack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
)

// zstdLevel is pinned: the level changes the artifact's bytes.
const zstdLevel = zstd.SpeedDefault

// Input is what the package stage packs and records: the plan, its components as built
// (their prefixes and commit times), and what the manifest records beside them.
type Input struct {
	Plan       *plan.Plan
	Components []manifest.ComponentResult
	// SourceDateEpoch, when set, stamps the artifact; else the newest pinned commit's time.
	SourceDateEpoch string
	// Toolchain is the build's: the manifest records it, the wheels require its Python
	// packages.
	Toolchain *toolchain.Toolchain
	// Findings are the compatibility rules' warnings; BuildFacts and BuildFactNotes what
	// the build read of its headers and trees.
	Findings                   []compat.Finding
	BuildFacts, BuildFactNotes map[string]string
	// Version is epbuild's: in the SBOM beside the artifact, not in its bytes.
	Version string
}

func sourceDateEpoch(set string, comps []manifest.ComponentResult) (int64, error) {
	if set != "" {
		n, err := strconv.ParseInt(set, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("SOURCE_DATE_EPOCH=%q is not a number of seconds", set)
		}
		return n, nil
	}
	// default: the newest pinned commit's time, so the same pins give the same bytes
	var t int64
	for _, c := range comps {
		if c.CommitTime > t {
			t = c.CommitTime
		}
	}
	return t, nil
}

// Write writes env.sh and the manifest and packs them with the staged prefixes of
// in.Components, each under its component's name, reproducibly into dir/<artifact>,
// with its .sha256, its SBOM and its wheels beside it. The components' results as the
// manifest records them come from checked, which Write calls when every file is hashed:
// the runner hashes the prefixes while the checks run, and the manifest, the artifact's
// first entry, is written then. An error from checked stops the pack; nil checked:
// in.Components are the results.
func Write(ctx context.Context, in Input, dir string, checked func() ([]manifest.ComponentResult, error)) error {
	p := in.Plan
	if checked == nil {
		checked = func() ([]manifest.ComponentResult, error) { return in.Components, nil }
	}
	sde, err := sourceDateEpoch(in.SourceDateEpoch, in.Components)
	if err != nil {
		return err
	}
	comps := in.Components
	// The prefixes are packed where they are: no tree is laid out for the artifact.
	var mounts []archive.Mount
	prefixes := map[string]string{}
	for _, c := range comps {
		if pc, _ := p.Component(c.Name); pc.Source.Python == nil && c.Prefix != "" {
			mounts = append(mounts, archive.Mount{Name: c.Name, Dir: c.Prefix})
			prefixes[c.Name] = c.Prefix
		}
	}
	script, err := envsh.ScriptWith(p, func(c string) string { return prefixes[c] }, installedComponents(p, comps))
	if err != nil {
		return err
	}
	wheels, err := packWheels(p, comps, dir, sde, in.Toolchain.PythonPackages)
	if err != nil {
		return err
	}
	plan := *p
	plan.File = ""
	m := manifest.Manifest{
		Format: manifest.ManifestFormat, Recipe: p.Recipe, PlanKey: p.Key, Plan: &plan,
		SourceDateEpoch: sde, Toolchain: in.Toolchain.Record(), Env: p.Env, Findings: in.Findings,
		BuildFacts: in.BuildFacts, BuildFactNotes: in.BuildFactNotes, Wheels: wheels,
	}
	out := filepath.Join(dir, ArtifactName(p))
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("package %s: %w", p.Recipe, err)
	}
	// The manifest, which holds every file's hash, is made from the hashes Pack computes
	// on every core before it compresses (the manifest comes first: artifact format 2),
	// and the artifact's own sha256 as it is written.
	rep, err := archive.Pack(ctx, "", f, archive.PackOptions{
		Mounts:  mounts,
		ModTime: time.Unix(sde, 0),
		Level:   zstdLevel,
		Extra:   []archive.File{{Name: manifest.EnvName, Mode: envsh.EnvMode, Data: []byte(script)}},
		Late: &archive.LateFile{Name: manifest.ManifestName, Mode: 0o644, Data: func(entries []archive.Entry) ([]byte, error) {
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
	built.Epbuild = in.Version
	bom, err := sbomBytes(&built, filepath.Base(out), rep.SHA256, in.Version, SBOMCredits{})
	if err != nil {
		return fmt.Errorf("package %s: %w", p.Recipe, err)
	}
	return os.WriteFile(out+SBOMSuffix, bom, 0o644)
}

// installedComponents lists the components whose files the artifact carries.
func installedComponents(p *plan.Plan, comps []manifest.ComponentResult) []string {
	var out []string
	for _, c := range comps {
		pc, _ := p.Component(c.Name)
		if pc.Source.Python == nil && c.Prefix != "" {
			out = append(out, c.Name)
		}
	}
	return out
}

// Set is an output set where it was published: the artifact, its sha256, the SBOM beside
// it and the wheels (WheelDir).
type Set struct {
	Artifact, SHA256, SBOM string
	Wheels                 []string
}

// tmpPrefix marks a file or directory of an output set being written: NAME.tmp-PID in
// the output directory. A run that dies leaves them; the next run removes those whose
// process is gone (leftoverTemps).
const tmpPrefix = ".tmp-"

func tmpName(path string) string { return path + tmpPrefix + strconv.Itoa(os.Getpid()) }

// Publish writes the output set of a build into outDir whole or not at all: the
// artifact, ARTIFACT.sha256, ARTIFACT.cdx.json and the wheels (WheelDir), copied from the
// package stage's dir. Each is first written under a temporary name beside its final
// one; only when all are complete are they renamed into place, the sidecars first and
// the artifact last, so that whoever sees the artifact sees its sidecars (an artifact
// already there from an earlier build of the same plan holds the same bytes). On any
// failure what was written is removed. A full file system is a NoSpaceError (exit 3).
func Publish(p *plan.Plan, dir, outDir, sum string) (*Set, error) {
	src := filepath.Join(dir, ArtifactName(p))
	res := &Set{SHA256: sum, Artifact: filepath.Join(outDir, ArtifactName(p))}
	res.SBOM = res.Artifact + SBOMSuffix
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, PublishError(err, src, res.Artifact)
	}
	removeLeftoverTemps(outDir)
	var ws []manifest.WheelFile
	if err := store.ReadJSON(dir, wheelsName, &ws); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	type move struct{ tmp, to string }
	var moves []move // in the order they are renamed into place
	undo := func() {
		for _, m := range moves {
			os.RemoveAll(m.tmp)
		}
	}
	fail := func(err error, from, to string) (*Set, error) {
		undo()
		return nil, PublishError(err, from, to)
	}
	if len(ws) > 0 {
		wd := filepath.Join(outDir, WheelDir(p))
		tmp := tmpName(wd)
		moves = append(moves, move{tmp, wd})
		if err := os.Mkdir(tmp, 0o755); err != nil {
			return fail(err, src, wd)
		}
		for _, w := range ws {
			from := filepath.Join(dir, "wheels", w.File)
			got, err := disk.CopyHashed(from, filepath.Join(tmp, w.File))
			if err == nil && got != w.SHA256 {
				err = fmt.Errorf("the stored wheel %s has sha256 %s, its record says %s: the cache is damaged; rebuild it with --force=package", from, got, w.SHA256)
			}
			if err != nil {
				return fail(err, from, wd) // PublishError names wd's directory: outDir
			}
			res.Wheels = append(res.Wheels, filepath.Join(wd, w.File))
		}
	}
	bom, err := os.ReadFile(src + SBOMSuffix)
	if err != nil {
		undo()
		return nil, fmt.Errorf("write the SBOM beside %s: %w", res.Artifact, err)
	}
	for _, f := range []struct {
		to string
		b  []byte
	}{{res.SBOM, bom}, {res.Artifact + ".sha256", []byte(sum + "  " + filepath.Base(res.Artifact) + "\n")}} {
		tmp := tmpName(f.to)
		moves = append(moves, move{tmp, f.to})
		if err := writeSynced(tmp, f.b); err != nil {
			return fail(err, src, f.to)
		}
	}
	// an artifact already there with the same bytes is left as it is
	if got, err := disk.FileSHA256(res.Artifact); err != nil || got != sum {
		tmp := tmpName(res.Artifact)
		moves = append(moves, move{tmp, res.Artifact})
		got, err := disk.CopyHashed(src, tmp)
		if err == nil && got != sum {
			err = fmt.Errorf("the stored artifact %s has sha256 %s, its record says %s: the cache is damaged; rebuild it with --force=package", src, got, sum)
		}
		if err != nil {
			return fail(err, src, res.Artifact)
		}
	}
	for i, m := range moves {
		if err := renameReplacing(m.tmp, m.to); err != nil {
			moves = moves[i:]
			return fail(err, m.tmp, m.to)
		}
	}
	return res, nil
}

// writeSynced writes b to a new file path (0644).
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// renameReplacing renames tmp to path; a directory already at path (the wheels of an
// earlier build of the same plan) is moved aside first and removed after.
func renameReplacing(tmp, path string) error {
	err := os.Rename(tmp, path)
	if err == nil {
		return nil
	}
	st, serr := os.Lstat(path)
	if serr != nil || !st.IsDir() {
		return err
	}
	old := tmpName(path + ".old")
	if err := os.Rename(path, old); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Rename(old, path)
		return err
	}
	return os.RemoveAll(old)
}

// removeLeftoverTemps removes, from outDir, the temporary names of output sets whose
// writer is gone (a run that was killed, or lost its machine): NAME.tmp-PID where NAME
// is an artifact, its .sha256 or .cdx.json, or a wheel directory, and no process PID
// runs. A run of another epbuild still writing is left alone.
func removeLeftoverTemps(outDir string) {
	ents, err := os.ReadDir(outDir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name, pid, ok := strings.Cut(e.Name(), tmpPrefix)
		if !ok || !outputName(name) {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil || n <= 0 || (n != os.Getpid() && processRuns(n)) {
			continue
		}
		os.RemoveAll(filepath.Join(outDir, e.Name()))
	}
}

// outputName reports whether name is one of an output set's names.
func outputName(name string) bool {
	name = strings.TrimSuffix(name, ".old")
	for _, s := range []string{".tar.zst", ".tar.zst.sha256", ".tar.zst" + SBOMSuffix, ".wheels"} {
		if strings.HasSuffix(name, s) {
			return true
		}
	}
	return false
}

// processRuns reports whether a process pid exists (signal 0: EPERM means it does, as
// another user's).
func processRuns(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
