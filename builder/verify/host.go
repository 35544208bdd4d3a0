package verify

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
)

// The node a job runs on: builder/host's checks, and the compatibility rules of the host
// stage evaluated on what the node, the plan and the job's process say. verify-install
// --host and host check both run CheckHost.

// hostSubject is the node with what the rules are evaluated against there.
type hostSubject struct {
	node  *host.Node
	facts compat.Facts
	rules *compat.Rules
	anc   compat.Ancestry
}

// hostKinds are builder/host's checks, lifted onto the subject, and the host-stage rules.
func hostKinds() []check.Kind[*Subject] {
	kinds := check.Lift(host.Kinds(), func(s *Subject) (*host.Node, bool) {
		if s.node == nil {
			return nil, false
		}
		return s.node.node, true
	})
	return append(kinds, check.Kind[*Subject]{Name: "host.rules", Targets: []check.Target{check.Host}, Run: checkHostRules,
		Explain: "the compatibility rules of the host stage (compat/rules.yaml) on the node's facts (kernel, DOCA-OFED, NICs and " +
			"RoCE GIDs, peer memory and dma-buf, regkeys, the bootstrap interface, nvcc, IMEX), the NCCL a job loads and the NVSHMEM it maps"})
}

// HostOptions says which node to check, and for what.
type HostOptions struct {
	Sysroot sysroot.Root
	// Plan is the recipe's (nil: nothing recipe-specific); Toolchain the build's, from the
	// manifest (nil: unknown), for the versions the build used.
	Plan      *plan.Plan
	Toolchain *toolchain.Toolchain
	// Build is what the build read of what it built (Manifest.BuildFacts; nil: nothing),
	// for the rules' build conditions and the NVSHMEM headers' version.
	Build map[string]string
	// Python and Env run the process that tells which NCCL a job loads (Python "":
	// python3); Env is the runtime env a job gets (the install's), on a clean base.
	Python string
	Env    []string
	// JobEnv is the caller's environment: it overrides the plan's runtime env where the
	// rules read variables, and gives NCCL_HOME.
	JobEnv []string
	// Mapped is how many libnvshmem_host copies a job's process maps (-1: not looked at);
	// Loaded are their files, for their versions.
	Mapped int
	Loaded []string
	// HostsFile lists the job's nodes, one a line (--hosts); "": the Slurm allocation
	// JobEnv names, if any.
	HostsFile string
	// Ancestry decides commit conditions; nil: the embedded history.
	Ancestry compat.Ancestry
}

// HostReport is what CheckHost found.
type HostReport struct {
	Config      host.Config           `json:"config"`
	Checks      []check.Result        `json:"checks"`
	Pairs       []host.Pair           `json:"pairs,omitempty"`
	MappingLine string                `json:"mapping_line,omitempty"`
	Facts       map[string]string     `json:"facts,omitempty"`
	NCCL        toolchain.NCCLRuntime `json:"nccl"`
}

// Failed reports whether any check failed.
func (r *HostReport) Failed() bool { return check.Failed(r.Checks) }

// HostConfigError is a plan whose runtime settings the host checks cannot interpret.
type HostConfigError struct{ Err error }

func (e *HostConfigError) Error() string { return e.Err.Error() }
func (e *HostConfigError) Unwrap() error { return e.Err }

// ExitCode: the recipe is bad input.
func (e *HostConfigError) ExitCode() int { return 2 }

// CheckHost runs the node's checks and the host-stage rules, with the engine, on the
// node under opts.Sysroot. Where a node check and a rule judge the same thing, the rule's
// result is left out unless it is the stricter (the node check names the rule).
func CheckHost(ctx context.Context, opts HostOptions) (*HostReport, error) {
	nccl := toolchain.ProbeNCCL(ctx, opts.Python, opts.Env, opts.JobEnv)
	cfg, err := HostConfigFor(ctx, opts)
	if err != nil {
		return nil, &HostConfigError{Err: err}
	}
	cfg.NCCLRuntimeVersion = nccl.Version
	cfg.NCCLBuildVersion = ncclBuildVersion(opts.Plan, opts.Toolchain)
	node := host.NewNode(opts.Sysroot, cfg)
	rep := &HostReport{Config: cfg, NCCL: nccl, Facts: node.Facts(ctx)}
	if nccl.Version != "" {
		rep.Facts["nccl.version"] = nccl.Version
	}
	if opts.Mapped >= 0 {
		rep.Facts["nvshmem.host-libs-mapped"] = strconv.Itoa(opts.Mapped)
	}
	loadedFacts(rep.Facts, opts.Loaded, builtNVSHMEMVersion(opts), loadedNVSHMEMVersion(ctx, opts.Python, opts.Env))
	hs := &hostSubject{node: node, facts: hostFacts(opts, cfg.Env, rep.Facts, nccl.Version), anc: opts.Ancestry}
	if hs.rules, err = compat.LoadRules(); err != nil {
		return nil, err
	}
	if hs.anc == nil {
		h, err := compat.LoadHistory()
		if err != nil {
			return nil, fmt.Errorf("load the embedded git history: %w", err)
		}
		hs.anc = h
	}
	rep.Checks = scopeHostChecks(opts.Plan, oneVerdict(Checks().Run(ctx, check.Host, &Subject{Plan: opts.Plan, node: hs}, nil)))
	rep.Pairs = node.Pairs()
	rep.MappingLine = host.MappingLine(host.Report{Checks: rep.Checks, Pairs: rep.Pairs})
	return rep, nil
}

