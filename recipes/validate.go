package recipes

import (
	"fmt"
	"maps"
	"net/url"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/epbuild/epbuild/compat"
)

var (
	nameRe     = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	compRe     = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	envRe      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	hexRe      = regexp.MustCompile(`^[0-9a-fA-F]+$`)
	archRe     = regexp.MustCompile(`^(sm|compute)_[0-9]{2,3}[af]?$`)
	templateRe = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)
	// distRe is a distribution name (PEP 508), as the wheel writer checks it again
	distRe = regexp.MustCompile(`^(?i:[a-z0-9]|[a-z0-9][a-z0-9._-]*[a-z0-9])$`)
)

// Requirements a toolchain may name, with what each means.
var knownRequire = map[string]string{
	"rdma-core":     "rdma-core headers (infiniband/mlx5dv.h)",
	"libfabric":     "libfabric headers and library (LIBFABRIC_HOME)",
	"gdrcopy":       "GDRCopy headers and library (GDRCOPY_HOME)",
	"nvshmem-wheel": "the nvidia-nvshmem-cu12/cu13 wheel in the Python environment",
	"mpi":           "an MPI installation",
	"protobuf-absl": "protobuf >= 22 with Abseil, as CMake packages (CMAKE_PREFIX_PATH or the system)",
	"gtest":         "GoogleTest as a CMake package (GTestConfig.cmake)",
}

// hostArchAlias maps other spellings of a build host's machine (Go's, Debian's, the
// kernel's) to the uname -m name host-arch takes.
var hostArchAlias = map[string]string{
	"amd64": "x86_64", "x86-64": "x86_64", "x64": "x86_64", "x86_64": "x86_64",
	"arm64": "aarch64", "aarch64": "aarch64",
}

// PatchSetLookup tells validation which component a patch set applies to.
type PatchSetLookup func(name string) (component string, ok bool)

// IsFullCommit reports whether s is a full 40-hex commit id.
func IsFullCommit(s string) bool {
	return len(s) == 40 && hexRe.MatchString(s) && strings.ToLower(s) == s
}

