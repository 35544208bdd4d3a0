package plan

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// FactsFromPlan gives the compat rules' view of a plan: each component's version,
// repository, commit, source kind, patch sets, CMake options, build env, expected NVSHMEM
// build variables and command steps; the toolchain as the recipe asks for it (versions
// are constraints at plan stage); the runtime env. Host facts are left nil (no host).
func FactsFromPlan(p *Plan) compat.Facts {
	f := compat.Facts{
		Recipe:  p.Recipe,
		Cluster: p.Cluster,
		Env:     maps.Clone(p.Env),
		Toolchain: compat.Toolchain{
			CUDA:    p.Toolchain.CUDA,
			Torch:   p.Toolchain.Torch,
			Python:  p.Toolchain.Python,
			GCC:     p.Toolchain.GCC,
			CMake:   p.Toolchain.CMake,
			Arch:    slices.Clone(p.Toolchain.Arch),
			Require: slices.Clone(p.Toolchain.Require),
		},
	}
	f.Runtime = runtimeFacts(p.Runtime)
	for _, c := range p.Components {
		fc := compat.Component{
			Name:    c.Name,
			Version: c.Version,
			Source:  c.Source.Kind(),
			Patches: slices.Clone(c.Patches),
		}
		switch {
		case c.Source.Git != nil:
			fc.Repo, fc.Commit = c.Source.Git.URL, c.Source.Git.Commit
		case c.Source.Archive != nil:
			fc.Repo = c.Source.Archive.URL
			if IsPrebuilt(c.Component) {
				// NVIDIA's built library: the rules on how it is built here do not judge it
				fc.Source = "prebuilt"
			}
		case c.Source.Python != nil:
			fc.Package = c.Source.Python.Package
			if fc.Version == "" {
				// the wheel's version is known at preflight; the recipe gives its constraint
				fc.Version = c.Source.Python.Version
			}
		}
		if c.PythonWheel != nil && c.Source.Python == nil {
			// built here and installed as that package (python-wheel): torch loads it
			fc.Package = c.PythonWheel.Package
		}
		for _, st := range c.Build {
			switch {
			case st.CMake != nil:
				fc.Options = mergeInto(fc.Options, st.CMake.Options)
				fc.BuildEnv = mergeInto(fc.BuildEnv, st.CMake.Env)
			case st.PythonExtension != nil:
				fc.BuildEnv = mergeInto(fc.BuildEnv, st.PythonExtension.Env)
			case st.Command != nil:
				fc.BuildEnv = mergeInto(fc.BuildEnv, st.Command.Env)
				fc.Commands = append(fc.Commands, slices.Clone(st.Command.Run))
			}
		}
		for _, ch := range c.Checks {
			fc.BuildVars = mergeInto(fc.BuildVars, ch.NVSHMEMBuildVars)
		}
		f.Components = append(f.Components, fc)
	}
	return f
}

// runtimeFacts are the recipe's runtime keys as the rules read them (compat.RuntimeKeys):
// numbers in decimal, low-latency as 1 or 0; nil when the recipe declares none.
func runtimeFacts(rt recipes.Runtime) map[string]string {
	f := map[string]string{}
	if rt.BufferBytes != nil {
		f["buffer-bytes"] = strconv.FormatUint(*rt.BufferBytes, 10)
	}
	for k, v := range map[string]*uint32{"gpus-per-node": rt.GPUsPerNode, "ranks": rt.Ranks, "hidden": rt.Hidden} {
		if v != nil {
			f[k] = strconv.FormatUint(uint64(*v), 10)
		}
	}
	if rt.LowLatency != nil {
		f["low-latency"] = "0"
		if *rt.LowLatency {
			f["low-latency"] = "1"
		}
	}
	if len(f) == 0 {
		return nil
	}
	return f
}

func mergeInto(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = map[string]string{}
	}
	maps.Copy(dst, src)
	return dst
}

