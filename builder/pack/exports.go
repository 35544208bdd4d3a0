package pack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/modulefile"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/sbom"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/builder/wheel"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/patches"
	"github.com/epbuild/epbuild/recipes"
	"github.com/epbuild/epbuild/recipes/userfile"
)

// What the package stage writes beside the artifact, each an exporter of what the build
// recorded: the wheels of the Python packages a recipe asks wheels of, and the SBOM.

// wheelsName is the package stage's record of its wheels (a cached package stage
// publishes them from it).
const wheelsName = "wheels.json"

// WheelDir is the directory beside the artifact that holds its wheels:
// <recipe>-<plan>.wheels (recipes of one DeepEP version would clash in one directory).
func WheelDir(p *plan.Plan) string { return manifest.WheelDir(ArtifactName(p)) }

// wantsWheel reports whether a component asks for a wheel (python-extension wheel: true).
func wantsWheel(c *plan.PlanComponent) bool {
	for _, s := range c.Build {
		if s.PythonExtension != nil && s.PythonExtension.Wheel {
			return true
		}
	}
	return false
}

// packWheels packs the python/ tree of each component that asks for a wheel into
// dir/wheels, stamped with sde, and records them in dir/wheels.json. pkgs are the
// Python environment's packages the build recorded (the toolchain's).
func packWheels(p *plan.Plan, comps []manifest.ComponentResult, dir string, sde int64, pkgs map[string]toolchain.PythonPackage) ([]manifest.WheelFile, error) {
	var out []manifest.WheelFile
	for _, c := range comps {
		pc, ok := p.Component(c.Name)
		if !ok || !wantsWheel(pc) {
			continue
		}
		wd := filepath.Join(dir, "wheels")
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return nil, fmt.Errorf("package %s: %w", p.Recipe, err)
		}
		reqs, err := wheelRequirements(p, pc, pkgs)
		if err != nil {
			return nil, fmt.Errorf("package %s: the wheel of %s: %w", p.Recipe, c.Name, err)
		}
		info, err := wheel.PackRequiring(filepath.Join(c.Prefix, "python"), wd, time.Unix(sde, 0), reqs)
		if err != nil {
			return nil, fmt.Errorf("package %s: the wheel of %s: %w", p.Recipe, c.Name, err)
		}
		out = append(out, manifest.WheelFile{Component: c.Name, Info: info})
	}
	for _, c := range comps {
		pc, ok := p.Component(c.Name)
		if !ok {
			continue
		}
		name, version, ok, err := replacementWheel(p, pc)
		if err != nil {
			return nil, fmt.Errorf("package %s: %w", p.Recipe, err)
		}
		if !ok {
			continue
		}
		wd := filepath.Join(dir, "wheels")
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return nil, fmt.Errorf("package %s: %w", p.Recipe, err)
		}
		files, err := wheelLayout(c.Prefix, pc.PythonWheel)
		if err != nil {
			return nil, fmt.Errorf("package %s: the %s wheel of %s: %w", p.Recipe, name, c.Name, err)
		}
		info, err := wheel.PackLayout(wheel.Layout{Name: name, Version: version, Tag: platformTag(), Files: files,
			Summary: fmt.Sprintf("%s %s built from source by epbuild (recipe %s), in place of %s", c.Name, pc.Version, p.Recipe, name)},
			wd, time.Unix(sde, 0))
		if err != nil {
			return nil, fmt.Errorf("package %s: the %s wheel of %s: %w", p.Recipe, name, c.Name, err)
		}
		// the version the build's Python environment had: what puts it back
		out = append(out, manifest.WheelFile{Component: c.Name, Info: info,
			Replaces: &manifest.Replaced{Package: name, Version: pkgs[name].Version}})
	}
	if err := store.WriteJSON(dir, wheelsName, out); err != nil {
		return nil, fmt.Errorf("package %s: %w", p.Recipe, err)
	}
	return out, nil
}

// replacementWheel is the name and version of the wheel a python-wheel component built
// here is packed as: the package it replaces, at <release>+epbuild.<the plan key's first
// 12>, a PEP 440 local version (pip orders it after the release it was built from, and
// two plans of one release apart). ok is false for any other component.
func replacementWheel(p *plan.Plan, pc *plan.PlanComponent) (name, version string, ok bool, err error) {
	w := pc.PythonWheel
	if w == nil || pc.Source.Python != nil || len(pc.Build) == 0 {
		return "", "", false, nil
	}
	v, err := compat.ParseVersion(pc.Version)
	if err != nil {
		return "", "", false, fmt.Errorf("the %s wheel of %s needs the release it is built from (--set %s.version=V): %w", w.Package, pc.Name, pc.Name, err)
	}
	return w.Package, v.Core() + "+epbuild." + p.Key[:min(12, len(p.Key))], true, nil
}