// Validate checks what strict decoding cannot: pins, names, references, cycles. It
// returns every problem at once, each located in the file (or the --set flag).
func (d *Doc) Validate(patchSets PatchSetLookup) error {
	var errs Errors
	add := func(path, format string, args ...any) { errs = append(errs, d.errAt(path, format, args...)) }
	r := &d.Recipe

	if r.Name == "" {
		add("$", "missing field name")
	} else if !nameRe.MatchString(r.Name) {
		add("$.name", "recipe name %q must be lower-case letters, digits and '-'", r.Name)
	}
	if strings.TrimSpace(r.Cluster) == "" {
		add("$", "missing field cluster: say which kind of cluster the recipe is for")
	}
	if strings.TrimSpace(r.Description) == "" {
		add("$", "missing field description")
	}
	d.validateToolchain(add)
	if len(r.Components) == 0 {
		add("$", "a recipe needs at least one component under components:")
	}
	names := map[string]int{}
	for i, c := range r.Components {
		p := fmt.Sprintf("$.components[%d]", i)
		if !compRe.MatchString(c.Name) {
			add(p+".name", "component name %q must start with a letter and use lower-case letters, digits and '-'", c.Name)
		}
		if j, dup := names[c.Name]; dup {
			add(p+".name", "component %q is declared twice (also components[%d])", c.Name, j)
		}
		names[c.Name] = i
	}
	for i := range r.Components {
		d.validateComponent(i, names, patchSets, add)
	}
	if cyc := findCycle(r); cyc != "" {
		add("$.components", "dependency cycle between components: %s", cyc)
	}
	installed := map[string]bool{}
	for _, c := range r.Components {
		if c.Source.Python == nil && len(c.Build) > 0 {
			installed[c.Name] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(r.Env)) {
		if !envRe.MatchString(k) {
			add("$.env", "environment variable name %q is not valid (letters, digits, '_', not starting with a digit)", k)
		}
		d.validateRuntimeEnv("$.env."+k, k, r.Env[k], installed, add)
	}
	if b := r.Runtime.BufferBytes; b != nil && *b == 0 {
		add("$.runtime.buffer-bytes", "buffer-bytes is the bytes DeepEP's buffer takes on each GPU, at least 1 (leave it out when unknown)")
	}
	for _, n := range []struct {
		key, what string
		v         *uint32
	}{
		{"gpus-per-node", "the GPUs a node gives the job", r.Runtime.GPUsPerNode},
		{"ranks", "the job's ranks in all", r.Runtime.Ranks},
		{"hidden", "the model's hidden size", r.Runtime.Hidden},
	} {
		if n.v != nil && *n.v == 0 {
			add("$.runtime."+n.key, "%s is %s, at least 1 (leave it out when unknown)", n.key, n.what)
		}
	}
	validateNVCC(r.Runtime.NVCC, names, add)
	for _, comp := range slices.Sorted(maps.Keys(r.Matrix)) {
		if _, ok := names[comp]; !ok {
			add("$.matrix", "matrix axis %q names no component of this recipe", comp)
		}
		for j, v := range r.Matrix[comp] {
			if _, err := compat.ParseVersion(v); err != nil && v != compat.Bundled {
				add(fmt.Sprintf("$.matrix.%s[%d]", comp, j), "%v", err)
			}
		}
	}
	if len(errs) > 0 {
		sort.SliceStable(errs, func(i, j int) bool {
			if errs[i].File != errs[j].File {
				return errs[i].File < errs[j].File
			}
			return errs[i].Line < errs[j].Line
		})
		return errs
	}
	return nil
}

func (d *Doc) validateToolchain(add func(string, string, ...any)) {
	t := d.Recipe.Toolchain
	for _, f := range []struct{ key, val string }{{"cuda", t.CUDA}, {"torch", t.Torch}, {"python", t.Python}, {"gcc", t.GCC}, {"cmake", t.CMake}} {
		if f.val == "" {
			continue
		}
		if _, err := compat.ParseConstraint(f.val); err != nil {
			add("$.toolchain."+f.key, "toolchain %s: %v (write a version like 12.9 or a constraint like \">=12.9\")", f.key, err)
		}
	}
	for i, a := range t.Arch {
		if !archRe.MatchString(a) {
			add(fmt.Sprintf("$.toolchain.arch[%d]", i), "GPU architecture %q is not of the form sm_90, sm_90a, sm_100, sm_100f", a)
		}
	}
	seenArch := map[string]bool{}
	for i, a := range t.HostArch {
		p := fmt.Sprintf("$.toolchain.host-arch[%d]", i)
		switch {
		case slices.Contains(HostArches(), a) && seenArch[a]:
			add(p, "host-arch %s is listed twice", a)
		case slices.Contains(HostArches(), a):
		case hostArchAlias[strings.ToLower(a)] != "":
			add(p, "host-arch %q: write %s, the build host's uname -m", a, hostArchAlias[strings.ToLower(a)])
		default:
			add(p, "host-arch %q is no build host machine this tool knows; write %s (uname -m of the build host), or leave host-arch out to build on any",
				a, strings.Join(HostArches(), " or "))
		}
		seenArch[a] = true
	}
	for i, q := range t.Require {
		switch _, ok := knownRequire[q]; {
		case q == "rdma-core-data-direct":
			add(fmt.Sprintf("$.toolchain.require[%d]", i), "rdma-core-data-direct is no longer a requirement: NVSHMEM 3.4.5 builds against any rdma-core, Ubuntu 24.04's included (R22); require rdma-core")
		case !ok:
			add(fmt.Sprintf("$.toolchain.require[%d]", i), "unknown requirement %q; known: %s", q, strings.Join(slices.Sorted(maps.Keys(knownRequire)), ", "))
		}
	}
}

func (d *Doc) validateComponent(i int, names map[string]int, patchSets PatchSetLookup, add func(string, string, ...any)) {
	c := &d.Recipe.Components[i]
	p := fmt.Sprintf("$.components[%d]", i)
	if c.Version != "" {
		if _, err := compat.ParseVersion(c.Version); err != nil {
			add(p+".version", "%v", err)
		}
	}
	d.validateSource(p+".source", c.Name, c.Source, add)
	seen := map[string]bool{}
	for j, ps := range c.Patches {
		pp := fmt.Sprintf("%s.patches[%d]", p, j)
		if seen[ps] {
			add(pp, "patch set %q is listed twice for %s", ps, c.Name)
		}
		seen[ps] = true
		if patchSets == nil {
			continue
		}
		comp, ok := patchSets(ps)
		switch {
		case !ok:
			add(pp, "unknown patch set %q: not shipped with epbuild (`epbuild list` shows the recipes' sets), nor a directory %s/set.yaml under the patches/ directory beside the recipe or a --patch-dir", ps, ps)
		case comp != c.Name:
			add(pp, "patch set %q applies to component %s, not %s", ps, comp, c.Name)
		}
	}
	if c.Source.Python != nil && len(c.Patches) > 0 {
		add(p+".patches", "component %s comes from the Python environment and cannot be patched", c.Name)
	}
	deps := map[string]bool{}
	for j, dep := range c.Depends {
		if dep == c.Name {
			add(fmt.Sprintf("%s.depends[%d]", p, j), "component %s depends on itself", c.Name)
		} else if _, ok := names[dep]; !ok {
			add(fmt.Sprintf("%s.depends[%d]", p, j), "component %s depends on %q, which this recipe does not declare", c.Name, dep)
		}
		deps[dep] = true
	}
	if c.Source.Python != nil && len(c.Build) > 0 && !catalogued(c.Name) {
		// the steps of such a component build it when --set C.version=V of the catalogue
		// switches it to source; with no release to switch to they would never run
		add(p+".build", "component %s comes from the Python environment and has nothing to build (build steps there are for --set %s.version=V of a release the catalogue knows, and it knows none of %s)", c.Name, c.Name, c.Name)
	}
	plainEnv(p+".check-env", c.CheckEnv, "check-env holds plain values for the build host's checks, no LD_PRELOAD and no templates (a python-wheel library a component depends on is preloaded there already)", add)
	for j, f := range c.Preload {
		if strings.ContainsAny(f, "*?[{}: ") || !localPath(f, false) {
			add(fmt.Sprintf("%s.preload[%d]", p, j), "preload %q is not a file of the component's prefix (a relative path that stays in it, like lib/libnccl.so.2; no glob, blank or ':')", f)
		}
	}
	if w := c.PythonWheel; w != nil {
		wp := p + ".python-wheel"
		switch {
		case len(c.Build) == 0:
			add(wp, "component %s has no build steps: python-wheel packs a component built here (from source, or with --set %s.version=V)", c.Name, c.Name)
		case len(c.Preload) > 0:
			add(wp, "component %s has both preload and python-wheel: the wheel, once installed, is the library torch loads, and a preload beside it maps a second copy; keep one", c.Name)
		}
		// none with a python source: the build replaces that package (NameWheelPackages)
		if (w.Package != "" || c.Source.Python == nil) && !distRe.MatchString(w.Package) {
			add(wp+".package", "package %q is not a distribution name (letters, digits and . _ - between them, like nvidia-nccl-cu13); name the package the wheel replaces, or give the component a python source that names it", w.Package)
		}
		if w.Dir == "" || strings.ContainsAny(w.Dir, "*?[{}: ") || !localPath(w.Dir, false) || strings.HasSuffix(w.Dir, ".dist-info") {
			add(wp+".dir", "dir %q is not a directory of the wheel (a relative path that stays in it, like nvidia/nccl)", w.Dir)
		}
		for j, f := range w.Files {
			if strings.ContainsAny(f, "*?[{}: ") || !localPath(f, false) {
				add(fmt.Sprintf("%s.files[%d]", wp, j), "file %q is not a file or directory of the component's prefix (a relative path that stays in it, like lib/libnccl.so.2 or include)", f)
			}
		}
		if len(w.Files) == 0 {
			add(wp+".files", "python-wheel packs no files: name the files of the prefix the replaced wheel holds (lib/libnccl.so.2, include)")
		}
	}
	for j, s := range c.Build {
		sp := fmt.Sprintf("%s.build[%d]", p, j)
		n := 0
		for _, set := range []bool{s.CMake != nil, s.PythonExtension != nil, s.Command != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			add(sp, "a build step has exactly one of cmake, python-extension, command (found %d)", n)
			continue
		}
		var env map[string]string
		switch {
		case s.CMake != nil:
			env = s.CMake.Env
			for _, k := range slices.Sorted(maps.Keys(s.CMake.Options)) {
				if !envRe.MatchString(k) {
					add(sp+".cmake.options", "CMake option name %q is not valid", k)
				}
				op := sp + ".cmake.options." + k
				d.validateTemplates(op, s.CMake.Options[k], names, deps, add)
				checkValue(op, "CMake option "+k, s.CMake.Options[k], add)
				if IsFlagsOption(k) {
					if _, err := SplitFlags(s.CMake.Options[k]); err != nil {
						add(op, "CMake option %s: %v (its value is a list of flags, read like shell words without expansion: quote a flag with blanks as '-DX=a b')", k, err)
					}
				}
			}
			if !localPath(s.CMake.Dir, true) {
				add(sp+".cmake.dir", "dir %q is not a directory inside the source tree (a relative path that stays in it, like cmake or src/lib)", s.CMake.Dir)
			}
		case s.PythonExtension != nil:
			env = s.PythonExtension.Env
		case s.Command != nil:
			env = s.Command.Env
			if len(s.Command.Run) == 0 {
				add(sp+".command", "a command step needs run: [program, args...]")
			}
			if !localPath(s.Command.Dir, true) {
				add(sp+".command.dir", "dir %q is not a directory inside the source tree (a relative path that stays in it, like tools)", s.Command.Dir)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(env)) {
			if !envRe.MatchString(k) {
				add(sp, "environment variable name %q is not valid (letters, digits, '_', not starting with a digit)", k)
			}
			d.validateTemplates(sp+"."+s.Kind()+".env."+k, env[k], names, deps, add)
			checkValue(sp+"."+s.Kind()+".env."+k, "environment variable "+k, env[k], add)
		}
	}
	d.validateTests(p, c, add)
	for j, ch := range c.Checks {
		cp := fmt.Sprintf("%s.checks[%d]", p, j)
		if set := ch.Kinds(); len(set) != 1 {
			add(cp, "a check has exactly one of %s (found %d)", strings.Join(CheckKinds(), ", "), len(set))
			continue
		}
		kind, spec, _ := ch.Declared()
		if pattern, field := checkFile(kind, spec); pattern != "" {
			if _, err := path.Match(pattern, ""); err != nil || !localPath(pattern, false) {
				add(cp+"."+kind+field, "%q is not a file pattern inside the component's prefix (a relative glob that stays in it, like lib/libfoo.so*)", pattern)
			}
		}
		if v, ok := spec.(checkedSpec); ok {
			for _, pr := range v.problems(names) {
				f := cp + "." + kind
				if pr.field != "" {
					f += "." + pr.field
				}
				add(f, "%s", pr.msg)
			}
		}
	}
}

func (d *Doc) validateSource(p, comp string, s Source, add func(string, string, ...any)) {
	n := 0
	for _, set := range []bool{s.Git != nil, s.Archive != nil, s.Python != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		add(p, "component %s: source needs exactly one of git, archive, python (found %d)", comp, n)
		return
	}
	switch {
	case s.Git != nil:
		checkURL(p+".git.url", s.Git.URL, add)
		c := s.Git.Commit
		switch {
		case c == "":
			add(p+".git", "component %s: git source needs commit: a full 40-hex commit id", comp)
		case IsFullCommit(c):
		case hexRe.MatchString(c) && len(c) < 40:
			add(p+".git.commit", "component %s: %q is a short SHA; a full 40-hex commit is required (nothing floats: `git rev-parse %s` in a clone of %s prints it)", comp, c, c, s.Git.URL)
		case hexRe.MatchString(c) && len(c) == 40:
			add(p+".git.commit", "component %s: commit %q must be lower-case hex", comp, c)
		default:
			add(p+".git.commit", "component %s: %q is not a commit id; a full 40-hex commit is required (put a tag or branch in ref:, beside the commit)", comp, c)
		}
		if s.Git.Ref != "" {
			if err := CheckRefName(s.Git.Ref); err != nil {
				add(p+".git.ref", "component %s: %v", comp, err)
			}
		}
	case s.Archive != nil:
		checkURL(p+".archive.url", s.Archive.URL, add)
		if len(s.Archive.SHA256) != 64 || !hexRe.MatchString(s.Archive.SHA256) {
			add(p+".archive.sha256", "component %s: sha256 must be 64 hex digits (got %d characters); `sha256sum FILE` prints it", comp, len(s.Archive.SHA256))
		}
		if s.Archive.Strip < 0 {
			add(p+".archive.strip", "component %s: strip must be 0 or more", comp)
		}
	case s.Python != nil:
		if s.Python.Package == "" {
			add(p+".python", "component %s: python source needs package: (e.g. nvidia-nvshmem-cu12)", comp)
		}
		if s.Python.Version != "" {
			if _, err := compat.ParseConstraint(s.Python.Version); err != nil {
				add(p+".python.version", "component %s: %v", comp, err)
			}
		}
	}
}

// catalogued reports whether the catalogue of releases knows the component (a version
// --set of it can pin a source).
func catalogued(name string) bool {
	cat, err := compat.LoadCatalog()
	return err == nil && cat.Has(name)
}

// CheckRefName checks a git ref name by git check-ref-format's rules, so that a ref can
// neither be misread by git nor name a path outside refs/ (../../etc/passwd).
func CheckRefName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("ref %q is not a valid git ref name: %s (a tag or branch name, like v1.2.1)", name, why)
	}
	switch {
	case name == "":
		return bad("it is empty")
	case name == "@":
		return bad("it is @")
	case strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") || strings.Contains(name, "//"):
		return bad("it begins or ends with / or holds //")
	case strings.Contains(name, ".."):
		return bad("it holds ..")
	case strings.HasSuffix(name, "."):
		return bad("it ends with .")
	case strings.Contains(name, "@{"):
		return bad("it holds @{")
	case strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) }):
		return bad("it holds a blank, a control character or one of ~ ^ : ? * [ \\")
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
			return bad("a component begins with . or ends with .lock")
		}
	}
	return nil
}

