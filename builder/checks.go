package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/epbuild/epbuild/builder/inspect"
	"github.com/epbuild/epbuild/patches/effect"
	"github.com/epbuild/epbuild/recipes"
)

// CheckResult is one check's outcome, in the shape shared by `epbuild recipe` (on the
// staged prefix) and `epbuild verify-install` (on the installed prefix).
type CheckResult = inspect.Result

// ChecksFailed is returned when any check fails: exit 1, with what was expected and found.
type ChecksFailed struct {
	Where   string
	Results []CheckResult
}

func (e *ChecksFailed) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checks failed on %s:", e.Where)
	for _, r := range e.Results {
		if r.Status == inspect.StatusFail {
			fmt.Fprintf(&b, "\n  - %s: expected %s; found %s", r.ID, r.Expected, r.Found)
			if r.Why != "" {
				fmt.Fprintf(&b, " (%s)", r.Why)
			}
		}
	}
	return b.String()
}

// ExitCode: the job failed.
func (e *ChecksFailed) ExitCode() int { return 1 }

// Checker runs a component's checks on a prefix: the recipe's checks and the patch
// sets' effects (on the installed copy, where the set says where a file lands).
type Checker struct {
	Python string
	// Env is the runtime environment to import with (PYTHONPATH, LD_LIBRARY_PATH, ...).
	Env []string
}