// ApplyCatalog resolves `--set COMPONENT.version=V` through the catalogue of known
// releases. For each component whose version a --set changed, without a --set of its
// commit, ref, url, sha256 or strip, the source is replaced by the catalogue's pin for V:
// the pin of the component's current kind when the catalogue has one, else its preferred
// pin (switching between git and archive). The version becomes the catalogue's spelling
// ("3.5.19" → "3.5.19-1"). A component the catalogue does not list (deepep) keeps its
// source, as does a component taken from the Python environment (its version names the
// wheel's; for a package the catalogue does not list, nanobind, the environment must have
// exactly V) unless it has build steps: then V is built from the catalogue's pin (NCCL
// from NVIDIA/nccl at the release's tag instead of the one torch ships), and --set
// C.source=python keeps it in the Python environment. A release published only prebuilt
// (NVSHMEM 3.7) is copied from the vendor's archive for the plan's CUDA major instead of
// built (usePrebuilt). A version the catalogue does not know is an error: the old pin
// would build another release than the one asked for.
//
// Call it after doc.Apply(sets) and before doc.Validate.
func ApplyCatalog(doc *recipes.Doc, sets []string, cat *compat.Catalog) error {
	// a python-wheel names the package the source named before a switch replaces it
	doc.NameWheelPackages()
	versions := map[string]string{}
	kinds := map[string]string{}
	pinned := map[string]bool{}
	for _, s := range sets {
		key, val, ok := strings.Cut(s, "=")
		if !ok {
			continue
		}
		comp, field, ok := strings.Cut(key, ".")
		if !ok {
			continue
		}
		switch field {
		case "version":
			versions[comp] = val
		case "source":
			kinds[comp] = val
		case "commit", "ref", "url", "sha256", "strip":
			pinned[comp] = true
		}
	}
	// --set C.source=git|archive without a version: the recipe's version, from the other kind
	for name, kind := range kinds {
		if kind == "python" {
			continue // nothing to pin: the Python environment's
		}
		if _, ok := versions[name]; !ok {
			if c, ok := doc.Recipe.Component(name); ok {
				versions[name] = c.Version
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(versions)) {
		c, ok := doc.Recipe.Component(name)
		if ok && !pinned[name] && c.Source.Python != nil && !cat.Has(name) {
			// a package only the Python environment gives (nanobind): V is the release to
			// take from there, so preflight asks the environment for that one. A V that is
			// no version is validation's to report, once, at the flag.
			if _, err := compat.ParseVersion(versions[name]); err == nil {
				c.Source.Python.Version = "==" + versions[name]
			}
			continue
		}
		// a component from the Python environment keeps it unless it has steps to build a
		// release (the NCCL torch ships, or NVIDIA/nccl at V), and source=python keeps it
		if !ok || pinned[name] || !cat.Has(name) || c.Source.Python != nil && (len(c.Build) == 0 || kinds[name] == "python") {
			continue
		}
		v := versions[name]
		rel, ok := cat.Release(name, v)
		if !ok {
			return &recipes.Error{File: "--set " + name + ".version=" + v, Msg: fmt.Sprintf(
				"%s %s is not in the catalogue of known releases (%s); pin it with --set %s.commit=<40-hex> or --set %s.url=… --set %s.sha256=…",
				name, v, strings.Join(cat.Versions(name), ", "), name, name, name)}
		}
		kind, asked := kinds[name]
		if len(rel.SourcePins()) == 0 {
			if err := usePrebuilt(doc, c, rel, kinds[name], cat); err != nil {
				return err
			}
			continue
		}
		if !asked {
			kind = c.Source.Kind()
		}
		if c.Source.Python != nil {
			kind = "git" // a release built from source: its repository at the release's tag
		}
		pin, _ := cat.LookupKind(name, v, kind)
		if asked && pin.Kind() != kind {
			return &recipes.Error{File: "--set " + name + ".source=" + kind, Msg: fmt.Sprintf(
				"the catalogue has no %s pin of %s %s (it has: %s); pin one with --set %s.commit=… or --set %s.url=… --set %s.sha256=…",
				kind, name, rel.Version, strings.Join(pinKinds(rel), ", "), name, name, name)}
		}
		c.Version = rel.Version
		switch {
		case pin.Git != nil:
			c.Source = recipes.Source{Git: &recipes.GitSource{URL: pin.Git.URL, Commit: pin.Git.Commit, Ref: pin.Git.Ref}}
		case pin.Archive != nil:
			c.Source = recipes.Source{Archive: &recipes.ArchiveSource{URL: pin.Archive.URL, SHA256: pin.Archive.SHA256, Strip: pin.Archive.Strip}}
		}
	}
	return nil
}

// DeriveVersions gives each component whose commit a --set changed (without a --set of
// its version) the version of that commit: the catalogue's release pinned at it, else the
// highest version a tag pointing at it names (tags lists them: the mirror's and the
// cache's; nil for none), else none at all, with a note. Never the recipe's old label:
// the rules would judge the wrong release. recipe maps each component to the commit the
// recipe itself pins (a --set of the same commit keeps the recipe's version).
func DeriveVersions(doc *recipes.Doc, sets []string, recipe map[string]string, cat *compat.Catalog, tags func(repo, commit string) []string) {
	versioned, committed := map[string]bool{}, map[string]bool{}
	for _, s := range sets {
		key, _, _ := strings.Cut(s, "=")
		comp, field, _ := strings.Cut(key, ".")
		switch field {
		case "version":
			versioned[comp] = true
		case "commit":
			committed[comp] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(committed)) {
		c, ok := doc.Recipe.Component(name)
		if !ok || versioned[name] || c.Source.Git == nil || c.Source.Git.Commit == recipe[name] || !recipes.IsFullCommit(c.Source.Git.Commit) {
			continue // a short or malformed commit is validation's to report
		}
		g := c.Source.Git
		if rel, ok := cat.ReleaseAt(name, g.URL, g.Commit); ok {
			c.Version = rel.Version
			continue
		}
		if tags != nil {
			if v := tagVersion(tags(g.URL, g.Commit)); v != "" {
				c.Version = v
				continue
			}
		}
		c.Version = ""
		doc.Recipe.Notes = append(doc.Recipe.Notes, fmt.Sprintf(
			"%s %s is no catalogued release and no tag at hand points at it: its version is unknown, and rules on it are undecided (--set %s.version=V names it; --mirror DIR with a clone that has its tags finds it)",
			name, g.Commit[:12], name))
	}
}

// tagVersion is the highest vendor version among tag names ("v3.4.5-0" → 3.4.5-0).
func tagVersion(tags []string) string {
	var best compat.Version
	for _, t := range tags {
		v, err := compat.ParseVersion(t)
		if err == nil && (best.IsZero() || best.Less(v)) {
			best = v
		}
	}
	if best.IsZero() {
		return ""
	}
	return strings.TrimPrefix(best.String(), "v")
}

// pinKinds names the source kinds a release is pinned by, in the catalogue's order.
func pinKinds(r compat.Release) []string {
	var out []string
	for _, p := range r.Pins {
		out = append(out, p.Kind())
	}
	return out
}

// PrebuiltCopy is the one build step of a component taken from a vendor's prebuilt
// archive: the archive's lib/, include/ and bin/ (its top directory stripped) copied into
// the staged prefix, symlinks as links (libnvshmem_host.so → .so.3).
func PrebuiltCopy() []string {
	return []string{"sh", "-c", `mkdir -p "$DESTDIR$PREFIX" && cp -RP lib include bin "$DESTDIR$PREFIX/"`}
}

// IsPrebuilt reports whether a component is a vendor's prebuilt archive copied by
// PrebuiltCopy (what usePrebuilt makes of it), not a tree built here.
func IsPrebuilt(c recipes.Component) bool {
	return c.Source.Archive != nil && len(c.Build) == 1 && c.Build[0].Command != nil && slices.Equal(c.Build[0].Command.Run, PrebuiltCopy())
}

// usePrebuilt pins c to the release's prebuilt archive for the recipe's CUDA major and
// replaces its build steps with PrebuiltCopy, noting on the plan that the release is not
// built here and which of the recipe's CMake options no longer apply.
//
// Options are noted, not refused, because a prebuilt NVSHMEM carries every transport and
// bootstrap as a plugin that the runtime env selects (NVSHMEM_REMOTE_TRANSPORT,
// NVSHMEM_IB_ENABLE_IBGDA), and the recipe's checks (arch of libnvshmem_device.a, needed,
// nvshmem-build-vars) judge the copy after the build. One is refused: IBGDA off. It
// changes what DeepEP compiles: without IBGDA a recipe builds DeepEP's EFA shim or its
// non-IBGDA paths, against headers whose IBGDA device state the prebuilt has compiled in,
// and the rules judge IBGDA by that option (R6), so the plan would describe another
// NVSHMEM than the one DeepEP gets.
func usePrebuilt(doc *recipes.Doc, c *recipes.Component, rel compat.Release, kind string, cat *compat.Catalog) error {
	name := c.Name
	have := rel.PrebuiltCUDA()
	cudas := make([]string, len(have))
	for i, m := range have {
		cudas[i] = "CUDA " + m
	}
	if kind != "" {
		return &recipes.Error{File: "--set " + name + ".source=" + kind, Msg: fmt.Sprintf(
			"%s %s is published only prebuilt (NVIDIA's built library for %s), no %s source: drop --set %s.source, or pin a source with --set %s.commit=… or --set %s.url=… --set %s.sha256=…",
			name, rel.Version, strings.Join(cudas, ", "), kind, name, name, name, name)}
	}
	tc := doc.Recipe.Toolchain
	major := compat.CUDAMajor(tc.CUDA, tc.Torch)
	pin, ok := rel.Prebuilt(major)
	if !ok {
		why := fmt.Sprintf("the recipe's toolchain (cuda %q, torch %q) allows more than one CUDA major", tc.CUDA, tc.Torch)
		if major != "" {
			why = "the recipe's toolchain is CUDA " + major
		}
		return &recipes.Error{File: "--set " + name + ".version=" + rel.Version, Msg: fmt.Sprintf(
			"%s %s is published prebuilt for %s, one archive per CUDA major, and %s: name the build host's CUDA with --set toolchain.cuda=%s.0 (or a torch build such as --set toolchain.torch=2.11.0+cu%s0)",
			name, rel.Version, strings.Join(cudas, " and "), why, have[len(have)-1], have[len(have)-1])}
	}
	var opts []string
	for _, st := range c.Build {
		if st.CMake == nil {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(st.CMake.Options)) {
			v := st.CMake.Options[k]
			if k == "NVSHMEM_IBGDA_SUPPORT" && compat.CMakeOff(v) {
				return &recipes.Error{File: "--set " + name + ".version=" + rel.Version, Msg: fmt.Sprintf(
					"%s %s is NVIDIA's prebuilt library, built with IBGDA, and the recipe builds %s without it (%s=%s): DeepEP would compile against another NVSHMEM than the recipe describes; use a release built from source (%s), or --set %s.options.%s=1 if IBGDA is what you want",
					name, rel.Version, name, k, v, strings.Join(sourceVersions(cat, name), ", "), name, k)}
			}
			opts = append(opts, k+"="+v)
		}
	}
	if compat.CUDAMajor(tc.CUDA, "") != major {
		// chosen by torch's build tag (+cu130), a label: the toolchain now asks for that
		// major, so preflight holds it against the build host's nvcc itself
		m, _ := strconv.Atoi(major)
		narrow := fmt.Sprintf(">=%d.0, <%d.0", m, m+1)
		if tc.CUDA != "" {
			narrow = tc.CUDA + ", " + narrow
		}
		doc.Recipe.Toolchain.CUDA = narrow
	}
	c.Version = rel.Version
	c.Source = recipes.Source{Archive: &recipes.ArchiveSource{URL: pin.Archive.URL, SHA256: pin.Archive.SHA256, Strip: pin.Archive.Strip}}
	c.Build = []recipes.Step{{Command: &recipes.CommandStep{Run: PrebuiltCopy()}}}
	notes := []string{rel.Note(name)}
	if len(opts) > 0 {
		notes = append(notes, fmt.Sprintf("%s %s is NVIDIA's prebuilt library for CUDA %s, copied, not built: the recipe's CMake options for it do not apply (%s); the checks judge the copy",
			name, rel.Version, pin.CUDA, strings.Join(opts, " ")))
	}
	for _, n := range notes {
		if n != "" {
			doc.Recipe.Notes = append(doc.Recipe.Notes, n)
		}
	}
	return nil
}

// sourceVersions lists the releases of a component the catalogue pins as source.
func sourceVersions(cat *compat.Catalog, name string) []string {
	var out []string
	for _, v := range cat.Versions(name) {
		if r, _ := cat.Release(name, v); len(r.SourcePins()) > 0 && !r.Devel {
			out = append(out, r.Version)
		}
	}
	return out
}