// localPath reports whether the slash path p stays inside the directory it is relative
// to: not absolute, not leaving it through "..". An empty p is the directory itself.
func localPath(p string, emptyOK bool) bool {
	if p == "" {
		return emptyOK
	}
	return !strings.ContainsRune(p, 0) && filepath.IsLocal(filepath.FromSlash(p))
}

// checkValue refuses control characters (a newline, say) in a value that goes into
// env.sh, CMake's cache or an environment that setup.py may paste into a build file,
// where they split lines. A command step's arguments go to the program as they are.
func checkValue(p, what, val string, add func(string, string, ...any)) {
	if i := strings.IndexFunc(val, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }); i >= 0 {
		add(p, "%s holds a control character (%q at byte %d): a value is one line; remove it", what, val[i], i)
	}
}

// validateRuntimeEnv checks a value of the runtime env, which env.sh exports on the
// nodes: one line, templates that name the install ({{prefix}}, {{C.prefix}} of a
// component the artifact carries), and an LD_PRELOAD that loads only files of the
// install (verify-install refuses any other).
func (d *Doc) validateRuntimeEnv(p, key, val string, installed map[string]bool, add func(string, string, ...any)) {
	checkValue(p, "environment variable "+key, val, add)
	for _, m := range templateRe.FindAllStringSubmatch(val, -1) {
		ref := m[1]
		comp, isPrefix := strings.CutSuffix(ref, ".prefix")
		if ref != "prefix" && (!isPrefix || !installed[comp]) {
			add(p, "template {{%s}} has no value on the nodes: the runtime env may use {{prefix}} and {{COMPONENT.prefix}} of a component the artifact carries (built here: %s)",
				ref, strings.Join(slices.Sorted(maps.Keys(installed)), ", "))
		}
	}
	if key != "LD_PRELOAD" {
		return
	}
	for _, e := range strings.FieldsFunc(val, func(r rune) bool { return r == ':' || r == ' ' }) {
		loc := templateRe.FindStringSubmatchIndex(e)
		if loc == nil || loc[0] != 0 {
			add(p, "LD_PRELOAD entry %q is outside the install: verify-install refuses an install that preloads what it does not carry; write {{COMPONENT.prefix}}/lib/...", e)
			continue
		}
		rest := strings.TrimPrefix(e[loc[1]:], "/")
		if !localPath(rest, false) {
			add(p, "LD_PRELOAD entry %q leaves the install: name a file under {{COMPONENT.prefix}}, like {{nvshmem.prefix}}/lib/libnvshmem_host.so.3", e)
		}
	}
}