// recipeUses says what of a node a plan's install uses: GPUs (a CUDA toolchain, GPU
// architectures, or an NVSHMEM or DeepEP component), NVSHMEM (and through it the NICs,
// GDRCopy and locked memory) and NCCL (a component, or torch, which loads one).
func recipeUses(p *plan.Plan) (gpu, nvshmem, nccl bool) {
	for _, name := range []string{"nvshmem", "deepep"} {
		if _, ok := p.Component(name); ok {
			gpu, nvshmem = true, nvshmem || name == "nvshmem"
		}
	}
	_, nccl = p.Component("nccl")
	nccl = nccl || p.Toolchain.Torch != ""
	gpu = gpu || nccl || p.Toolchain.CUDA != "" || len(p.Toolchain.Arch) > 0
	return gpu, nvshmem, nccl
}

// scopeHostChecks skips, saying why, the host checks of what the plan's install does not
// use: a CPU-only recipe is not failed for a node without GPUs. With no plan (host check
// without a recipe) every check applies.
func scopeHostChecks(p *plan.Plan, rs []CheckResult) []CheckResult {
	if p == nil {
		return rs
	}
	gpu, nvshmem, nccl := recipeUses(p)
	noGPU := "the recipe " + p.Recipe + " uses no GPU (no toolchain.cuda or arch, no nvshmem, deepep or nccl component, no torch)"
	noNVSHMEM := "the recipe " + p.Recipe + " has no nvshmem component: nothing of it uses the NICs, GDRCopy or locked memory"
	noNCCL := "the recipe " + p.Recipe + " takes no NCCL (no nccl component, no torch)"
	for i, r := range rs {
		why := ""
		switch {
		case r.Status == check.Skip:
		case !gpu && (strings.HasPrefix(r.ID, "host.") || strings.HasPrefix(r.ID, "rule.")) && r.ID != "host.hostnames":
			// the host-stage rules are about GPU jobs: fabric, NICs, drivers, NCCL
			why = noGPU
		case !nvshmem && (strings.HasPrefix(r.ID, "host.ib.") || r.ID == "host.pcie.gpu-nic-pairing" || r.ID == "host.gdrdrv" || r.ID == "host.memlock"):
			why = noNVSHMEM
		case !nccl && strings.HasPrefix(r.ID, "host.nccl."):
			why = noNCCL
		}
		if why != "" {
			rs[i].Status, rs[i].Found, rs[i].Why, rs[i].Fix = check.Skip, "not applicable: "+why, r.Why, ""
		}
	}
	return rs
}

// loadedFacts are the NVSHMEM the job's process maps: its version, when every copy's is
// known and they agree, and whether each is the version the install recorded at build
// (the headers' version the build read, else the plan's). version reads a library's.
func loadedFacts(f map[string]string, loaded []string, built string, version func(lib string) string) {
	var versions []string
	for _, p := range loaded {
		v := version(p)
		if v == "" {
			return // a copy of unknown version: both facts unknown
		}
		if !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		return
	}
	if len(versions) == 1 {
		f["nvshmem.loaded-version"] = versions[0]
	}
	if built == "" {
		return
	}
	f["nvshmem.loaded-matches-build"] = "yes"
	for _, v := range versions {
		if v != built {
			f["nvshmem.loaded-matches-build"] = "no"
		}
	}
}

