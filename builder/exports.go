package builder

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/modulefile"
	"github.com/epbuild/epbuild/builder/sbom"
	"github.com/epbuild/epbuild/builder/userfile"
	"github.com/epbuild/epbuild/builder/wheel"
	"github.com/epbuild/epbuild/patches"
)

// What the package stage writes beside the artifact, each an exporter of what the build
// recorded: the wheels of the Python packages a recipe asks wheels of, and the SBOM.

// WheelFile is a wheel the package stage made of a component's python/ tree.
type WheelFile struct {
	Component string `json:"component"`
	wheel.Info
}

// wheelsName is the package stage's record of its wheels (a cached package stage
// publishes them from it).
const wheelsName = "wheels.json"

// WheelDir is the directory beside the artifact that holds its wheels:
// <recipe>-<plan>.wheels (recipes of one DeepEP version would clash in one directory).
func WheelDir(p *Plan) string { return WheelDirOf(ArtifactName(p)) }

// WheelDirOf is the wheel directory beside the artifact of that file name.
func WheelDirOf(artifact string) string { return strings.TrimSuffix(artifact, ".tar.zst") + ".wheels" }

// wantsWheel reports whether a component asks for a wheel (python-extension wheel: true).
func wantsWheel(c *PlanComponent) bool {
	for _, s := range c.Build {
		if s.PythonExtension != nil && s.PythonExtension.Wheel {
			return true
		}
	}
	return false
}

// packWheels packs the python/ tree of each component that asks for a wheel into
// dir/wheels, stamped with sde, and records them in dir/wheels.json.
func packWheels(p *Plan, res *Result, dir string, sde int64) ([]WheelFile, error) {
	var out []WheelFile
	for _, c := range res.Components {
		pc, ok := p.Component(c.Name)
		if !ok || !wantsWheel(pc) {
			continue
		}
		wd := filepath.Join(dir, "wheels")
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return nil, fmt.Errorf("package %s: %w", p.Recipe, err)
		}
		info, err := wheel.Pack(filepath.Join(c.Prefix, "python"), wd, time.Unix(sde, 0))
		if err != nil {
			return nil, fmt.Errorf("package %s: the wheel of %s: %w", p.Recipe, c.Name, err)
		}
		out = append(out, WheelFile{Component: c.Name, Info: info})
	}
	if err := WriteJSON(dir, wheelsName, out); err != nil {
		return nil, fmt.Errorf("package %s: %w", p.Recipe, err)
	}
	return out, nil
}

// SBOMSuffix names the SBOM beside an artifact (ARTIFACT.cdx.json); epbuild push stores it.
const SBOMSuffix = ".cdx.json"