// wheelLayout maps the files a python-wheel packs, each under w.Dir at its path in the
// prefix, to the regular files they are read from: a symbolic link (lib/libnccl.so.2 →
// libnccl.so.2.30.7) is packed as the file it names, which must lie in the prefix.
func wheelLayout(prefix string, w *recipes.PythonWheel) (map[string]string, error) {
	root, err := filepath.EvalSymlinks(prefix)
	if err != nil {
		return nil, fmt.Errorf("read the staged prefix: %w", err)
	}
	files := map[string]string{}
	add := func(rel, p string) error {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if in, err := filepath.Rel(root, real); err != nil || !filepath.IsLocal(in) {
			return fmt.Errorf("%s is a link to %s, outside the component's prefix", rel, real)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("%s is a link to a directory (%s): name that directory instead", rel, real)
		}
		files[path.Join(w.Dir, filepath.ToSlash(rel))] = real
		return nil
	}
	for _, f := range w.Files {
		top := filepath.Join(prefix, filepath.FromSlash(f))
		real, err := filepath.EvalSymlinks(top)
		if err != nil {
			return nil, fmt.Errorf("python-wheel file %s: the build installed no such file: %w", f, err)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			if err := add(filepath.FromSlash(f), top); err != nil {
				return nil, err
			}
			continue
		}
		err = filepath.WalkDir(real, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(real, p)
			return add(filepath.Join(filepath.FromSlash(f), rel), p)
		})
		if err != nil {
			return nil, fmt.Errorf("python-wheel files under %s: %w", f, err)
		}
	}
	return files, nil
}

// platformTag is the wheel tag of a package of this machine's libraries and no Python
// code: py3-none-linux_<machine>, as pip on Linux accepts it.
func platformTag() string {
	machine := map[string]string{"amd64": "x86_64", "arm64": "aarch64", "ppc64le": "ppc64le", "s390x": "s390x"}[runtime.GOARCH]
	if machine == "" {
		machine = runtime.GOARCH
	}
	return "py3-none-linux_" + machine
}

// wheelRequirements are the packages of the Python environment that c was built
// against (the components it depends on, directly or not, whose source is a Python
// package), each at the version the build recorded: a wheel built against NVSHMEM's
// wheel 3.4.5 needs that NVSHMEM where it is installed, and pip should say so. A
// component built here and packed as a package (python-wheel) is required as that wheel.
func wheelRequirements(p *plan.Plan, c *plan.PlanComponent, pkgs map[string]toolchain.PythonPackage) ([]wheel.Requirement, error) {
	var reqs []wheel.Requirement
	seen := map[string]bool{c.Name: true}
	queue := slices.Clone(c.Depends)
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] {
			continue
		}
		seen[name] = true
		d, ok := p.Component(name)
		if !ok {
			continue
		}
		queue = append(queue, d.Depends...)
		// built here and packed in place of a package (python-wheel): that wheel
		if name, version, ok, err := replacementWheel(p, d); err != nil {
			return nil, err
		} else if ok {
			reqs = append(reqs, wheel.Requirement{Name: name, Version: version})
			continue
		}
		if d.Source.Python == nil {
			continue
		}
		pk, ok := pkgs[d.Source.Python.Package]
		if !ok || pk.Version == "" {
			return nil, fmt.Errorf("%s is built against the Python package %s, whose version the build did not record", c.Name, d.Source.Python.Package)
		}
		reqs = append(reqs, wheel.Requirement{Name: d.Source.Python.Package, Version: pk.Version})
	}
	slices.SortFunc(reqs, func(a, b wheel.Requirement) int { return strings.Compare(a.Name, b.Name) })
	return reqs, nil
}

// SBOMSuffix names the SBOM beside an artifact (ARTIFACT.cdx.json); epbuild push stores it.
const SBOMSuffix = ".cdx.json"

// SBOMCredits name who supplies an artifact and who made it, for its SBOM's metadata:
// nobody unless given (epbuild sbom --supplier, --author).
type SBOMCredits struct {
	Supplier string
	Authors  []string
}