// nvshmemBuildVersion is the X.Y.Z of the NVSHMEM the install was built against: the
// plan's release, or the wheel's version the build found. "" when unknown.
func nvshmemBuildVersion(p *plan.Plan, tc *toolchain.Toolchain) string {
	if p == nil {
		return ""
	}
	nv, ok := p.Component("nvshmem")
	if !ok {
		return ""
	}
	v := nv.Version
	if nv.Source.Python != nil {
		v = ""
		if tc != nil {
			v = tc.PythonPackages[nv.Source.Python.Package].Version
		}
	}
	pv, err := compat.ParseVersion(v)
	if err != nil {
		return ""
	}
	return pv.Core()
}

// ncclBuildVersion is the NCCL the build used: the plan's nccl component (the wheel's
// version when it came from the Python environment), "" when the plan has none.
func ncclBuildVersion(p *plan.Plan, tc *toolchain.Toolchain) string {
	if p == nil {
		return ""
	}
	c, ok := p.Component("nccl")
	if !ok {
		return ""
	}
	if c.Source.Python != nil {
		if tc != nil {
			return tc.PythonPackages[c.Source.Python.Package].Version
		}
		return ""
	}
	return c.Version
}

// hostFacts is what the host-stage rules see: the plan (with the build's toolchain),
// the runtime env a job gets on this node (env: the recipe's overridden by the job's),
// the node's facts, and the NCCL the job loads as the nccl component's version (R18
// judges the NCCL at run time).
func hostFacts(opts HostOptions, env, node map[string]string, nccl string) compat.Facts {
	var f compat.Facts
	if opts.Plan != nil {
		f = plan.FactsFromPlan(opts.Plan)
		if opts.Toolchain != nil {
			f = toolchain.PreflightFacts(f, opts.Plan, opts.Toolchain)
		}
	}
	f.Env = maps.Clone(env)
	if f.Env == nil {
		f.Env = map[string]string{}
	}
	f.Host = maps.Clone(node)
	f.Build = maps.Clone(opts.Build)
	if nccl != "" {
		if c, ok := f.Component("nccl"); ok {
			c.Version = nccl
		} else {
			f.Components = append(f.Components, compat.Component{Name: "nccl", Version: nccl})
		}
	}
	return f
}