// Component checks one component installed at prefix.
func (c *Checker) Component(ctx context.Context, pc *PlanComponent, prefix string) []CheckResult {
	var out []CheckResult
	for _, ch := range pc.Checks {
		out = append(out, c.one(ctx, pc, ch, prefix)...)
	}
	for _, s := range pc.PatchSets {
		for i, e := range s.Effects {
			if e.Installed == "" {
				continue
			}
			out = append(out, effectResult(fmt.Sprintf("effect.%s.%d", s.Name, i), effect.CheckInstalled(prefix, installedUnder(e)), prefix))
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

// TreeEffects checks every effect of the component's patch sets on its patched tree.
func TreeEffects(pc *PlanComponent, tree string) []CheckResult {
	var out []CheckResult
	for _, s := range pc.PatchSets {
		for i, e := range s.Effects {
			id := fmt.Sprintf("effect.%s.%d", s.Name, i)
			if e.Kind == effect.ELFSymbol {
				// a symbol lives in a built file: the prefix checks prove it
				out = append(out, CheckResult{ID: id, Status: inspect.StatusSkip, Expected: e.String(), Why: "a built file: checked on the staged and installed prefix"})
				continue
			}
			out = append(out, effectResult(id, effect.Check(tree, e), tree))
		}
	}
	return out
}

func effectResult(id string, r effect.Result, root string) CheckResult {
	st := inspect.StatusPass
	switch r.Status {
	case effect.StatusSkipped:
		st = inspect.StatusSkip
	case effect.StatusPass:
	default:
		st = inspect.StatusFail
	}
	found := strings.ReplaceAll(r.Found, root+string(filepath.Separator), "")
	why := r.Effect.Why
	if r.Detail != "" {
		why = strings.TrimSpace(r.Detail + " " + why)
	}
	return CheckResult{ID: id, Status: st, Expected: r.Effect.String(), Found: found, Why: why}
}

func (c *Checker) one(ctx context.Context, pc *PlanComponent, ch recipes.Check, prefix string) []CheckResult {
	comp := pc.Name
	// results name paths relative to the prefix, so the same build reports the same
	// text wherever its cache lives (the manifest must be reproducible)
	rel := func(r CheckResult) CheckResult {
		for _, f := range []*string{&r.Found, &r.Expected, &r.Why} {
			*f = strings.ReplaceAll(*f, prefix+string(filepath.Separator), "")
			*f = strings.ReplaceAll(*f, prefix, "<prefix>")
		}
		return r
	}
	glob := func(pattern string) []string { return globInside(prefix, pattern) }
	switch {
	case ch.File != "":
		m := glob(ch.File)
		if len(m) == 0 {
			return []CheckResult{{ID: comp + ".file." + ch.File, Status: inspect.StatusFail, Expected: ch.File + " in the prefix", Found: "nothing", Why: "the build did not install it"}}
		}
		return []CheckResult{rel(CheckResult{ID: comp + ".file." + ch.File, Status: inspect.StatusPass, Expected: ch.File, Found: strings.Join(m, ", ")})}
	case ch.Arch != nil:
		m := glob(ch.Arch.File)
		if len(m) == 0 {
			return []CheckResult{{ID: comp + ".arch." + ch.Arch.File, Status: inspect.StatusFail, Expected: strings.Join(ch.Arch.Want, ",") + " in " + ch.Arch.File, Found: "no such file"}}
		}
		var out []CheckResult
		for _, f := range m {
			out = append(out, rel(inspect.CheckArchs(f, ch.Arch.Want)))
		}
		return out
	case ch.Symbol != nil:
		m := glob(ch.Symbol.File)
		defined := ch.Symbol.Defined == nil || *ch.Symbol.Defined
		if len(m) == 0 {
			return []CheckResult{{ID: comp + ".symbol." + ch.Symbol.Name, Status: inspect.StatusFail, Expected: ch.Symbol.Name + " in " + ch.Symbol.File, Found: "no such file"}}
		}
		var out []CheckResult
		for _, f := range m {
			out = append(out, rel(inspect.CheckSymbol(f, ch.Symbol.Name, defined)))
		}
		return out
	case ch.NVSHMEMBuildVars != nil:
		info, err := inspect.ReadNVSHMEMPrefix(prefix)
		if err != nil {
			return []CheckResult{{ID: comp + ".nvshmem-build-vars", Status: inspect.StatusFail, Expected: "include/non_abi/nvshmem_version.h", Found: err.Error()}}
		}
		return []CheckResult{rel(inspect.CheckNVSHMEMBuildVars(info, ch.NVSHMEMBuildVars))}
	case ch.NVSHMEMOptions:
		info, err := inspect.ReadNVSHMEMPrefix(prefix)
		if err != nil {
			return []CheckResult{{ID: comp + ".nvshmem-options", Status: inspect.StatusFail, Expected: "include/non_abi/nvshmem_version.h", Found: err.Error()}}
		}
		want := map[string]string{}
		for _, st := range pc.Build {
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
		r := rel(inspect.CheckNVSHMEMBuildVars(info, want))
		r.ID = comp + ".nvshmem-options"
		return []CheckResult{r}
	case ch.Import != "":
		dir, err := os.MkdirTemp("", "epbuild-import-")
		if err != nil {
			return []CheckResult{{ID: comp + ".import." + ch.Import, Status: inspect.StatusFail, Found: err.Error()}}
		}
		defer os.RemoveAll(dir)
		res, ierr := inspect.PythonImport(ctx, c.Python, ch.Import, c.Env, dir)
		r := inspect.CheckImportWithin(res, ierr, prefix)
		// a build host without the NVIDIA driver cannot load a CUDA extension: that is
		// not the build's fault; verify-install on a GPU node checks it again
		if r.Status == inspect.StatusFail && strings.Contains(res.Stderr, "libcuda.so") {
			r.Status = inspect.StatusSkip
			r.Why = "no NVIDIA driver on this host (libcuda.so.1 cannot be loaded); verify-install checks the import on a GPU node"
		}
		return []CheckResult{rel(r)}
	}
	return nil
}

// RuntimeEnv is the environment a recipe runs with, given where each component is
// installed: the recipe's env expanded, plus PYTHONPATH and LD_LIBRARY_PATH for the
// components that have python/ and lib/.
func RuntimeEnv(p *Plan, prefixes map[string]string, base []string) ([]string, error) {
	vars := map[string]string{}
	for name, pre := range prefixes {
		vars[name+".prefix"] = pre
	}
	env, err := expandMap(p.Env, vars)
	if err != nil {
		return nil, fmt.Errorf("runtime env of %s: %w", p.Recipe, err)
	}
	var py, ld []string
	for _, c := range p.Components {
		pre, ok := prefixes[c.Name]
		if !ok || c.Source.Python != nil {
			continue
		}
		if dirExists(filepath.Join(pre, "python")) {
			py = append(py, filepath.Join(pre, "python"))
		}
		if dirExists(filepath.Join(pre, "lib")) {
			ld = append(ld, filepath.Join(pre, "lib"))
		}
	}
	get := func(k string) string {
		for _, kv := range base {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
	join := func(list []string, old string) string {
		if old != "" {
			list = append(list, old)
		}
		return strings.Join(list, ":")
	}
	if len(py) > 0 {
		env["PYTHONPATH"] = join(py, get("PYTHONPATH"))
	}
	if len(ld) > 0 {
		env["LD_LIBRARY_PATH"] = join(ld, get("LD_LIBRARY_PATH"))
	}
	return withEnv(base, env), nil
}
