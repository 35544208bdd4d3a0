package builder

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/inspect"
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
			Explain: "exactly one libnvshmem_host is mapped after importing torch and the recipe's modules: the install's own, " +
				"or the version the build recorded of one taken from the Python environment (R9, R10); torch's communicator calls the recipe's NCCL " +
				"(the library libtorch_cuda's ncclCommInitRank* binds to, read with dlsym and its ncclGetVersion), and a second libnccl mapped is a warning"},
	}
}

// oneLib is a library of which a job's process must map exactly one copy, the one the
// install was built with.
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
	// judge, where set, decides the check from a process of its own (torch and modules
	// imported) instead of the copies mapped
	judge func(v *verifier, ctx context.Context, c VerifyCheck, l oneLib, pc *PlanComponent, modules []string) VerifyCheck
	// secondOK: a second copy that is not a broken process (a warning, with why); why
	// may also say what makes it one
	secondOK func(v *verifier, pc *PlanComponent, paths []string) (bool, string)
}

// processLibs are the libraries checked for one copy: NVSHMEM (R9, R10) and NCCL.
func processLibs() []oneLib {
	return []oneLib{
		{id: "process.single-nvshmem", component: "nvshmem", pattern: "libnvshmem_host", rule: "R10/one-nvshmem-mapped",
			why: "torch bundles its own NVSHMEM; two copies in one process fail at run time with a device/host mismatch (R9, R10)",
			fix: "its LD_PRELOAD loads the install's NVSHMEM first; do not mix the pip NVSHMEM with a source-built one",
			secondOK: func(v *verifier, nv *PlanComponent, paths []string) (bool, string) {
				// R9 is about a patched NVSHMEM, whose ABI differs from the copy torch loads by
				// path: with an unpatched one the extension still binds to the preloaded
				// install (same SONAME), so a second copy is a warning, not a broken process
				return nv.Source.Python == nil && len(nv.Patches) == 0 && preloadsFrom(v.env, v.prefixes[nv.Name]),
					"this NVSHMEM is unpatched and preloaded, so DeepEP binds to the install's copy"
			}},
		{id: "process.single-nccl", component: "nccl", pattern: `libnccl\.so`,
			why: "the NCCL the matrix cell and the manifest name must be the one torch's communicator calls: the library the dynamic " +
				"linker binds libtorch_cuda's ncclCommInitRank* to (the global scope first: LD_PRELOAD; then torch's own through DT_RPATH). " +
				"torch.cuda.nccl.version() only says which nccl.h torch was compiled with",
			fix: "its LD_PRELOAD loads the install's NCCL, which torch's communicator then binds to; remove any other NCCL from the job's LD_PRELOAD",
			carried: func(prefix string) bool {
				m, _ := filepath.Glob(filepath.Join(globEscape(prefix), "lib", "libnccl.so*"))
				return len(m) > 0
			},
			judge: (*verifier).judgeNCCL},
	}
}