// jobEnv is the runtime environment a job gets on this node: the recipe's env, the
// install's (Env: expanded, on its clean base) over it, and the job's own over both.
func jobEnv(opts HostOptions) map[string]string {
	env := map[string]string{}
	if opts.Plan != nil {
		maps.Copy(env, opts.Plan.Env)
	}
	for _, list := range [][]string{opts.Env, opts.JobEnv} {
		for _, kv := range list {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
	}
	return env
}

// checkHostRules evaluates the rules of the host stage and gives each finding as a result.
func checkHostRules(ctx context.Context, s *Subject) []CheckResult {
	if s.node == nil {
		return nil
	}
	fs, err := compat.Evaluate(ctx, s.node.rules, s.node.facts, compat.StageHost, s.node.anc)
	if err != nil {
		return []CheckResult{{ID: "host.rules", Status: check.Fail, Read: "compat/rules.yaml", Found: err.Error(),
			Why: "the rules of the host stage could not be evaluated", Fix: "check the repository or mirror that decides the rules' commit conditions"}}
	}
	out := make([]CheckResult, 0, len(fs))
	for _, f := range fs {
		out = append(out, FindingResult(f))
	}
	return out
}

// FindingResult gives a compatibility rule's finding as a check result: "rule.<id>[/case]",
// failing for an error, a warning for a warning, advice, or a rule that could not be
// decided (which never passes silently). Read holds the facts that decided.
func FindingResult(f compat.Finding) CheckResult {
	id := f.ID
	if f.Case != "" {
		id += "/" + f.Case
	}
	r := CheckResult{ID: "rule." + id, Rule: id, Read: strings.Join(f.Because, "; "),
		Expected: id + " not to hold (compat/rules.yaml, " + string(f.Stage) + " stage)", Found: id + " holds: " + f.Title,
		Why: f.Message, Fix: f.Fix.String()}
	switch {
	case f.Unknown:
		r.Status, r.Found = check.Warn, "undecided: "+r.Read
	case f.Severity == compat.SeverityError:
		r.Status = check.Fail
	default:
		r.Status = check.Warn
	}
	return r
}

// oneVerdict leaves out a rule's result where a node check that names the rule (Rule)
// judged the same thing at least as strictly: one verdict for one fact.
func oneVerdict(rs []CheckResult) []CheckResult {
	covered := map[string]check.Status{}
	for _, r := range rs {
		if strings.HasPrefix(r.ID, "rule.") || r.Rule == "" || r.Status == check.Skip {
			continue
		}
		for _, id := range strings.FieldsFunc(r.Rule, func(c rune) bool { return c == ',' || c == ' ' }) {
			if rank(r.Status) >= rank(covered[id]) {
				covered[id] = r.Status
			}
		}
	}
	return slices.DeleteFunc(rs, func(r CheckResult) bool {
		st, ok := covered[r.Rule]
		return ok && strings.HasPrefix(r.ID, "rule.") && rank(st) >= rank(r.Status)
	})
}

func rank(s check.Status) int {
	switch s {
	case check.Fail:
		return 3
	case check.Warn:
		return 2
	case check.Pass:
		return 1
	}
	return 0
}

// host runs the node's checks and the host rules for the install.
func (v *verifier) host(ctx context.Context) {
	opts := HostOptions{Sysroot: v.opts.Sysroot, Python: "python3", Env: v.opts.Environ, JobEnv: v.opts.JobEnv, Mapped: v.mapped,
		Loaded: v.loaded, HostsFile: v.opts.HostsFile, Ancestry: v.opts.Ancestry}
	if v.m != nil {
		opts.Plan, opts.Toolchain, opts.Build, opts.Python = v.m.Plan, v.m.Toolchain, v.m.BuildFacts, v.python()
		if v.envErr == nil && v.noRun == "" {
			opts.Env = v.env
		}
	}
	rep, err := CheckHost(ctx, opts)
	if err != nil {
		v.rep.add(VerifyCheck{ID: "host.config", Status: check.Fail, Read: filepath.Join(v.prefix, manifest.ManifestName), Found: err.Error(),
			Why: "the host checks depend on the recipe's runtime settings", Fix: "correct the recipe's runtime env and rebuild"})
		return
	}
	// the process check (single-nvshmem) and a host rule may judge the same thing
	v.rep.Checks = oneVerdict(append(v.rep.Checks, rep.Checks...))
	v.rep.Pairs, v.rep.MappingLine, v.rep.Facts = rep.Pairs, rep.MappingLine, rep.Facts
}

// HostConfig derives what the host checks ask of this host from a plan's runtime env
// and options. p may be nil (no recipe): then the transport is ibrc when the host has
// RDMA devices, else none. tc (may be nil) gives the version of a pip NVSHMEM. The job's
// own environment and node list are HostConfigFor's.
func HostConfig(p *plan.Plan, tc *toolchain.Toolchain, sys sysroot.Root) (host.Config, error) {
	var env map[string]string
	if p != nil {
		env = maps.Clone(p.Env)
	}
	return hostConfig(p, tc, sys, env)
}

// HostConfigFor is what the host checks ask of this host for opts: the plan's settings
// under the runtime env a job gets here (the recipe's, the install's, the job's), and
// the job's nodes (opts.HostsFile, or the Slurm allocation in opts.JobEnv).
func HostConfigFor(ctx context.Context, opts HostOptions) (host.Config, error) {
	env := jobEnv(opts)
	cfg, err := hostConfig(opts.Plan, opts.Toolchain, opts.Sysroot, env)
	if err != nil {
		return cfg, err
	}
	cfg.Hosts, cfg.HostsFrom, err = host.JobHosts(ctx, opts.Sysroot, opts.HostsFile, env)
	return cfg, err
}

func hostConfig(p *plan.Plan, tc *toolchain.Toolchain, sys sysroot.Root, env map[string]string) (host.Config, error) {
	cfg := host.Config{Transport: host.TransportNone, GIDIndex: -1, Env: env}
	if devs, err := sys.Names("/sys/class/infiniband"); err == nil && len(devs) > 0 {
		cfg.Transport = host.TransportIBRC
	}
	cfg.FixedHeapBytes = fixedHeap(env)
	if p == nil {
		return cfg, nil
	}
	cfg.Recipe = p.Recipe
	switch {
	case nvshmemBool(env["NVSHMEM_IB_ENABLE_IBGDA"]):
		cfg.Transport = host.TransportIBGDA
	case strings.EqualFold(env["NVSHMEM_REMOTE_TRANSPORT"], "libfabric"):
		cfg.Transport = host.TransportEFA
	case strings.EqualFold(env["NVSHMEM_REMOTE_TRANSPORT"], "none"):
		cfg.Transport = host.TransportNone
	}
	if s := env["NVSHMEM_IB_GID_INDEX"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < -1 {
			return cfg, fmt.Errorf("host config of %s: NVSHMEM_IB_GID_INDEX=%q is not a GID index (-1 lets NVSHMEM choose)", p.Recipe, s)
		}
		cfg.GIDIndex = n
	}
	cfg.HCAPrefix = env["NVSHMEM_HCA_PREFIX"]
	cfg.Mapping = env["DEEP_EP_DEVICE_TO_HCA_MAPPING"]
	if b := p.Runtime.BufferBytes; b != nil {
		cfg.BufferBytes = *b
	}
	cfg.NVCC = p.Runtime.NVCC
	if n := p.Runtime.GPUsPerNode; n != nil {
		cfg.GPUsPerNode = *n
	}
	cfg.MNNVL = p.Runtime.MNNVL
	cfg.Machines = slices.Clone(p.Toolchain.HostArch)
	if tc != nil && tc.Arch != "" {
		cfg.Machines = []string{toolchain.Machine(tc.Arch)} // what built the install
	}
	if nv, ok := p.Component("nvshmem"); ok {
		cfg.NVSHMEMVersion = nv.Version
		if nv.Source.Python != nil && tc != nil {
			cfg.NVSHMEMVersion = tc.PythonPackages[nv.Source.Python.Package].Version
		}
		for _, st := range nv.Build {
			if st.CMake != nil && truthy(st.CMake.Options["NVSHMEM_USE_GDRCOPY"]) {
				cfg.NeedGDRCopy = true
			}
		}
	}
	return cfg, cfg.Validate()
}

// nvshmemBool reads a boolean variable as NVSHMEM does (nvshmemi_getenv_bool): set and not
// starting with 0, N, n, F or f is true.
func nvshmemBool(v string) bool { return v != "" && !strings.ContainsRune("0NnFf", rune(v[0])) }

// fixedHeap is the symmetric heap NVSHMEM reserves whole when it starts, with CUDA VMM
// off (NVSHMEM_SYMMETRIC_SIZE, 1 GiB when unset); 0 when VMM is on, and when the size is
// not one NVSHMEM can read (R32 says so).
func fixedHeap(env map[string]string) uint64 {
	if !nvshmemBool(env["NVSHMEM_DISABLE_CUDA_VMM"]) {
		return 0
	}
	s, ok := env["NVSHMEM_SYMMETRIC_SIZE"]
	if !ok {
		return 1 << 30 // SYMMETRIC_SIZE_DEFAULT
	}
	n, err := compat.ParseSize(s)
	if err != nil {
		return 0
	}
	return n
}

func truthy(s string) bool {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "1", "ON", "TRUE", "YES", "Y":
		return true
	}
	return false
}

