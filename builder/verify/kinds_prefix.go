package verify

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/inspect"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/patches/effect"
	"github.com/epbuild/epbuild/recipes"
)

// The kinds that check a component's tree or prefix: what recipes declare and what
// patch sets state. Results name paths relative to the prefix, so that the same build
// reports the same text wherever its cache lives (the manifest must be reproducible).

// rel rewrites the prefix out of a result's texts.
func (s *Subject) rel(r CheckResult) CheckResult {
	for _, f := range []*string{&r.Found, &r.Expected, &r.Why} {
		*f = strings.ReplaceAll(*f, s.Root+string(filepath.Separator), "")
		*f = strings.ReplaceAll(*f, s.Root, "<prefix>")
	}
	return r
}

// glob lists the files matching a pattern of the prefix, sorted.
func (s *Subject) glob(pattern string) []string { return globInside(s.Root, pattern) }

func checkFile(_ context.Context, s *Subject, file string) []CheckResult {
	id := s.Component.Name + ".file." + file
	m := s.glob(file)
	if len(m) == 0 {
		return []CheckResult{{ID: id, Status: check.Fail, Expected: file + " in the prefix", Found: "nothing", Why: "the build did not install it"}}
	}
	return []CheckResult{s.rel(CheckResult{ID: id, Status: check.Pass, Expected: file, Found: strings.Join(m, ", ")})}
}

func checkArch(_ context.Context, s *Subject, a *recipes.ArchCheck) []CheckResult {
	m := s.glob(a.File)
	if len(m) == 0 {
		return []CheckResult{{ID: s.Component.Name + ".arch." + a.File, Status: check.Fail, Expected: strings.Join(a.Want, ",") + " in " + a.File, Found: "no such file"}}
	}
	var out []CheckResult
	for _, f := range m {
		out = append(out, s.rel(inspect.CheckArchs(f, a.Want, a.Native)))
	}
	return out
}

func checkSymbol(_ context.Context, s *Subject, sym *recipes.SymbolCheck) []CheckResult {
	m := s.glob(sym.File)
	if len(m) == 0 {
		return []CheckResult{{ID: s.Component.Name + ".symbol." + sym.Name, Status: check.Fail, Expected: sym.Name + " in " + sym.File, Found: "no such file"}}
	}
	defined := sym.Defined == nil || *sym.Defined
	var out []CheckResult
	for _, f := range m {
		out = append(out, s.rel(inspect.CheckSymbol(f, sym.Name, defined)))
	}
	return out
}

func checkBuildVars(_ context.Context, s *Subject, want map[string]string) []CheckResult {
	info, err := inspect.ReadNVSHMEMPrefix(s.Root)
	if err != nil {
		return []CheckResult{{ID: s.Component.Name + ".nvshmem-build-vars", Status: check.Fail, Expected: "include/non_abi/nvshmem_version.h", Found: err.Error()}}
	}
	return []CheckResult{s.rel(inspect.CheckNVSHMEMBuildVars(info, want))}
}

func checkNVSHMEMOptions(_ context.Context, s *Subject, _ bool) []CheckResult {
	comp := s.Component.Name
	info, err := inspect.ReadNVSHMEMPrefix(s.Root)
	if err != nil {
		return []CheckResult{{ID: comp + ".nvshmem-options", Status: check.Fail, Expected: "include/non_abi/nvshmem_version.h", Found: err.Error()}}
	}
	want := map[string]string{}
	for _, st := range s.Component.Build {
		if st.CMake == nil {
			continue
		}
		for k, v := range st.CMake.Options {
			// only what NVSHMEM records; CMAKE_* and paths are not build variables
			if _, recorded := info.BuildVars[k]; recorded && strings.HasPrefix(k, "NVSHMEM_") {
				want[k] = v
			}
		}
	}
	r := s.rel(inspect.CheckNVSHMEMBuildVars(info, want))
	r.ID = comp + ".nvshmem-options"
	return []CheckResult{r}
}

func checkImport(ctx context.Context, s *Subject, ic *recipes.ImportCheck) []CheckResult {
	module := ic.Module
	if s.inst != nil && s.inst.noRun != "" {
		return []CheckResult{{ID: "python.import:" + module, Status: check.Skip, Read: s.Root, Found: s.inst.noRun}}
	}
	dir, err := os.MkdirTemp("", "epbuild-import-")
	if err != nil {
		return []CheckResult{{ID: s.Component.Name + ".import." + module, Status: check.Fail, Found: err.Error()}}
	}
	defer os.RemoveAll(dir)
	res, ierr := inspect.PythonImport(ctx, s.Python, module, s.Env, dir, ic.After...)
	r := inspect.CheckImportWithin(res, ierr, s.Root)
	// a build host without the NVIDIA driver cannot load a CUDA extension: that is
	// not the build's fault; verify-install on a GPU node checks it again
	if r.Status == check.Fail && strings.Contains(res.Stderr, "libcuda.so") {
		r.Status = check.Skip
		r.Why = "no NVIDIA driver on this host (libcuda.so.1 cannot be loaded); verify-install checks the import on a GPU node"
	}
	return []CheckResult{s.rel(r)}
}

