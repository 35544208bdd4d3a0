package verify

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/inspect"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/builder/wheel"
	"github.com/epbuild/epbuild/compat"
)

// The process a job runs: what a Python interpreter maps once it has imported torch and
// the recipe's modules with the install's runtime env.

// processKinds are the checks of a process importing the install.
func processKinds() []check.Kind[*Subject] {
	return []check.Kind[*Subject]{
		{Name: "process.one-copy", Targets: []check.Target{check.Process}, Run: onInstall(func(v *verifier, ctx context.Context) []CheckResult {
			return v.oneCopy(ctx, processLibs())
		}),
			Explain: "after importing torch and the recipe's modules, DeepEP's NVSHMEM host symbols bind to the install's own libnvshmem_host, " +
				"or to the version the build recorded of one taken from the Python environment (R10; read with dlsym and dladdr, each copy's version " +
				"with its nvshmemx_vendor_get_version_info): another copy fails (DeepEP's device code is of another NVSHMEM), torch bound to " +
				"another copy than DeepEP is a warning, and a second file mapped that DeepEP does not bind to is said, not failed; torch's " +
				"communicator calls the recipe's NCCL (the library libtorch_cuda's ncclCommInitRank* binds to, read with dlsym and its " +
				"ncclGetVersion), and a second libnccl mapped is a warning; for a NCCL built here and installed as torch's NCCL wheel " +
				"(python-wheel) that library must be byte for byte the install's (sha256) and the only libnccl mapped, else it fails naming " +
				"both files and the pip command that installs the wheel"},
	}
}

// oneLib is a library whose callers in a job's process must run the copy the install was
// built with, whatever other copies are mapped.
type oneLib struct {
	id, component string
	// pattern matches its mapped paths (a regular expression, as inspect.MappedLibs)
	pattern string
	rule    string // the rule a failure is a case of ("": none)
	why     string
	fix     string
	// carried: the install's component carries the library (else the check is skipped:
	// gcp-a3-tcpx builds only NCCL's headers)
	carried func(prefix string) bool
	// judge decides the check from a process of its own (torch and the modules imported):
	// which copy the library's callers bind to, not how many copies are mapped
	judge func(v *verifier, ctx context.Context, c VerifyCheck, l oneLib, pc *plan.PlanComponent, job jobProcess) VerifyCheck
}

// jobProcess is the process a job runs: the modules it imports, torch first, and where
// torch was imported from.
type jobProcess struct {
	modules []string
	torch   inspect.ImportResult
}

// processLibs are the libraries checked for one copy: NVSHMEM (R9, R10) and NCCL.
func processLibs() []oneLib {
	return []oneLib{
		{id: "process.single-nvshmem", component: "nvshmem", pattern: "libnvshmem_host", rule: "R10/one-nvshmem-mapped",
			why: "DeepEP's extension links NVSHMEM's device code (libnvshmem_device.a) of the NVSHMEM it was built against, so its host " +
				"calls must bind to that NVSHMEM's libnvshmem_host (R10). The loader binds a DT_NEEDED libnvshmem_host.so.3 to the object " +
				"of that SONAME loaded first (LD_PRELOAD's), so a second file mapped by its full path (torch's wheel) is not what DeepEP runs",
			fix:   "its LD_PRELOAD loads the install's libnvshmem_host.so.3 first, which DeepEP's DT_NEEDED libnvshmem_host.so.3 then binds to",
			judge: (*verifier).judgeNVSHMEM},
		{id: "process.single-nccl", component: "nccl", pattern: `libnccl\.so`,
			why: "the NCCL the matrix cell and the manifest name must be the one torch's communicator calls: the library the dynamic " +
				"linker binds libtorch_cuda's ncclCommInitRank* to (the global scope first: LD_PRELOAD; then torch's own through DT_RPATH). " +
				"torch.cuda.nccl.version() only says which nccl.h torch was compiled with. Another NCCL runs the job's collectives with its own " +
				"release's behaviour, not the one the matrix measured and the manifest records",
			fix: "its LD_PRELOAD loads the install's NCCL, which torch's communicator then binds to; remove any other NCCL from the job's LD_PRELOAD",
			carried: func(prefix string) bool {
				m, _ := filepath.Glob(filepath.Join(toolchain.GlobEscape(prefix), "lib", "libnccl.so*"))
				return len(m) > 0
			},
			judge: (*verifier).judgeNCCL},
	}
}