func (v *verifier) traffic(ctx context.Context) {
	if v.opts.Traffic == nil {
		return
	}
	tr, checks := SampleTraffic(ctx, v.opts.Sysroot, v.opts.Traffic)
	v.rep.Traffic = tr
	v.rep.Checks = append(v.rep.Checks, checks...)
}

// SampleTraffic runs run while sampling the NIC counters and reports two checks:
// host.traffic.run (the command's outcome) and host.traffic.spread (how the bytes spread).
func SampleTraffic(ctx context.Context, sys sysroot.Root, run func(context.Context) error) (*host.TrafficReport, []VerifyCheck) {
	ran := false
	var runErr error
	tr, err := host.SampleTraffic(ctx, sys, func(ctx context.Context) error {
		ran = true
		runErr = run(ctx)
		return runErr
	})
	rc := VerifyCheck{ID: "host.traffic.run", Read: "the command run while the NIC counters were sampled",
		Why: "the spread is only meaningful for a run that finished"}
	switch {
	case !ran:
		rc.Status, rc.Found = check.Skip, "not run: "+err.Error()
	case runErr != nil:
		rc.Status, rc.Found, rc.Fix = check.Fail, runErr.Error(), "make the command succeed on its own first"
	default:
		rc.Status, rc.Found = check.Pass, "the command succeeded"
	}
	spread := tr.Check
	if tr.Check.ID == "" {
		spread = VerifyCheck{ID: "host.traffic.spread", Status: check.Fail, Read: "/sys/class/infiniband/*/ports/*/counters",
			Found: err.Error(), Why: "the NIC counters are how the spread is measured", Fix: "check that /sys/class/infiniband is readable"}
	}
	return &tr, []VerifyCheck{rc, spread}
}

// builtNVSHMEMVersion is the X.Y.Z of the NVSHMEM an install was built against: the
// version of the headers the build read (nvshmem.header-version), else the plan's label
// (nvshmemBuildVersion). "" when unknown.
func builtNVSHMEMVersion(opts HostOptions) string {
	if v, err := compat.ParseVersion(opts.Build[manifest.FactHeaderVersion]); err == nil {
		return v.Core()
	}
	return nvshmemBuildVersion(opts.Plan, opts.Toolchain)
}