func checkURL(p, raw string, add func(string, string, ...any)) {
	u, err := url.Parse(raw)
	if raw == "" || err != nil || u.Host == "" && u.Scheme != "file" || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "file") {
		add(p, "%q is not a usable URL (https://host/path, or file:///path)", raw)
	}
}

// validateTemplates checks the {{...}} references in a value: {{prefix}}, {{cuda.home}},
// {{jobs}}, {{nvcc}} (the nvcc a build step should run: epbuild's reproducible wrapper
// where there is one), {{mpi.home}} (the MPI the toolchain probe found and the manifest
// records: only with require: [mpi], which makes preflight find one), and {{C.prefix}},
// {{C.src}}, {{C.version}} for a component C (a dependency, where deps is given).
func (d *Doc) validateTemplates(p, val string, names map[string]int, deps map[string]bool, add func(string, string, ...any)) {
	for _, m := range templateRe.FindAllStringSubmatch(val, -1) {
		ref := m[1]
		if ref == "prefix" || ref == "cuda.home" || ref == "jobs" || ref == "nvcc" {
			continue
		}
		if ref == "mpi.home" {
			if !slices.Contains(d.Recipe.Toolchain.Require, "mpi") {
				add(p, "template {{mpi.home}} needs an MPI on the build host: add mpi to toolchain: require: (preflight then finds it, MPI_HOME first, else where mpicc finds mpi.h)")
			}
			continue
		}
		comp, field, ok := strings.Cut(ref, ".")
		if !ok || (field != "prefix" && field != "src" && field != "version") {
			add(p, "unknown template {{%s}}: use {{prefix}}, {{cuda.home}}, {{jobs}}, {{nvcc}}, {{mpi.home}} or {{COMPONENT.prefix|src|version}}", ref)
			continue
		}
		if _, known := names[comp]; !known {
			add(p, "template {{%s}} names no component of this recipe", ref)
		} else if deps != nil && !deps[comp] {
			add(p, "template {{%s}} uses component %s, which is not in depends:", ref, comp)
		}
	}
}