// recordedNCCL is the NCCL version the build recorded of torch's: the library torch's
// communicator bound at the probe (ProbeNCCL), else the wheel's metadata.
func recordedNCCL(tc *Toolchain) string {
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
// checks each library of libs mapped exactly once, and the right copy: two copies of
// NVSHMEM are a device/host mismatch at run time (R9); two NCCLs, or torch's where the
// install built its own, run another NCCL than the one recorded.
func (v *verifier) oneCopy(ctx context.Context, libs []oneLib) []CheckResult {
	out := make([]CheckResult, len(libs))
	var patterns []string
	todo := map[int]*PlanComponent{}
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
	if _, err := inspect.PythonImport(ctx, py, "torch", v.env, ""); err != nil {
		return skipAll("torch is not importable here: " + err.Error())
	}
	modules := []string{"torch"}
	for _, pc := range v.m.Plan.Components {
		for _, ch := range pc.Checks {
			if ch.Import != "" && !slices.Contains(modules, ch.Import) {
				modules = append(modules, ch.Import)
			}
		}
	}
	read := "/proc/self/maps of " + py + " after importing " + strings.Join(modules, ", ")
	var all []string
	var err error
	if slices.ContainsFunc(libs, func(l oneLib) bool { return l.judge == nil }) {
		all, err = inspect.MappedLibs(ctx, py, modules, v.env, strings.Join(patterns, "|"))
		if err != nil && strings.Contains(err.Error(), "libcuda") {
			return skipAll("no NVIDIA driver on this host (libcuda cannot be loaded): " + err.Error())
		}
	}
	for i, pc := range todo {
		out[i].Read = read
		if libs[i].judge != nil {
			out[i] = libs[i].judge(v, ctx, out[i], libs[i], pc, modules)
			continue
		}
		out[i] = v.judgeCopies(ctx, out[i], libs[i], pc, matching(all, libs[i].pattern), err)
	}
	return out
}

// judgeNCCL reads, in the job's process (the install's env; torch and the recipe's
// modules imported), the library torch's communicator binds to, and passes when it is
// the recipe's NCCL: the one built here, else the version recorded at build. Two libnccl
// files mapped are a warning naming both and the one bound: only the bound one runs.
func (v *verifier) judgeNCCL(ctx context.Context, c VerifyCheck, l oneLib, pc *PlanComponent, modules []string) VerifyCheck {
	py := v.python()
	c.Read = "the file libtorch_cuda's ncclCommInitRank* binds to (dlsym, dladdr) and its ncclGetVersion, and /proc/self/maps, in " +
		py + " after importing " + strings.Join(modules, ", ")
	c.Expected = "torch's communicator calls the install's NCCL"
	own := v.prefixes[pc.Name]
	if pc.Source.Python == nil {
		c.Expected = "torch's communicator calls the NCCL built here, under " + own
	} else if want := recordedNCCL(v.m.Toolchain); want != "" {
		c.Expected = "torch's communicator calls NCCL " + want + ", as recorded at build"
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
	fix := "source " + filepath.Join(v.prefix, EnvName) + " (" + l.fix + ")"
	if pc.Source.Python != nil {
		fix = "run with the Python environment the install was built in, or install the NCCL it recorded there (pip install " +
			pc.Source.Python.Package + "==" + recordedNCCL(v.m.Toolchain) + ")"
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

// judgeCopies decides one library's check from the copies mapped.
func (v *verifier) judgeCopies(ctx context.Context, c VerifyCheck, l oneLib, pc *PlanComponent, paths []string, mapErr error) VerifyCheck {
	if l.component == "nvshmem" && mapErr == nil {
		v.mapped, v.loaded = len(paths), paths
	}
	r := inspect.CheckSingleMapped(paths, mapErr, l.pattern)
	c.Status, c.Found = r.Status, r.Found
	if r.Why != "" {
		c.Found = strings.TrimSpace(c.Found + " (" + r.Why + ")")
	}
	own := v.prefixes[pc.Name]
	switch {
	case r.Status == check.Pass && pc.Source.Python == nil && own != "" && !withinResolved(paths[0], own):
		c.Status = check.Fail
		c.Found = paths[0] + ", not the install's " + l.component + " under " + own
	case c.Status == check.Fail && len(paths) > 1 && l.secondOK != nil:
		ok, why := l.secondOK(v, pc, paths)
		if ok {
			c.Status = check.Warn
		}
		if why != "" {
			c.Found += "; " + why
		}
	}
	c.Rule = l.rule
	if c.Status == check.Fail {
		c.Fix = "source " + filepath.Join(v.prefix, EnvName) + " (" + l.fix + ")"
	}
	return c
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
		infos, _ := filepath.Glob(filepath.Join(globEscape(dir), "nvidia_nvshmem*.dist-info"))
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

// preloadsFrom reports whether env's LD_PRELOAD loads a library from dir.
func preloadsFrom(env []string, dir string) bool {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok && dir != "" {
			for _, lib := range strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ' ' }) {
				if withinResolved(lib, dir) {
					return true
				}
			}
		}
	}
	return false
}

// NCCLRuntime is the NCCL a job runs, and where that was read ("" when nothing says).
type NCCLRuntime struct {
	Version string `json:"version,omitempty"`
	Source  string `json:"source,omitempty"`
	// Path is the library torch's communicator binds to, relative to the Python path entry
	// (site-packages) that holds it, else absolute ("" when not read from the process).
	Path string `json:"path,omitempty"`
	// TorchHeader is torch.cuda.nccl.version(): the nccl.h torch was compiled with, a
	// constant of torch's build that says nothing of the library loaded.
	TorchHeader string `json:"torch_header,omitempty"`
}

// ProbeNCCL finds the NCCL a job would run, in this order: the library torch's
// communicator binds to in a process with env (inspect.NCCL: its file and
// ncclGetVersion); the nvidia-nccl-* wheel's metadata (the one whose libnccl is mapped,
// or the only one installed); the header version torch was compiled with (when torch
// imports but its library cannot be read); NCCL_HOME (its nccl.h, or a libnccl.so.X.Y.Z
// file name).
func ProbeNCCL(ctx context.Context, python string, env, jobEnv []string) NCCLRuntime {
	if python == "" {
		python = "python3"
	}
	p, err := inspect.NCCL(ctx, python, env)
	if err == nil {
		if b := p.Bound; b != nil {
			path := b.Site
			if path == "" {
				path = b.Path
			}
			return NCCLRuntime{Version: b.Version, Path: path, TorchHeader: p.TorchHeader,
				Source: fmt.Sprintf("ncclGetVersion %d of %s, which libtorch_cuda's NCCL calls bind to (%s)", b.Code, b.Path, b.How)}
		}
		names := slices.Sorted(maps.Keys(p.Packages))
		for _, n := range names {
			for _, f := range p.PackageFiles[n] {
				if slices.Contains(p.Mapped, f) {
					return NCCLRuntime{Version: p.Packages[n], TorchHeader: p.TorchHeader, Source: n + " (mapped " + f + ")"}
				}
			}
		}
		if len(names) == 1 {
			return NCCLRuntime{Version: p.Packages[names[0]], TorchHeader: p.TorchHeader, Source: names[0] + " package metadata"}
		}
		if p.TorchHeader != "" {
			return NCCLRuntime{Version: p.TorchHeader, TorchHeader: p.TorchHeader,
				Source: "torch.cuda.nccl.version(), the nccl.h torch was compiled with: the library it loaded cannot be read (" + p.BoundError + ")"}
		}
	}
	home := getenvFrom(jobEnv, "NCCL_HOME")
	if home == "" {
		home = getenvFrom(env, "NCCL_HOME")
	}
	if home != "" {
		if v := inspect.NCCLHeaderVersion(filepath.Join(home, "include", "nccl.h")); v != "" {
			return NCCLRuntime{Version: v, Source: filepath.Join(home, "include", "nccl.h")}
		}
		if m, _ := filepath.Glob(filepath.Join(globEscape(home), "lib", "libnccl.so.*.*.*")); len(m) > 0 {
			slices.Sort(m)
			return NCCLRuntime{Version: strings.TrimPrefix(filepath.Base(m[len(m)-1]), "libnccl.so."), Source: m[len(m)-1]}
		}
	}
	return NCCLRuntime{}
}