func checkNeeded(_ context.Context, s *Subject, n *recipes.NeededCheck) []CheckResult {
	m := s.glob(n.File)
	if len(m) == 0 {
		return []CheckResult{{ID: s.Component.Name + ".needed." + n.Lib, Status: check.Fail, Expected: n.File + " links " + n.Lib, Found: "no file matches " + n.File}}
	}
	var out []CheckResult
	for _, f := range m {
		r := inspect.CheckNeeded(f, n.Lib, true)
		r.Read = f
		if r.Status == check.Fail {
			r.Why += ": it was built without it, or against another library (DeepEP silently drops NVSHMEM when it finds none)"
		}
		out = append(out, s.rel(r))
	}
	return out
}

func checkLibs(_ context.Context, s *Subject, l *recipes.LibsCheck) []CheckResult {
	m := s.glob(l.File)
	if len(m) == 0 {
		return []CheckResult{{ID: s.Component.Name + ".libs." + l.File, Status: check.Fail, Expected: "the libraries of " + l.File, Found: "no file matches " + l.File}}
	}
	var out []CheckResult
	for _, f := range m {
		r := inspect.CheckLibs(f, s.Root, l.System)
		r.Read = f
		out = append(out, s.rel(r))
	}
	return out
}

func checkNCCLVersion(ctx context.Context, s *Subject, file string) []CheckResult {
	id := s.Component.Name + ".nccl-version"
	want := s.Component.Version
	m := s.glob(file)
	if len(m) == 0 {
		return []CheckResult{{ID: id, Status: check.Fail, Expected: "NCCL " + want + " in " + file, Found: "no file matches " + file}}
	}
	header := filepath.Join(s.Root, "include", "nccl.h")
	hv := inspect.NCCLHeaderVersion(header)
	var out []CheckResult
	for _, f := range m {
		r := CheckResult{ID: id, Read: f + " (ncclGetVersion)", Expected: "NCCL " + want}
		lib, err := inspect.NCCLLibraryVersion(ctx, s.Python, f)
		var found []string
		switch {
		case err != nil:
			r.Status, r.Why = check.Fail, "the library cannot be loaded, or has no ncclGetVersion: "+err.Error()
		case want == "":
			r.Status, r.Why = check.Fail, "the plan names no version of "+s.Component.Name+" to compare with"
		case !sameCore(lib.Version, want):
			r.Status, r.Why = check.Fail, "the library is another release than the plan's: a stale or wrong build"
		default:
			r.Status = check.Pass
		}
		if err == nil {
			found = append(found, fmt.Sprintf("ncclGetVersion %d (%s)", lib.Code, lib.Version))
		}
		if hv != "" {
			r.Read += ", " + header
			found = append(found, "include/nccl.h "+hv)
			if want != "" && !sameCore(hv, want) {
				r.Status, r.Why = check.Fail, strings.TrimSpace(r.Why+" nccl.h says another release than the plan's")
			}
		}
		r.Found = strings.Join(found, "; ")
		out = append(out, s.rel(r))
	}
	return out
}

func checkRunpath(_ context.Context, s *Subject, rp *recipes.RunpathCheck) []CheckResult {
	id := s.Component.Name + ".runpath." + rp.Lib
	m := s.glob(rp.File)
	if len(m) == 0 {
		return []CheckResult{{ID: id, Status: check.Fail, Expected: rp.Lib + " from " + rp.From, Found: "no file matches " + rp.File}}
	}
	from, ok := s.Prefixes[rp.From]
	if !ok || from == "" {
		return []CheckResult{{ID: id, Status: check.Fail, Expected: rp.Lib + " from " + rp.From,
			Found: "no prefix for component " + rp.From + " here", Why: "the library must come from " + rp.From + ", which this install does not locate"}}
	}
	search := inspect.SearchFromEnv(s.Env)
	var out []CheckResult
	for _, f := range m {
		r := inspect.CheckResolves(f, rp.Lib, search, from)
		r.Read = f + " (DT_NEEDED, DT_RPATH, DT_RUNPATH) with LD_PRELOAD and LD_LIBRARY_PATH of the runtime env"
		r.Expected = rp.Lib + " from " + rp.From + " (" + from + ")"
		r.Found = strings.ReplaceAll(r.Found, from+string(filepath.Separator), rp.From+":")
		out = append(out, s.rel(r))
	}
	return out
}

// checkTreeEffects checks every effect of the component's patch sets on its patched tree.
func checkTreeEffects(_ context.Context, s *Subject) []CheckResult {
	var out []CheckResult
	for _, set := range s.Component.PatchSets {
		for i, e := range set.Effects {
			id := fmt.Sprintf("effect.%s.%d", set.Name, i)
			if e.Kind == effect.ELFSymbol {
				// a symbol lives in a built file: the prefix checks prove it
				out = append(out, CheckResult{ID: id, Status: check.Skip, Expected: e.String(), Why: "a built file: checked on the staged and installed prefix"})
				continue
			}
			out = append(out, effectResult(id, effect.Check(s.Root, e, inspect.Reader{}), s.Root))
		}
	}
	return out
}