func findCycle(r *Recipe) string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var visit func(string) string
	visit = func(n string) string {
		color[n] = grey
		stack = append(stack, n)
		c, _ := r.Component(n)
		if c != nil {
			for _, dep := range c.Depends {
				if _, ok := r.Component(dep); !ok {
					continue
				}
				switch color[dep] {
				case grey:
					i := 0
					for stack[i] != dep {
						i++
					}
					return strings.Join(append(append([]string{}, stack[i:]...), dep), " → ")
				case white:
					if cyc := visit(dep); cyc != "" {
						return cyc
					}
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return ""
	}
	for _, c := range r.Components {
		if color[c.Name] == white {
			if cyc := visit(c.Name); cyc != "" {
				return cyc
			}
		}
	}
	return ""
}

// Order gives the components in dependency order (dependencies first, else file order).
func (r *Recipe) Order() []string {
	done := map[string]bool{}
	var out []string
	var visit func(string)
	visit = func(n string) {
		if done[n] {
			return
		}
		done[n] = true
		if c, ok := r.Component(n); ok {
			for _, dep := range c.Depends {
				visit(dep)
			}
			out = append(out, n)
		}
	}
	for _, c := range r.Components {
		visit(c.Name)
	}
	return out
}

// checkFile is the file pattern a check's declaration names, and the YAML field that holds
// it below the kind ("" for the file kind, whose value is the pattern): every kind that
// reads a file of the prefix names it in a File field.
func checkFile(kind string, spec any) (pattern, field string) {
	if s, ok := spec.(string); ok && (kind == "file" || kind == "nccl-version") {
		return s, ""
	}
	v := reflect.ValueOf(spec)
	if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct {
		if f := v.Elem().FieldByName("File"); f.IsValid() && f.Kind() == reflect.String {
			return f.String(), ".file"
		}
	}
	return "", ""
}

// validateTests checks a component's tests: files of the tree that land flat in the
// component's tests/, and runs whose argv uses no template but {{procs}}, with a timeout
// and bandwidth patterns that each capture gbps.
func (d *Doc) validateTests(p string, c *Component, add func(string, string, ...any)) {
	t := c.Tests
	if t == nil {
		return
	}
	p += ".tests"
	if c.Source.Python != nil || len(c.Build) == 0 {
		add(p, "component %s builds nothing here, so the artifact cannot carry its tests: declare tests on a component built from its pinned source", c.Name)
	}
	if len(t.Files) == 0 {
		add(p, "tests: needs files: the paths in %s's source tree that the artifact carries (tests/test_intranode.py)", c.Name)
	}
	base := map[string]int{}
	for j, f := range t.Files {
		fp := fmt.Sprintf("%s.files[%d]", p, j)
		if strings.ContainsAny(f, "*?[") || !localPath(f, false) || strings.HasSuffix(f, "/") {
			add(fp, "test file %q is not a file of the source tree (a relative path that stays in it, no glob, like tests/utils.py)", f)
			continue
		}
		b := path.Base(f)
		if k, dup := base[b]; dup {
			add(fp, "test file %q lands in tests/ as %s, as files[%d] does: the files are copied flat, so give one of them up or pick files of other names", f, b, k)
		}
		base[b] = j
	}
	if len(t.Run) == 0 {
		add(p, "tests: needs run: one entry per test, with name, argv and timeout")
	}
	names := map[string]int{}
	for j, r := range t.Run {
		rp := fmt.Sprintf("%s.run[%d]", p, j)
		if !compRe.MatchString(r.Name) {
			add(rp+".name", "test name %q must start with a letter and use lower-case letters, digits and '-' (intranode)", r.Name)
		} else if k, dup := names[r.Name]; dup {
			add(rp+".name", "test %q is declared twice (also run[%d]): `epbuild test --only NAME` must name one", r.Name, k)
		}
		names[r.Name] = j
		if len(r.Argv) == 0 || strings.TrimSpace(r.Argv[0]) == "" {
			add(rp+".argv", "argv needs the program first: [python3, test_intranode.py, --num-processes, \"{{procs}}\"]")
		}
		for k, a := range r.Argv {
			for _, m := range templateRe.FindAllStringSubmatch(a, -1) {
				if m[1] != "procs" {
					add(fmt.Sprintf("%s.argv[%d]", rp, k), "unknown template {{%s}} in a test's argv: only {{procs}} (the processes to start on this node) is expanded", m[1])
				}
			}
		}
		if r.Nodes < 0 {
			add(rp+".nodes", "nodes is how many nodes the test needs, at least 1 (leave it out for one)")
		}
		for k, n := range r.Needs {
			if !slices.Contains(TestNeeds(), n) {
				add(fmt.Sprintf("%s.needs[%d]", rp, k), "unknown need %q: a test can need %s", n, strings.Join(TestNeeds(), ", "))
			} else if slices.Index(r.Needs, n) != k {
				add(fmt.Sprintf("%s.needs[%d]", rp, k), "%s is named twice", n)
			} else if n == NeedNVCC && d.Recipe.Runtime.NVCC == nil {
				add(fmt.Sprintf("%s.needs[%d]", rp, k), "needs nvcc, and the recipe does not say where the JIT looks for it: declare runtime.nvcc with the component whose JIT runs it (runtime: {nvcc: {component: %s}})", c.Name)
			}
		}
		plainEnv(rp+".env", r.Env, "a test's env holds plain values added to the install's runtime env: no LD_PRELOAD and no templates (set those in the recipe's env)", add)
		if r.Timeout == "" {
			add(rp, "missing timeout: how long one run may take (a duration like 90s or 20m); its processes are killed then")
		} else if dt, err := time.ParseDuration(r.Timeout); err != nil || dt <= 0 {
			add(rp+".timeout", "timeout %q is not a positive duration (write 90s, 20m or 1h30m)", r.Timeout)
		}
		for _, name := range slices.Sorted(maps.Keys(r.Bandwidth)) {
			bp := rp + ".bandwidth." + name
			if !compRe.MatchString(name) {
				add(bp, "bandwidth name %q must start with a letter and use lower-case letters, digits and '-' (dispatch-fp8)", name)
			}
			validateBandwidth(bp, name, r.Bandwidth[name], add)
		}
	}
}

// validateNVCC checks runtime.nvcc: a component of the recipe, and each lookup step one
// place: a variable's name, a path that is absolute once its variables are set, or a
// program's name.
func validateNVCC(n *NVCC, names map[string]int, add func(string, string, ...any)) {
	if n == nil {
		return
	}
	const p = "$.runtime.nvcc"
	if _, ok := names[n.Component]; !ok {
		add(p+".component", "runtime.nvcc needs component: the component whose JIT runs nvcc at run time (one of this recipe's), not %q", n.Component)
	}
	for i, st := range n.Lookup {
		sp := fmt.Sprintf("%s.lookup[%d]", p, i)
		set := 0
		for _, v := range []string{st.Env, st.File, st.Path} {
			if v != "" {
				set++
			}
		}
		switch {
		case set != 1:
			add(sp, "a lookup step is one place: env: VAR (the variable names nvcc), file: $CUDA_HOME/bin/nvcc, or path: nvcc (on PATH)")
		case st.Env != "" && !envRe.MatchString(st.Env):
			add(sp+".env", "env: %q is not a variable name (NCCL_EP_JIT_NVCC)", st.Env)
		case st.File != "":
			if strings.Contains(fileVarRe.ReplaceAllString(st.File, "x"), "$") {
				add(sp+".file", "file: %q: write a variable as $NAME or ${NAME} ($CUDA_HOME/bin/nvcc)", st.File)
			} else if !strings.HasPrefix(st.File, "/") && !strings.HasPrefix(st.File, "$") {
				add(sp+".file", "file: %q is not absolute: start it with / or a variable that holds a directory ($CUDA_HOME/bin/nvcc)", st.File)
			}
		case st.Path != "" && (strings.Contains(st.Path, "/") || strings.TrimSpace(st.Path) != st.Path):
			add(sp+".path", "path: %q is a program's name looked up on PATH (nvcc), not a path: use file: for a path", st.Path)
		}
		if st.Optional && st.File == "" {
			add(sp+".optional", "optional applies to a file: step only (a file that may be missing, after which the lookup goes on)")
		}
	}
}

// validateBandwidth checks one bandwidth of a test, in either form: the patterns
// compile, the one that reads the number captures gbps, and the mapping form has both
// its label and its value.
func validateBandwidth(bp, name string, b BandwidthPattern, add func(string, string, ...any)) {
	if !b.Plain() {
		switch {
		case b.Label == "":
			add(bp, "bandwidth %s needs label: a pattern of the line before the number's ('^Dispatch \\(BF16\\):'), or give one pattern as a string", name)
			return
		case b.Value == "":
			add(bp, "bandwidth %s needs value: a pattern of the line after the label's, capturing the number as (?P<gbps>[0-9.]+)", name)
			return
		}
	}
	label, re, err := b.Compile()
	switch {
	case err != nil && b.Plain():
		add(bp, "bandwidth pattern %s: %v (Go regular-expression syntax)", name, err)
	case err != nil:
		// the field that does not compile, at its own line
		field, _, _ := strings.Cut(err.Error(), ":")
		add(bp+"."+field, "bandwidth pattern %s: %v (Go regular-expression syntax)", name, err)
	case re.SubexpIndex("gbps") < 0 && b.Plain():
		add(bp, "bandwidth pattern %s has no group named gbps: capture the number as (?P<gbps>[0-9.]+)", name)
	case re.SubexpIndex("gbps") < 0:
		add(bp+".value", "bandwidth %s: value has no group named gbps: capture the number as (?P<gbps>[0-9.]+) (the label only finds the line before it)", name)
	case label != nil && label.SubexpIndex("gbps") >= 0:
		add(bp+".label", "bandwidth %s: the label has a group named gbps, which is never read: the number is read from value, on the line after the label's", name)
	}
}

// plainEnv checks variables added to an environment as they are (check-env, a test's env):
// valid names, values checkValue accepts, no LD_PRELOAD and no templates (what says so).
func plainEnv(p string, env map[string]string, what string, add func(string, string, ...any)) {
	for _, k := range slices.Sorted(maps.Keys(env)) {
		if !envRe.MatchString(k) {
			add(p, "environment variable name %q is not valid (letters, digits, '_', not starting with a digit)", k)
		}
		checkValue(p+"."+k, "environment variable "+k, env[k], add)
		if k == "LD_PRELOAD" || templateRe.MatchString(env[k]) {
			add(p+"."+k, "%s", what)
		}
	}
}