// recordedNCCL is the NCCL version the build recorded of torch's: the library torch's
// communicator bound at the probe (ProbeNCCL), else the wheel's metadata.
func recordedNCCL(tc *toolchain.Toolchain) string {
	if tc == nil {
		return ""
	}
	if tc.NCCL != nil && tc.NCCL.Version != "" {
		return tc.NCCL.Version
	}
	for name, p := range tc.PythonPackages {
		if strings.HasPrefix(name, "nvidia-nccl") {
			return p.Version
		}
	}
	return ""
}

// sameCore compares two versions by MAJOR.MINOR.PATCH (2.28.3-1 is NCCL 2.28.3).
func sameCore(a, b string) bool {
	va, err1 := compat.ParseVersion(a)
	vb, err2 := compat.ParseVersion(b)
	return err1 == nil && err2 == nil && va.Core() == vb.Core()
}

// oneCopy imports torch and the recipe's modules in one process, as a job does, and
// checks that each library of libs its callers run is the install's: DeepEP's NVSHMEM
// host symbols bound to another NVSHMEM is a device/host mismatch; torch's communicator
// calling another NCCL runs another NCCL than the one recorded. A second copy mapped
// that nothing of the install binds to is said, not failed.
func (v *verifier) oneCopy(ctx context.Context, libs []oneLib) []CheckResult {
	out := make([]CheckResult, len(libs))
	var patterns []string
	todo := map[int]*plan.PlanComponent{}
	for i, l := range libs {
		c := VerifyCheck{ID: l.id, Read: "/proc/self/maps of python after importing torch and the recipe's modules",
			Expected: "exactly one " + strings.ReplaceAll(l.pattern, `\`, "") + ", the one the install was built with", Why: l.why}
		pc, ok := v.m.Plan.Component(l.component)
		switch {
		case !ok:
			c.Status, c.Found = check.Skip, "the recipe has no "+l.component+" component"
		case l.carried != nil && pc.Source.Python == nil && !l.carried(v.prefixes[pc.Name]):
			c.Status, c.Found = check.Skip, "the install's "+l.component+" carries no such library"
		case v.envErr != nil:
			c.Status, c.Found = check.Skip, "no runtime env: "+v.envErr.Error()
		default:
			todo[i] = pc
			patterns = append(patterns, l.pattern)
		}
		out[i] = c
	}
	if len(todo) == 0 {
		return out
	}
	py := v.python()
	skipAll := func(why string) []CheckResult {
		for i := range todo {
			out[i].Status, out[i].Found = check.Skip, why
		}
		return out
	}
	torch, err := inspect.PythonImport(ctx, py, "torch", v.env, "")
	if err != nil {
		return skipAll("torch is not importable here: " + err.Error())
	}
	modules := []string{"torch"}
	for _, pc := range v.m.Plan.Components {
		for _, ch := range pc.Checks {
			if ch.Import == nil {
				continue
			}
			// what the module needs imported first, then the module, each once
			for _, m := range append(slices.Clone(ch.Import.After), ch.Import.Module) {
				if !slices.Contains(modules, m) {
					modules = append(modules, m)
				}
			}
		}
	}
	for i, pc := range todo {
		out[i].Read = "/proc/self/maps of " + py + " after importing " + strings.Join(modules, ", ")
		out[i] = libs[i].judge(v, ctx, out[i], libs[i], pc, jobProcess{modules: modules, torch: torch})
	}
	return out
}

// judgeNCCL reads, in the job's process (the install's env; torch and the recipe's
// modules imported), the library torch's communicator binds to, and passes when it is
// the recipe's NCCL: the one built here, else the version recorded at build. Two libnccl
// files mapped are a warning naming both and the one bound: only the bound one runs.
func (v *verifier) judgeNCCL(ctx context.Context, c VerifyCheck, l oneLib, pc *plan.PlanComponent, job jobProcess) VerifyCheck {
	py, modules := v.python(), job.modules
	c.Read = "the file libtorch_cuda's ncclCommInitRank* binds to (dlsym, dladdr) and its ncclGetVersion, and /proc/self/maps, in " +
		py + " after importing " + strings.Join(modules, ", ")
	c.Expected = "torch's communicator calls the install's NCCL"
	own := v.prefixes[pc.Name]
	if pc.Source.Python == nil {
		c.Expected = "torch's communicator calls the NCCL built here, under " + own
	} else if want := recordedNCCL(v.m.Toolchain); want != "" {
		c.Expected = "torch's communicator calls NCCL " + want + ", as recorded at build"
	}
	route := wheelRoute(pc, l.pattern)
	if route != nil {
		c.Expected = "torch's communicator calls the " + route.pkg + " wheel built here: the only libnccl mapped, byte for byte the install's " +
			filepath.ToSlash(route.lib) + " (sha256)"
	}
	n, err := inspect.NCCL(ctx, py, v.env, modules[1:]...)
	switch {
	case err == nil && strings.Contains(n.TorchError, "libcuda"):
		c.Status, c.Found = check.Skip, "no NVIDIA driver on this host (libcuda cannot be loaded): "+n.TorchError
		return c
	case err == nil && n.TorchError != "":
		err = fmt.Errorf("import %s: %s", strings.Join(modules, ", "), n.TorchError)
	case err == nil && n.Bound == nil:
		err = fmt.Errorf("which NCCL torch calls cannot be read: %s", n.BoundError)
	}
	fix := "source " + filepath.Join(v.prefix, manifest.EnvName) + " (" + l.fix + ")"
	if pc.Source.Python != nil {
		fix = "run with the Python environment the install was built in, or install the NCCL it recorded there (pip install " +
			pc.Source.Python.Package + "==" + recordedNCCL(v.m.Toolchain) + ")"
	}
	if route != nil {
		fix = route.fix(v.m.Wheels, pc.Name, py)
	}
	if route != nil && err == nil && n.Bound != nil {
		return v.judgeNCCLWheel(c, l, pc, route, n, fix)
	}
	if err != nil {
		c.Status, c.Found, c.Fix = check.Fail, err.Error(), fix
		return c
	}
	b := n.Bound
	c.Found = fmt.Sprintf("torch calls %s: NCCL %s (ncclGetVersion %d, read by %s)", b.Path, b.Version, b.Code, b.How)
	if n.TorchHeader != "" {
		c.Found += "; torch was compiled with nccl.h " + n.TorchHeader
	}
	var bad string
	switch want := recordedNCCL(v.m.Toolchain); {
	case pc.Source.Python == nil && own != "" && !withinResolved(b.Path, own):
		bad = "not the install's nccl under " + own
	case pc.Source.Python == nil && pc.Version != "" && !sameCore(b.Version, pc.Version):
		bad = "NCCL " + b.Version + ", not the " + pc.Version + " the recipe names"
	case pc.Source.Python != nil && want == "":
		c.Found += "; the build recorded no NCCL version to compare with"
	case pc.Source.Python != nil && !sameCore(b.Version, want):
		bad = fmt.Sprintf("NCCL %s, the build recorded %s", b.Version, want)
	}
	mapped := matching(n.Mapped, l.pattern)
	if len(mapped) > 1 {
		c.Found += fmt.Sprintf("; %d libnccl files are mapped (%s): only %s runs torch's communicator", len(mapped), strings.Join(mapped, ", "), b.Path)
	}
	switch {
	case bad != "":
		c.Status, c.Fix = check.Fail, fix
		c.Found += " (" + bad + ")"
	case len(mapped) > 1:
		c.Status = check.Warn
	default:
		c.Status = check.Pass
	}
	return c
}

// ncclWheel is the route of a NCCL built here and packed as the Python package torch
// loads (python-wheel): installed with pip, it replaces torch's own, and nothing preloads.
type ncclWheel struct {
	pkg string
	// lib is the library in the component's prefix (lib/libnccl.so.2)
	lib string
}

// wheelRoute is the python-wheel route of pc, nil when pc does not take it: pc is built
// here and packs a file whose name matches pattern.
func wheelRoute(pc *plan.PlanComponent, pattern string) *ncclWheel {
	w := pc.PythonWheel
	if w == nil || pc.Source.Python != nil {
		return nil
	}
	re := regexp.MustCompile(pattern)
	for _, f := range w.Files {
		if re.MatchString(path.Base(f)) {
			return &ncclWheel{pkg: w.Package, lib: filepath.FromSlash(f)}
		}
	}
	return nil
}

// fix says how to make torch load the wheel: pip installs it into python's environment
// without its dependencies, in place of the package it replaces.
func (r *ncclWheel) fix(wheels []manifest.WheelFile, component, py string) string {
	file := "the " + r.pkg + " wheel the build wrote beside the artifact (<recipe>-<plan>.wheels/)"
	for _, w := range wheels {
		if w.Component == component && w.Replaces != nil {
			file = quote.Shell(w.File) + " (beside the artifact, in <recipe>-<plan>.wheels/)"
		}
	}
	return "install the NCCL built here into the Python environment torch is imported from: " + quote.Shell(py) +
		" -m pip install --no-deps --force-reinstall " + file + " (epbuild install --python-wheels does it); and preload no other libnccl (LD_PRELOAD)"
}

// judgeNCCLWheel judges the python-wheel route: torch's communicator must run the
// library built here, installed as torch's own NCCL package, and it must be the only
// libnccl mapped (DeepEP's EPv2 refuses to load otherwise): the file it binds to is byte
// for byte the install's, and no second one is mapped.
func (v *verifier) judgeNCCLWheel(c VerifyCheck, l oneLib, pc *plan.PlanComponent, route *ncclWheel, n inspect.NCCLProcess, fix string) VerifyCheck {
	b := n.Bound
	ours := filepath.Join(v.prefixes[pc.Name], route.lib)
	c.Found = fmt.Sprintf("torch calls %s: NCCL %s (ncclGetVersion %d, read by %s)", b.Path, b.Version, b.Code, b.How)
	var bad []string
	want, _, err := wheel.HashFile(ours)
	if err != nil {
		bad = append(bad, "the install's library cannot be read: "+err.Error())
	}
	got, _, gerr := wheel.HashFile(b.Path)
	switch {
	case gerr != nil:
		bad = append(bad, "the library torch calls cannot be read: "+gerr.Error())
	case err == nil && got != want:
		bad = append(bad, fmt.Sprintf("%s (sha256 %s) is not the install's %s (sha256 %s): the %s torch loads is not the wheel built here",
			b.Path, got[:12], ours, want[:12], route.pkg))
	case err == nil:
		c.Found += fmt.Sprintf(", byte for byte the install's %s (sha256 %s)", ours, want[:12])
	}
	if mapped := matching(n.Mapped, l.pattern); len(mapped) > 1 {
		bad = append(bad, fmt.Sprintf("%d libnccl files are mapped (%s): one NCCL per process, the wheel's", len(mapped), strings.Join(mapped, ", ")))
	}
	if len(bad) > 0 {
		c.Status, c.Fix = check.Fail, fix
		c.Found += " (" + strings.Join(bad, "; ") + ")"
		return c
	}
	c.Status = check.Pass
	c.Found += "; the only libnccl mapped"
	return c
}

// judgeNVSHMEM reads, in the job's process (the install's env; torch and the recipe's
// modules imported), which libnvshmem_host the NVSHMEM symbols of the install's objects
// (DeepEP's extension) and of torch's bind to, and each mapped copy's version as the
// library reports it. It passes when DeepEP binds to the NVSHMEM the recipe built (or the
// wheel version recorded at build), whatever else is mapped; fails when DeepEP binds to
// another copy; warns when torch binds to another copy than DeepEP.
func (v *verifier) judgeNVSHMEM(ctx context.Context, c VerifyCheck, l oneLib, pc *plan.PlanComponent, job jobProcess) VerifyCheck {
	py := v.python()
	c.Read = "the libnvshmem_host files the NVSHMEM symbols of the install's objects and torch's bind to (dlsym, dladdr), and " +
		"each mapped libnvshmem_host's nvshmemx_vendor_get_version_info, in " + py + " after importing " + strings.Join(job.modules, ", ")
	own, want := v.prefixes[pc.Name], nvshmemBuildVersion(v.m.Plan, v.m.Toolchain)
	fix := "source " + filepath.Join(v.prefix, manifest.EnvName) + " (" + l.fix + ")"
	if pc.Source.Python == nil {
		c.Expected = "DeepEP binds its NVSHMEM host symbols to the libnvshmem_host built here, under " + own
		if want != "" {
			c.Expected += " (NVSHMEM " + want + ")"
		}
	} else {
		c.Expected = "DeepEP binds its NVSHMEM host symbols to the " + pc.Source.Python.Package + " NVSHMEM the build recorded"
		if want != "" {
			c.Expected = "DeepEP binds its NVSHMEM host symbols to NVSHMEM " + want + ", the " + pc.Source.Python.Package + " the build recorded"
		}
		fix = "run with the Python environment the install was built in, or install the NVSHMEM it recorded there (pip install " +
			pc.Source.Python.Package + "==" + want + ")"
	}
	ours, theirs, err := v.nvshmemUsers(pc.Name, job.torch)
	if err != nil {
		c.Status, c.Found = check.Fail, err.Error()
		return c
	}
	users := maps.Clone(ours)
	maps.Copy(users, theirs)
	n, err := inspect.NVSHMEM(ctx, py, v.env, users, job.modules...)
	switch {
	case err == nil && strings.Contains(n.ImportError, "libcuda"):
		c.Status, c.Found = check.Skip, "no NVIDIA driver on this host (libcuda cannot be loaded): "+n.ImportError
		return c
	case err == nil && n.ImportError != "":
		err = fmt.Errorf("import %s: %s", strings.Join(job.modules, ", "), n.ImportError)
	}
	if err != nil {
		c.Status, c.Found, c.Fix = check.Fail, err.Error(), fix
		return c
	}
	v.mapped, v.loaded = len(n.Mapped), nil
	var mapped []string
	for _, m := range n.Mapped {
		v.loaded = append(v.loaded, m.Path)
		mapped = append(mapped, m.Path+" ("+libVersion(m)+")")
	}
	mappedNote := fmt.Sprintf("%d libnvshmem_host files are mapped: %s", len(n.Mapped), strings.Join(mapped, ", "))
	switch len(n.Mapped) {
	case 0:
		mappedNote = "no libnvshmem_host is mapped"
	case 1:
		mappedNote = "one libnvshmem_host is mapped: " + mapped[0]
	}
	deep, deepSays, deepUnbound := bindings(n, ours, v.prefix, "")
	if len(deep) == 0 && len(deepUnbound) > 0 {
		c.Status, c.Fix = check.Fail, fix
		c.Found = strings.Join(deepUnbound, "; ") + ": DeepEP runs no NVSHMEM; " + mappedNote
		return c
	}
	if len(deep) == 0 {
		c.Status = check.Skip
		c.Found = "no object of the install that links libnvshmem_host is loaded after the imports, so none binds NVSHMEM yet"
		if len(ours) == 0 {
			c.Found = "no object of the install links libnvshmem_host (DT_NEEDED)"
		}
		if len(n.Mapped) > 0 {
			c.Found += "; " + mappedNote
		}
		return c
	}
	// the facts the host rules read (nvshmem.loaded-version, loaded-matches-build) are
	// those of the NVSHMEM DeepEP runs
	v.loaded = deep
	var bad []string
	for _, f := range deep {
		lib, _ := n.Lib(f)
		switch {
		case pc.Source.Python == nil && own != "" && !withinResolved(f, own):
			bad = append(bad, f+" ("+libVersion(lib)+") is not the install's NVSHMEM under "+own)
		case want != "" && lib.Version != "" && !sameCore(lib.Version, want):
			bad = append(bad, f+" is NVSHMEM "+lib.Version+", the build recorded "+want)
		case pc.Source.Python != nil && want != "" && lib.Version == "":
			bad = append(bad, f+"'s version cannot be read ("+lib.VersionError+") to compare with the "+want+" recorded")
		}
	}
	c.Found = strings.Join(deepSays, "; ")
	if len(bad) > 0 {
		c.Found += " (" + strings.Join(bad, "; ") + ": DeepEP's device code and this host library come from different NVSHMEM builds)"
		for _, p := range envsh.SplitPaths("LD_PRELOAD", toolchain.GetenvFrom(v.env, "LD_PRELOAD")) {
			if r, err := filepath.EvalSymlinks(p); err == nil && slices.Contains(deep, r) && !withinResolved(r, own) {
				fix += "; remove " + p + " from the job's LD_PRELOAD"
			}
		}
	}
	if pc.Source.Python != nil && want == "" {
		c.Found += "; the build recorded no NVSHMEM version to compare with"
	}
	if len(deepUnbound) > 0 {
		// weak references, or functions bound at their first call (torch 2.11's
		// libtorch_nvshmem.so leaves nvshmem_init so): nothing fails at import for them
		c.Found += "; " + strings.Join(deepUnbound, "; ")
	}
	c.Found += "; " + mappedNote
	if len(n.Mapped) > len(deep) {
		c.Found += "; DeepEP runs only " + strings.Join(deep, ", ")
	}
	torch, torchSays, _ := bindings(n, theirs, filepath.Dir(job.torch.File), "torch's ")
	var warn string
	switch {
	case len(theirs) == 0 || len(torch) == 0:
		c.Found += "; torch binds no NVSHMEM (no library of torch's that links libnvshmem_host is loaded)"
	case !slices.Equal(torch, deep):
		c.Found += "; " + strings.Join(torchSays, "; ")
		warn = "torch binds to another NVSHMEM than DeepEP: torch's NVSHMEM-backed symmetric memory (torch.distributed._symmetric_memory " +
			"with the NVSHMEM backend) runs that library, with its own initialisation and symmetric heap, apart from DeepEP's"
	case len(pc.Patches) > 0:
		c.Found += "; torch binds to the same NVSHMEM"
		warn = "torch, built against stock NVSHMEM headers, runs this patched NVSHMEM (R9: its ABI differs from stock headers): " +
			"torch's NVSHMEM-backed symmetric memory may read its structures differently"
	default:
		c.Found += "; torch binds to the same NVSHMEM"
	}
	switch {
	case len(bad) > 0:
		c.Status, c.Fix = check.Fail, fix
	case warn != "":
		c.Status = check.Warn
		c.Found += " (" + warn + ")"
	default:
		c.Status = check.Pass
	}
	return c
}

// libVersion says a mapped libnvshmem_host's version as the library reports it.
func libVersion(l inspect.NVSHMEMLib) string {
	if l.Version == "" {
		return "version unknown: " + l.VersionError
	}
	return "NVSHMEM " + l.Version
}

// bindings are the library files the objects of users bind their NVSHMEM symbols to
// (sorted), a sentence for each loaded object naming them (label and its path relative
// to root where it lies there), and a sentence for each whose symbols bind to nothing.
func bindings(n inspect.NVSHMEMProcess, users map[string][]string, root, label string) (files, says, unbound []string) {
	for _, obj := range slices.Sorted(maps.Keys(users)) {
		u := n.Users[obj]
		if !u.Loaded {
			continue
		}
		name := obj
		if rel, err := filepath.Rel(root, obj); err == nil && !strings.HasPrefix(rel, "..") {
			name = label + rel
		}
		var to []string
		for _, f := range u.Files() {
			lib, _ := n.Lib(f)
			to = append(to, fmt.Sprintf("%s (%s; %s)", f, libVersion(lib), count(len(u.Bound[f]), "symbol")))
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
		if len(to) > 0 {
			says = append(says, name+" binds its NVSHMEM host symbols to "+strings.Join(to, " and "))
		}
		if len(u.Unbound) > 0 {
			unbound = append(unbound, fmt.Sprintf("%s: no library provides %s (%s)", name, count(len(u.Unbound), "NVSHMEM symbol"), strings.Join(u.Unbound, ", ")))
		}
	}
	slices.Sort(files)
	return files, says, unbound
}

// count says n things: "1 symbol", "2 symbols".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// nvshmemUsers are the objects whose NVSHMEM binding the check reads, each with the
// NVSHMEM symbols it imports: the install's shared objects that link libnvshmem_host
// (DeepEP's extension), NVSHMEM's own (component nv) aside, and torch's (its lib/*.so*).
func (v *verifier) nvshmemUsers(nv string, torch inspect.ImportResult) (ours, theirs map[string][]string, err error) {
	ours, theirs = map[string][]string{}, map[string][]string{}
	// a file that is no ELF object loads nothing here (the file checks judge it)
	add := func(to map[string][]string, file string) {
		if syms, err := inspect.NVSHMEMImports(file); err == nil && len(syms) > 0 {
			to[file] = syms
		}
	}
	for _, name := range slices.Sorted(maps.Keys(v.prefixes)) {
		dir := v.prefixes[name]
		if name == nv || dir == "" || dir == v.prefixes[nv] {
			continue
		}
		err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && strings.Contains(d.Name(), ".so") {
				add(ours, p)
			}
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("find the objects of %s that link NVSHMEM: %w", dir, err)
		}
	}
	if torch.File != "" {
		libs, _ := filepath.Glob(filepath.Join(toolchain.GlobEscape(filepath.Dir(torch.File)), "lib", "*.so*"))
		for _, f := range libs {
			add(theirs, f)
		}
	}
	return ours, theirs, nil
}

// matching keeps the paths that match pattern.
func matching(paths []string, pattern string) []string {
	re := regexp.MustCompile(pattern)
	var out []string
	for _, p := range paths {
		if re.MatchString(p) {
			out = append(out, p)
		}
	}
	return out
}

// soVersion is the release a versioned file name carries: libnvshmem_host.so.3.4.5.
var soVersion = regexp.MustCompile(`\.so\.(\d+\.\d+\.\d+)$`)

// nvshmemLibVersion is the X.Y.Z of a libnvshmem_host file a process maps: from its name
// where NVSHMEM's install gave it one (libnvshmem_host.so.3 links to .so.3.4.5, and
// /proc/self/maps names the file itself), else from the wheel that installed it (the
// nvidia_nvshmem_cu*-X.Y.Z.dist-info beside its package whose RECORD lists the file).
// "" when neither says.
func nvshmemLibVersion(lib string) string {
	if m := soVersion.FindStringSubmatch(filepath.Base(lib)); m != nil {
		return m[1]
	}
	// nvidia/nvshmem/lib/libnvshmem_host.so.3 lies three levels below site-packages
	dir := filepath.Dir(lib)
	for range 4 {
		dir = filepath.Dir(dir)
		infos, _ := filepath.Glob(filepath.Join(toolchain.GlobEscape(dir), "nvidia_nvshmem*.dist-info"))
		for _, info := range infos {
			rec, err := os.ReadFile(filepath.Join(info, "RECORD"))
			rel, rerr := filepath.Rel(dir, lib)
			if err != nil || rerr != nil {
				continue
			}
			for _, line := range strings.Split(string(rec), "\n") {
				if name, _, _ := strings.Cut(line, ","); name == filepath.ToSlash(rel) {
					_, ver, _ := strings.Cut(strings.TrimSuffix(filepath.Base(info), ".dist-info"), "-")
					if v, err := compat.ParseVersion(ver); err == nil {
						return v.Core()
					}
				}
			}
		}
	}
	return ""
}