// sbomInput is the SBOM's view of a manifest: the artifact's name and sha256 come from
// the caller (the package stage, or an install's receipt).
func sbomInput(m *Manifest, artifact, sum, tool string) sbom.Input {
	in := sbom.Input{Plan: m.Plan, Patches: map[string][]*patches.SetResult{}, Python: map[string]string{}, Files: m.Files,
		Artifact: artifact, ArtifactSHA256: sum, BuiltBy: m.Epbuild, Tool: tool, SourceDateEpoch: m.SourceDateEpoch}
	for _, c := range m.Components {
		in.Patches[c.Name] = c.Patches
	}
	for _, w := range m.Wheels {
		in.Wheels = append(in.Wheels, sbom.Wheel{Component: w.Component, File: w.File, Dir: WheelDir(m.Plan), SHA256: w.SHA256, Size: w.Size})
	}
	if t := m.Toolchain; t != nil {
		for name, pk := range t.PythonPackages {
			in.Python[name] = pk.Version
		}
		for _, x := range []sbom.Tool{
			{Name: "python", Version: t.PythonVersion, Path: t.Python}, {Name: "setuptools", Version: t.Setuptools, Package: true},
			{Name: "wheel", Version: t.Wheel, Package: true}, {Name: "torch", Version: t.Torch, Package: true},
			{Name: "cuda", Version: t.CUDA, Path: t.NVCC}, {Name: "gcc", Version: t.GCC}, {Name: "g++", Version: t.GXX},
			{Name: "cmake", Version: t.CMake}, {Name: "ninja", Version: t.Ninja}, {Name: "git", Version: t.Git},
			{Name: "protobuf", Version: t.Protobuf, Path: t.ProtobufHeader},
		} {
			in.Toolchain = append(in.Toolchain, x)
		}
		for _, name := range slices.Sorted(maps.Keys(t.PythonPackages)) {
			in.Toolchain = append(in.Toolchain, sbom.Tool{Name: name, Version: t.PythonPackages[name].Version, Path: t.PythonPackages[name].Dir, Package: true})
		}
		for _, kv := range [][2]string{{"os", t.OS}, {"arch", t.Arch}, {"cuda-home", t.CUDAHome}, {"torch-cuda", t.TorchCUDA},
			{"rdma-core", t.RDMACore}, {"libfabric-home", t.LibfabricHome}, {"gdrcopy-home", t.GDRCopyHome}, {"mpi-home", t.MPIHome},
			{"abseil", t.Abseil}, {"gtest", t.GTest}} {
			if kv[1] != "" {
				in.Properties = append(in.Properties, sbom.Property{Name: "epbuild:toolchain:" + kv[0], Value: kv[1]})
			}
		}
	}
	return in
}

// sbomBytes is the CycloneDX JSON of m.
func sbomBytes(m *Manifest, artifact, sum, tool string) ([]byte, error) {
	bom, err := sbom.Build(sbomInput(m, artifact, sum, tool))
	if err != nil {
		return nil, err
	}
	return bom.Marshal()
}

// SBOM is the CycloneDX 1.6 SBOM of an artifact (ARTIFACT.tar.zst: its manifest, and its
// sha256, checked against ARTIFACT.sha256 when there is one) or of an install (PREFIX:
// its manifest, and the artifact its receipt names). tool is this epbuild's version.
func SBOM(ctx context.Context, path, tool string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &UsageError{Err: fmt.Errorf("sbom: %w", err)}
	}
	if st.IsDir() {
		m, raw, err := ReadInstalledManifest(path)
		if err != nil {
			return nil, &UsageError{Err: fmt.Errorf("sbom: %w", err)}
		}
		art, sum := "", ""
		r, err := ReadReceipt(path)
		switch {
		case err == nil && r.ManifestSHA256 != sha256Hex(raw):
			return nil, &UsageError{Err: fmt.Errorf("sbom: %s changed since install (the receipt pins sha256 %s): run epbuild verify-install --prefix %s", filepath.Join(path, ManifestName), shortKey(r.ManifestSHA256), path)}
		case err == nil:
			art, sum = r.Artifact, r.SHA256
		case !errors.Is(err, fs.ErrNotExist):
			return nil, &UsageError{Err: fmt.Errorf("sbom: %w", err)}
		}
		return sbomBytes(m, art, sum, tool)
	}
	if !st.Mode().IsRegular() {
		return nil, &BadArtifactError{Artifact: path, Err: &userfile.NotRegularError{Path: path, Mode: st.Mode(), Fix: "an artifact is read whole; give the file itself"}}
	}
	sum, err := checkArtifactSum(path)
	if err != nil {
		return nil, err
	}
	m, _, err := readArtifactManifest(ctx, path, st.Size())
	if err != nil {
		return nil, err
	}
	return sbomBytes(m, filepath.Base(path), sum, tool)
}

// ModuleOptions say which install to write a modulefile for, under what name.
type ModuleOptions struct {
	Prefix string
	// Name and Version load it (module load NAME/VERSION); "": the recipe and the short
	// plan key.
	Name, Version string
}

