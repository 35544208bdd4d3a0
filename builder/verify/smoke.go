package verify

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/smoke"
	"github.com/epbuild/epbuild/builder/toolchain"
)

// The NVSHMEM smoke test (verify-install --smoke): the program every DeepEP recipe builds
// against the NVSHMEM its DeepEP links, run on this node as a job would run it. The
// runner and the reading of its lines are builder/smoke's; here is what the install
// gives it: the program, the environment, and what the build recorded.

// smokeComponent is the recipe component that builds the smoke test.
const smokeComponent = "nvshmem-smoke"

// smokeKinds are the checks of the smoke test, run on the process target when asked.
func smokeKinds() []check.Kind[*Subject] {
	return []check.Kind[*Subject]{
		{Name: "smoke", Targets: []check.Target{check.Process}, Run: onInstall((*verifier).smoke),
			Explain: "with --smoke: the install's NVSHMEM smoke test (bin/" + smoke.Binary + "), one process per GPU or --smoke-pes N, " +
				"with the install's runtime env: rank 0 makes the unique ID, every rank initialises by it, allocates symmetric memory, " +
				"puts to the next PE from the device, meets the others at a barrier and splits teams as DeepEP does; one smoke.<step> " +
				"result per step with its fix, smoke.version (the NVSHMEM the ranks loaded against the one recorded at build) and " +
				"smoke.init-time"},
	}
}

// smoke runs the smoke test when the options ask for it.
func (v *verifier) smoke(ctx context.Context) []CheckResult {
	if !v.opts.Smoke {
		return nil
	}
	if v.envErr != nil {
		return []CheckResult{{ID: "smoke.run", Status: check.Fail, Read: filepath.Join(v.prefix, manifest.ManifestName), Found: "no runtime env: " + v.envErr.Error(),
			Why: "the smoke test runs with the runtime env the plan gives this prefix", Fix: v.fix()}}
	}
	bin := v.smokeBinary()
	if _, ok := v.m.Plan.Component(smokeComponent); !ok && bin == "" {
		return []CheckResult{{ID: "smoke.run", Status: check.Skip, Read: filepath.Join(v.prefix, manifest.ManifestName),
			Found: "the recipe " + v.m.Plan.Recipe + " has no " + smokeComponent + " component: the install has no smoke test",
			Why:   "the smoke test checks NVSHMEM on this node; an install without NVSHMEM has nothing for it to run"}}
	}
	if bin == "" {
		return []CheckResult{{ID: "smoke.run", Status: check.Fail, Read: filepath.Join(v.prefix, "*", "bin", smoke.Binary),
			Expected: "a component of the install that carries bin/" + smoke.Binary,
			Found:    "none, though the recipe has the " + smokeComponent + " component: the install lacks its files, or was built by an older epbuild",
			Why:      "the smoke test must be built against the NVSHMEM the install's DeepEP links, so it travels in the artifact",
			Fix:      "rebuild with this epbuild (every DeepEP recipe builds the smoke test) and reinstall"}}
	}
	env, taken := smokeEnv(v.env, v.opts.JobEnv)
	rep, err := smoke.Run(ctx, smoke.Options{Binary: bin, PEs: v.opts.SmokePEs, Timeout: v.opts.SmokeTimeout, Env: env})
	v.rep.Smoke = rep
	rs := smoke.Results(rep, err, v.smokeExpect(ctx))
	if len(rs) > 0 && rs[0].ID == "smoke.run" {
		rs[0].Read += "; environment: the install's runtime env (env.sh)"
		if len(taken) > 0 {
			rs[0].Read += " and the caller's " + strings.Join(taken, ", ")
		}
	}
	return rs
}

// smokeBinary finds the smoke test among the install's components, in plan order.
func (v *verifier) smokeBinary() string {
	for _, c := range v.m.Plan.Components {
		pre, ok := v.prefixes[c.Name]
		if !ok {
			continue
		}
		p := filepath.Join(pre, "bin", smoke.Binary)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// smokeEnv is the environment of the smoke test's ranks: the install's runtime env (the
// one the other checks use), with the caller's NVSHMEM_*, FI_* and CUDA device
// selection on top, as a job started from that shell would see them (the bootstrap
// interface is set per cluster, often outside the recipe). It returns the names taken
// from the caller.
func smokeEnv(runtime, caller []string) ([]string, []string) {
	over := map[string]string{}
	for _, kv := range caller {
		k, val, ok := strings.Cut(kv, "=")
		if ok && (strings.HasPrefix(k, "NVSHMEM_") || strings.HasPrefix(k, "FI_") || k == "CUDA_VISIBLE_DEVICES" || k == "CUDA_DEVICE_ORDER") {
			if toolchain.GetenvFrom(runtime, k) != val {
				over[k] = val
			}
		}
	}
	names := make([]string, 0, len(over))
	for k := range over {
		names = append(names, k)
	}
	slices.Sort(names)
	return envsh.WithEnv(runtime, over), names
}

// smokeExpect is what the build recorded about the NVSHMEM the ranks must load: the
// wheel's version from the build's toolchain and its directory on this host, or the
// built NVSHMEM's version and its directory in the install.
func (v *verifier) smokeExpect(ctx context.Context) smoke.Expect {
	nv, ok := v.m.Plan.Component("nvshmem")
	if !ok {
		return smoke.Expect{}
	}
	if py := nv.Source.Python; py != nil {
		e := smoke.Expect{From: py.Package + ", the wheel the build used (manifest.json)"}
		if v.m.Toolchain != nil {
			e.Version = v.m.Toolchain.PythonPackages[py.Package].Version
		}
		e.LibDir = v.checkPrefixes(ctx)[nv.Name]
		return e
	}
	return smoke.Expect{Version: nv.Version, From: "component nvshmem in manifest.json", LibDir: v.prefixes[nv.Name]}
}
