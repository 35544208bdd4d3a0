package builder

import (
	"context"
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
		{Name: "process.single-nvshmem", Targets: []check.Target{check.Process}, Run: onInstall(func(v *verifier, ctx context.Context) []CheckResult {
			rs := v.singleNVSHMEM(ctx)
			for i := range rs {
				rs[i].Rule = "R10/one-nvshmem-mapped"
			}
			return rs
		}),
			Explain: "exactly one libnvshmem_host is mapped after importing torch and the recipe's modules, the install's own (R9, R10)"},
	}
}

// singleNVSHMEM imports torch and the recipe's modules in one process and counts the
// libnvshmem_host copies mapped: two means a device/host mismatch at run time (R9).
func (v *verifier) singleNVSHMEM(ctx context.Context) []CheckResult {
	c := VerifyCheck{ID: "process.single-nvshmem", Read: "/proc/self/maps of python after importing torch and the recipe's modules",
		Expected: "exactly one libnvshmem_host, the one the install was built with",
		Why:      "torch bundles its own NVSHMEM; two copies in one process fail at run time with a device/host mismatch (R9, R10)"}
	nv, ok := v.m.Plan.Component("nvshmem")
	if !ok {
		c.Status, c.Found = check.Skip, "the recipe has no nvshmem component"
		return []CheckResult{c}
	}
	if v.envErr != nil {
		c.Status, c.Found = check.Skip, "no runtime env: "+v.envErr.Error()
		return []CheckResult{c}
	}
	py := v.python()
	if _, err := inspect.PythonImport(ctx, py, "torch", v.env, ""); err != nil {
		c.Status, c.Found = check.Skip, "torch is not importable here: "+err.Error()
		return []CheckResult{c}
	}
	modules := []string{"torch"}
	for _, pc := range v.m.Plan.Components {
		for _, ch := range pc.Checks {
			if ch.Import != "" && !slices.Contains(modules, ch.Import) {
				modules = append(modules, ch.Import)
			}
		}
	}
	c.Read = "/proc/self/maps of " + py + " after importing " + strings.Join(modules, ", ")
	paths, err := inspect.MappedLibs(ctx, py, modules, v.env, "libnvshmem_host")
	if err == nil {
		v.mapped, v.loaded = len(paths), paths
	}
	r := inspect.CheckSingleMapped(paths, err, "libnvshmem_host")
	c.Status, c.Found = r.Status, r.Found
	if r.Why != "" {
		c.Found = strings.TrimSpace(c.Found + " (" + r.Why + ")")
	}
	switch {
	case err != nil && strings.Contains(err.Error(), "libcuda"):
		c.Status, c.Found = check.Skip, "no NVIDIA driver on this host (libcuda cannot be loaded): "+err.Error()
	case r.Status == check.Pass && nv.Source.Python == nil && v.prefixes[nv.Name] != "" && !withinResolved(paths[0], v.prefixes[nv.Name]):
		c.Status = check.Fail
		c.Found = paths[0] + ", not the install's NVSHMEM under " + v.prefixes[nv.Name]
	}
	// R9 is about a patched NVSHMEM, whose ABI differs from the copy torch loads by path:
	// with an unpatched one the extension still binds to the preloaded install (same
	// SONAME), so a second copy is a warning, not a broken process
	if c.Status == check.Fail && len(paths) > 1 && nv.Source.Python == nil && len(nv.Patches) == 0 && preloadsFrom(v.env, v.prefixes[nv.Name]) {
		c.Status = check.Warn
		c.Found += "; this NVSHMEM is unpatched and preloaded, so DeepEP binds to the install's copy"
	}
	if c.Status == check.Fail {
		c.Fix = "source " + filepath.Join(v.prefix, EnvName) + " (its LD_PRELOAD loads the install's NVSHMEM first); do not mix the pip NVSHMEM with a source-built one"
	}
	return []CheckResult{c}
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
		infos, _ := filepath.Glob(filepath.Join(dir, "nvidia_nvshmem*.dist-info"))
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

// NCCLRuntime is the NCCL a job loads, and where that was read ("" when nothing says).
type NCCLRuntime struct {
	Version string `json:"version,omitempty"`
	Source  string `json:"source,omitempty"`
}

// ProbeNCCL finds the NCCL a job would load, in this order: what torch reports of the
// library it loaded; the nvidia-nccl-* wheel's metadata (the one whose libnccl is mapped,
// or the only one installed); NCCL_HOME (its nccl.h, or a libnccl.so.X.Y.Z file name).
func ProbeNCCL(ctx context.Context, python string, env, jobEnv []string) NCCLRuntime {
	if python == "" {
		python = "python3"
	}
	p, err := inspect.NCCL(ctx, python, env)
	if err == nil {
		if p.Torch != "" {
			src := "torch.cuda.nccl.version()"
			if len(p.Mapped) > 0 {
				src += " of " + strings.Join(p.Mapped, ", ")
			}
			return NCCLRuntime{Version: p.Torch, Source: src}
		}
		names := slices.Sorted(maps.Keys(p.Packages))
		for _, n := range names {
			for _, f := range p.PackageFiles[n] {
				if slices.Contains(p.Mapped, f) {
					return NCCLRuntime{Version: p.Packages[n], Source: n + " (mapped " + f + ")"}
				}
			}
		}
		if len(names) == 1 {
			return NCCLRuntime{Version: p.Packages[names[0]], Source: names[0] + " package metadata"}
		}
	}
	home := getenvFrom(jobEnv, "NCCL_HOME")
	if home == "" {
		home = getenvFrom(env, "NCCL_HOME")
	}
	if home != "" {
		if v := ncclHeaderVersion(filepath.Join(home, "include", "nccl.h")); v != "" {
			return NCCLRuntime{Version: v, Source: filepath.Join(home, "include", "nccl.h")}
		}
		if m, _ := filepath.Glob(filepath.Join(home, "lib", "libnccl.so.*.*.*")); len(m) > 0 {
			slices.Sort(m)
			return NCCLRuntime{Version: strings.TrimPrefix(filepath.Base(m[len(m)-1]), "libnccl.so."), Source: m[len(m)-1]}
		}
	}
	return NCCLRuntime{}
}

var ncclDefine = regexp.MustCompile(`(?m)^#define NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)`)

// ncclHeaderVersion reads NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH from nccl.h.
func ncclHeaderVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	v := map[string]string{}
	for _, m := range ncclDefine.FindAllStringSubmatch(string(b), -1) {
		v[m[1]] = m[2]
	}
	if v["MAJOR"] == "" || v["MINOR"] == "" || v["PATCH"] == "" {
		return ""
	}
	return v["MAJOR"] + "." + v["MINOR"] + "." + v["PATCH"]
}