// Module is the environment module of the install at opts.Prefix, from its manifest
// (and receipt): what env.sh exports, as prepends for PYTHONPATH and LD_LIBRARY_PATH and
// as variables for the recipe's runtime env and EPBUILD_PREFIX.
func Module(opts ModuleOptions) (modulefile.Module, error) {
	prefix, err := filepath.Abs(opts.Prefix)
	if err != nil {
		return modulefile.Module{}, &UsageError{Err: err}
	}
	m, _, err := ReadInstalledManifest(prefix)
	if err != nil {
		return modulefile.Module{}, &UsageError{Err: fmt.Errorf("module: %w", err)}
	}
	env, py, ld, err := runtimeParts(m.Plan, installedPrefixes(m, prefix))
	if err != nil {
		return modulefile.Module{}, err
	}
	mod := modulefile.Module{Name: opts.Name, Version: opts.Version, Family: "deepep"}
	if mod.Name == "" {
		mod.Name = m.Recipe
	}
	if mod.Version == "" {
		mod.Version = shortKey(m.PlanKey)
	}
	var comps []string
	for _, c := range m.Plan.Components {
		d := c.Name
		if c.Version != "" {
			d += " " + c.Version
		}
		if pin := c.Source.Pin(); pin != "" {
			d += " (" + shortPin(pin) + ")"
		}
		for _, s := range c.PatchSets {
			d += " +" + s.Name
		}
		comps = append(comps, d)
	}
	mod.Whatis = []string{
		"Name: " + m.Recipe,
		"Version: " + mod.Version,
		"Description: DeepEP + NVSHMEM built by epbuild for " + m.Plan.Cluster,
		"Plan: " + m.PlanKey,
		"Components: " + strings.Join(comps, ", "),
		"Prefix: " + prefix,
	}
	if r, err := ReadReceipt(prefix); err == nil {
		mod.Whatis = append(mod.Whatis, "Artifact: "+r.Artifact+" (sha256 "+r.SHA256+")")
	}
	mod.Help = fmt.Sprintf("%s (plan %s) installed at %s by epbuild.\nCheck it on a node with: epbuild verify-install --host (EPBUILD_PREFIX is set).", m.Recipe, m.PlanKey, prefix)
	if len(py) > 0 {
		mod.Prepend = append(mod.Prepend, modulefile.PathVar{Name: "PYTHONPATH", Dirs: py})
		delete(env, "PYTHONPATH")
	}
	if len(ld) > 0 {
		mod.Prepend = append(mod.Prepend, modulefile.PathVar{Name: "LD_LIBRARY_PATH", Dirs: ld})
		delete(env, "LD_LIBRARY_PATH")
	}
	// LD_PRELOAD goes in front of a site's own preload (XALT, Darshan, a profiler)
	if pre := splitPaths("LD_PRELOAD", env["LD_PRELOAD"]); len(pre) > 0 {
		mod.Prepend = append(mod.Prepend, modulefile.PathVar{Name: "LD_PRELOAD", Dirs: pre})
		delete(env, "LD_PRELOAD")
	}
	// PREFIX/bin holds the epbuild that installed it (verify-install on the nodes)
	mod.Prepend = append(mod.Prepend, modulefile.PathVar{Name: "PATH", Dirs: []string{filepath.Join(prefix, "bin")}})
	mod.Set = append(mod.Set, modulefile.Var{Name: "EPBUILD_PREFIX", Value: prefix})
	for _, k := range slices.Sorted(maps.Keys(env)) {
		mod.Set = append(mod.Set, modulefile.Var{Name: k, Value: env[k]})
	}
	if err := mod.Check(); err != nil {
		var ne *modulefile.NameError
		if errors.As(err, &ne) {
			return mod, &UsageError{Err: fmt.Errorf("module of %s: %w", prefix, err)}
		}
		return mod, fmt.Errorf("module of %s: %w", prefix, err)
	}
	return mod, nil
}

// shortPin abbreviates a pin for a one-line description.
func shortPin(pin string) string {
	if s, ok := strings.CutPrefix(pin, "sha256:"); ok && len(s) > 12 {
		return "sha256:" + s[:12]
	}
	if len(pin) == 40 {
		return pin[:12]
	}
	return pin
}