// checkPrefixEffects checks, on a prefix, the effects whose set says where the file lands.
func checkPrefixEffects(_ context.Context, s *Subject) []CheckResult {
	var out []CheckResult
	for _, set := range s.Component.PatchSets {
		for i, e := range set.Effects {
			if e.Installed == "" {
				continue
			}
			id := fmt.Sprintf("effect.%s.%d", set.Name, i)
			out = append(out, effectResult(id, effect.CheckInstalled(s.Root, installedUnder(e), inspect.Reader{}), s.Root))
		}
	}
	return out
}

// installedUnder maps an effect's installed path to where epbuild installs Python
// packages: a bare package path (deep_ep/buffer.py) lives under python/.
func installedUnder(e effect.Effect) effect.Effect {
	for _, top := range []string{"python/", "lib", "include/", "bin/", "share/"} {
		if strings.HasPrefix(e.Installed, top) {
			return e
		}
	}
	e.Installed = "python/" + e.Installed
	return e
}

func effectResult(id string, r effect.Result, root string) CheckResult {
	st := check.Pass
	switch r.Status {
	case effect.StatusSkipped:
		st = check.Skip
	case effect.StatusPass:
	default:
		st = check.Fail
	}
	found := strings.ReplaceAll(r.Found, root+string(filepath.Separator), "")
	why := r.Effect.Why
	if r.Detail != "" {
		why = strings.TrimSpace(r.Detail + " " + why)
	}
	return CheckResult{ID: id, Status: st, Expected: r.Effect.String(), Found: found, Why: why}
}

// globInside is what a check's file pattern matches in prefix, sorted: nothing for a
// pattern that leaves it, and no match that resolves outside it through a symlink
// (validate refuses the first kind already; a plan read from an installed manifest is
// checked again here).
func globInside(prefix, pattern string) []string {
	if !filepath.IsLocal(filepath.FromSlash(pattern)) {
		return nil
	}
	m, _ := filepath.Glob(filepath.Join(toolchain.GlobEscape(prefix), filepath.FromSlash(pattern)))
	root, err := filepath.EvalSymlinks(prefix)
	if err != nil {
		return nil
	}
	out := m[:0]
	for _, p := range m {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(root, real); err == nil && filepath.IsLocal(rel) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// checkCXXRuntime looks at the shared objects of a component built by a python-extension
// step (the modules Python loads beside torch and its libstdc++.so.6): none may export a
// libstdc++ of its own. A C++ compiler that finds only libstdc++.a links it into every
// extension it builds, and then two C++ runtimes share one process.
func checkCXXRuntime(_ context.Context, s *Subject) []CheckResult {
	if !slices.ContainsFunc(s.Component.Build, func(st recipes.Step) bool { return st.PythonExtension != nil }) {
		return nil
	}
	id := s.Component.Name + ".cxx-runtime"
	var shared, own []string
	err := filepath.WalkDir(s.Root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !inspect.IsELF(path) {
			return err
		}
		sh, o, err := inspect.SharedCXXRuntime(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(s.Root, path)
		if sh {
			shared = append(shared, rel)
		}
		if o {
			own = append(own, rel)
		}
		return nil
	})
	r := CheckResult{ID: id, Expected: "its shared objects use the process's libstdc++.so.6 (none defines " + inspect.CXXRuntimeMarker + ", std::locale::id::_M_id)"}
	switch {
	case err != nil:
		r.Status, r.Found = check.Fail, err.Error()
	case len(shared) == 0:
		return nil
	case len(own) == 0:
		r.Status, r.Found = check.Pass, count(len(shared), "shared object")+", none with a libstdc++ of its own"
	default:
		r.Status = check.Fail
		r.Found = strings.Join(own, ", ") + " exports libstdc++'s std::locale::id::_M_id: libstdc++.a is linked in"
		r.Why = "a Python extension that carries its own libstdc++ runs beside the libstdc++.so.6 that Python and torch load: two C++ runtimes in one process, " +
			"whose locale facet ids and exception state differ. Measured (2 H200s, DeepEP EPv2): the first std::regex of its JIT died of SIGSEGV in " +
			"collate<char>::transform; linked against libstdc++.so, the same test passed. It happens where the C++ compiler (CXX) finds only " +
			"libstdc++.a: `$CXX -print-file-name=libstdc++.so` prints the bare name"
		r.Fix = "build with a C++ compiler that links libstdc++.so: CXX=g++ CC=gcc of the system (or a directory holding libstdc++.so, a link to the " +
			"libstdc++.so.6 torch loads, first on LIBRARY_PATH or in COMPONENT.env.LDFLAGS as -L DIR); the preflight names the compiler it found"
	}
	return []CheckResult{s.rel(r)}
}