// sbomInput is the SBOM's view of a manifest: the artifact's name and sha256 come from
// the caller (the package stage, or an install's receipt).
func sbomInput(m *manifest.Manifest, artifact, sum, tool string, cr SBOMCredits) sbom.Input {
	in := sbom.Input{Plan: m.Plan, Patches: map[string][]*patches.SetResult{}, Python: map[string]string{}, Files: m.Files,
		Artifact: artifact, ArtifactSHA256: sum, BuiltBy: m.Epbuild, Tool: tool, SourceDateEpoch: m.SourceDateEpoch,
		PatchDiffs: shippedPatchDiffs(m.Plan), Supplier: cr.Supplier, Authors: cr.Authors}
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
			{Name: "cuda", Version: t.CUDA, Path: t.NVCC}, {Name: "gcc", Version: t.GCC}, {Name: "g++", Version: t.GXX, Path: t.CXX},
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

// shippedPatchDiffs are the bytes of the patch files of the shipped sets the plan names,
// by sha256: what the SBOM carries as their diffs. Only shipped sets: epbuild sbom makes
// the BOM again from the manifest, where a local set's directory may be gone, and must
// write the same bytes. A patch applied with other bytes (a local set that shadows a
// shipped one) has another sha256 and finds nothing here.
func shippedPatchDiffs(p *plan.Plan) map[string][]byte {
	out := map[string][]byte{}
	if p == nil {
		return out
	}
	cat, err := patches.Load()
	if err != nil {
		return out // the shipped sets are epbuild's own and load in every test; no text then
	}
	for _, c := range p.Components {
		for _, ps := range c.PatchSets {
			set, ok := cat.Get(ps.Name)
			if !ok {
				continue
			}
			for _, pt := range set.Patches {
				if pt.Kind() != patches.KindFile {
					continue
				}
				if b, err := set.FileBytes(context.Background(), pt); err == nil {
					out[manifest.SHA256Hex(b)] = b
				}
			}
		}
	}
	return out
}

// sbomBytes is the CycloneDX JSON of m.
func sbomBytes(m *manifest.Manifest, artifact, sum, tool string, cr SBOMCredits) ([]byte, error) {
	bom, err := sbom.Build(sbomInput(m, artifact, sum, tool, cr))
	if err != nil {
		return nil, err
	}
	return bom.Marshal()
}

// SBOM is the CycloneDX 1.6 SBOM of an artifact (ARTIFACT.tar.zst: its manifest, and its
// sha256, checked against ARTIFACT.sha256 when there is one) or of an install (PREFIX:
// its manifest, and the artifact its receipt names). tool is this epbuild's version.
func SBOM(ctx context.Context, path, tool string, cr SBOMCredits) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &plan.UsageError{Err: fmt.Errorf("sbom: %w", err)}
	}
	if st.IsDir() {
		m, raw, err := manifest.ReadInstalledManifest(path)
		if err != nil {
			return nil, &plan.UsageError{Err: fmt.Errorf("sbom: %w", err)}
		}
		art, sum := "", ""
		r, err := manifest.ReadReceipt(path)
		switch {
		case err == nil && r.ManifestSHA256 != manifest.SHA256Hex(raw):
			return nil, &plan.UsageError{Err: fmt.Errorf("sbom: %s changed since install (the receipt pins sha256 %s): run epbuild verify-install --prefix %s", filepath.Join(path, manifest.ManifestName), store.ShortKey(r.ManifestSHA256), path)}
		case err == nil:
			art, sum = r.Artifact, r.SHA256
		case !errors.Is(err, fs.ErrNotExist):
			return nil, &plan.UsageError{Err: fmt.Errorf("sbom: %w", err)}
		}
		return sbomBytes(m, art, sum, tool, cr)
	}
	if !st.Mode().IsRegular() {
		return nil, &manifest.BadArtifactError{Artifact: path, Err: &userfile.NotRegularError{Path: path, Mode: st.Mode(), Fix: "an artifact is read whole; give the file itself"}}
	}
	sum, err := install.CheckArtifactSum(path)
	if err != nil {
		return nil, err
	}
	m, _, err := install.ReadArtifactManifest(ctx, path, st.Size())
	if err != nil {
		return nil, err
	}
	return sbomBytes(m, filepath.Base(path), sum, tool, cr)
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
		return modulefile.Module{}, &plan.UsageError{Err: err}
	}
	m, _, err := manifest.ReadInstalledManifest(prefix)
	if err != nil {
		return modulefile.Module{}, &plan.UsageError{Err: fmt.Errorf("module: %w", err)}
	}
	env, py, ld, err := envsh.RuntimeParts(m.Plan, manifest.InstalledPrefixes(m, prefix))
	if err != nil {
		return modulefile.Module{}, err
	}
	mod := modulefile.Module{Name: opts.Name, Version: opts.Version, Family: "deepep"}
	if mod.Name == "" {
		mod.Name = m.Recipe
	}
	if mod.Version == "" {
		mod.Version = store.ShortKey(m.PlanKey)
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
	if r, err := manifest.ReadReceipt(prefix); err == nil {
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
	if pre := envsh.SplitPaths("LD_PRELOAD", env["LD_PRELOAD"]); len(pre) > 0 {
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
			return mod, &plan.UsageError{Err: fmt.Errorf("module of %s: %w", prefix, err)}
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
