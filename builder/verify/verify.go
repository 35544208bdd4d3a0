package verify

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/builder/inspect"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/smoke"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/patches/effect"
)

// verify-install checks an installed prefix with the check engine, target by target:
// the manifest and files (verify_files.go), the env script (verify_env.go), each
// component's recipe checks and patch-set effects on the installed copy, the process
// (verify_process.go) and, with --host, the node (verify_host.go).

// VerifyCheck is one verify-install check: the check engine's result.
type VerifyCheck = check.Result

// VerifyReport is everything verify-install found about one prefix.
type VerifyReport struct {
	Prefix   string        `json:"prefix"`
	Recipe   string        `json:"recipe,omitempty"`
	PlanKey  string        `json:"plan_key,omitempty"`
	Artifact string        `json:"artifact,omitempty"`
	Checks   []VerifyCheck `json:"checks"`
	// Pairs and MappingLine come from the host checks: the GPU↔NIC pairing and the
	// DEEP_EP_DEVICE_TO_HCA_MAPPING line it implies.
	Pairs       []host.Pair         `json:"pairs,omitempty"`
	MappingLine string              `json:"mapping_line,omitempty"`
	Traffic     *host.TrafficReport `json:"traffic,omitempty"`
	// Facts are what the compatibility rules were evaluated against on the host.
	Facts map[string]string `json:"facts,omitempty"`
	// Smoke is what each rank of the NVSHMEM smoke test printed (--smoke).
	Smoke *smoke.Report `json:"smoke,omitempty"`
}

// Failed reports whether any check failed.
func (r *VerifyReport) Failed() bool { return check.Failed(r.Checks) }

// Check returns the check with that ID.
func (r *VerifyReport) Check(id string) (VerifyCheck, bool) { return check.Find(r.Checks, id) }

// Counts returns how many checks have each status.
func (r *VerifyReport) Counts() map[string]int {
	n := map[string]int{}
	for _, c := range r.Checks {
		n[string(c.Status)]++
	}
	return n
}

func (r *VerifyReport) add(cs ...VerifyCheck) { r.Checks = append(r.Checks, cs...) }

// VerifyOptions says what to verify and with what.
type VerifyOptions struct {
	Prefix string
	// Final is where the tree at Prefix will be installed (install verifies its staging
	// tree before it moves it there): env.sh must name it. "": Prefix.
	Final string
	// Self and Version are the epbuild running the check (its executable and version),
	// compared with the one install copied into the prefix; "": not compared.
	Self, Version string
	// Python runs the import checks; "" means the interpreter the build used when this
	// host has it at the same path, else python3 from PATH.
	Python string
	// Environ is the base environment of the Python checks, before the runtime env is
	// added; nil means CleanEnviron(os.Getenv). A clean base keeps a stale PYTHONPATH or
	// LD_LIBRARY_PATH of the calling shell from passing (or failing) the checks.
	Environ []string
	// FilesOnly stops after the manifest, receipt and file checks (no Python, no env.sh).
	FilesOnly bool
	// Hashed gives, by path under Prefix, the sha256 of files whose bytes were hashed as
	// they were written (install's extraction): a file of the size and sha256 the
	// manifest expects there is not read again.
	Hashed map[string]string
	// Host adds the node's checks and the compatibility rules of the host stage, reading
	// /sys, /proc and /dev under Sysroot.
	Host    bool
	Sysroot sysroot.Root
	// JobEnv is the environment jobs run with (the caller's, after sourcing env.sh): it
	// overrides the recipe's runtime env where the host rules read variables, and gives
	// NCCL_HOME. Nil: the recipe's runtime env alone.
	JobEnv []string
	// HostsFile lists the job's nodes for the hostname check (--hosts); "": the Slurm
	// allocation in JobEnv, if any.
	HostsFile string
	// Ancestry decides the rules' commit conditions on the host; nil: the embedded history.
	Ancestry compat.Ancestry
	// Traffic, when set, is run while the NIC counters under Sysroot are sampled
	// (host.SampleTraffic), with or without Host.
	Traffic func(context.Context) error
	// Smoke runs the install's NVSHMEM smoke test with the process checks: SmokePEs
	// processes (0: one per GPU the program sees) within SmokeTimeout (0:
	// smoke.DefaultTimeout).
	Smoke        bool
	SmokePEs     int
	SmokeTimeout time.Duration
}

// PrefixError is a prefix that cannot be verified at all (absent, not a directory): bad
// input, exit 2.
type PrefixError struct {
	Prefix string
	Err    error
}

func (e *PrefixError) Error() string {
	return fmt.Sprintf("verify %s: %v", e.Prefix, e.Err)
}
func (e *PrefixError) Unwrap() error { return e.Err }

// ExitCode: bad input.
func (e *PrefixError) ExitCode() int { return 2 }

// CleanEnviron is the base environment for verify's Python checks: what it keeps from
// the caller's is enough to find and run the interpreter, nothing that changes what it
// imports or loads.
func CleanEnviron(getenv func(string) string) []string {
	var out []string
	for _, k := range []string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LC_ALL", "PYENV_ROOT", "PYENV_VERSION"} {
		if v := getenv(k); v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// Why and fix texts shared by several checks.
const (
	whyFiles = "the installed copy must be the one that was built and checked: a file changed after install, " +
		"or another copy installed over it, is how an unpatched deep_ep/buffer.py sent every GPU through one NIC"
)

// fix is how to reinstall this prefix, naming the artifact when the receipt does.
// fix is the command that reinstalls the install, ready to paste: the artifact's absolute
// path as the receipt records it (or ARTIFACT, named in words, for older receipts) and
// the prefix the install is at (or, in install's staging tree, will be), shell-quoted.
func (v *verifier) fix() string {
	prefix := v.prefix
	if v.opts.Final != "" {
		prefix = v.opts.Final
	}
	r, err := manifest.ReadReceipt(v.prefix)
	switch {
	case err == nil && filepath.IsAbs(r.ArtifactPath):
		return "reinstall the artifact: " + manifest.InstallCommand(r.ArtifactPath, prefix)
	case err == nil:
		return fmt.Sprintf("reinstall the artifact %s, which the receipt names: %s", quote.Term(r.Artifact), manifest.InstallCommand("", prefix))
	}
	return "reinstall the artifact: " + manifest.InstallCommand("", prefix) + " (the receipt names the artifact)"
}

// Verify checks an installed prefix against the manifest it carries and, with Host, the
// host it runs on. The error is for a prefix that is not there or a cancelled context;
// everything else is a check in the report.
func Verify(ctx context.Context, opts VerifyOptions) (*VerifyReport, error) {
	prefix, err := filepath.Abs(opts.Prefix)
	if err != nil {
		return nil, &PrefixError{Prefix: opts.Prefix, Err: err}
	}
	if st, err := os.Stat(prefix); err != nil {
		return nil, &PrefixError{Prefix: prefix, Err: err}
	} else if !st.IsDir() {
		return nil, &PrefixError{Prefix: prefix, Err: errors.New("not a directory")}
	}
	rep := &VerifyReport{Prefix: prefix}
	v := &verifier{opts: opts, prefix: prefix, rep: rep, reg: Checks(), mapped: -1}
	// the Python runs of this verification share bytecode compiled from what they read,
	// and read no other (inspect.WithBytecodeDir)
	if dir, err := os.MkdirTemp("", "epbuild-verify-pycache-"); err == nil {
		defer os.RemoveAll(dir)
		ctx = inspect.WithBytecodeDir(ctx, dir)
	}
	if opts.Environ == nil {
		v.opts.Environ = CleanEnviron(os.Getenv)
	}
	s := &Subject{inst: v}
	if !v.manifest() {
		if opts.Host {
			v.host(ctx)
		}
		v.traffic(ctx)
		return rep, ctx.Err()
	}
	s.Plan, s.Prefixes, s.Env, s.Python = v.m.Plan, v.prefixes, v.env, v.python()
	files := v.reg.Run(ctx, check.Files, s, nil)
	rep.add(files...)
	if err := ctx.Err(); err != nil || opts.FilesOnly {
		return rep, err
	}
	if check.Failed(files) {
		v.noRun = "not run: the files of this prefix are not what was built (the failed install.* and files.* checks), " +
			"and importing from it would run them"
	}
	rep.add(v.reg.Run(ctx, check.Env, s, nil)...)
	v.componentChecks(ctx)
	if v.noRun != "" {
		rep.add(v.notRun(check.Process)...)
	} else {
		rep.add(v.reg.Run(ctx, check.Process, s, nil)...)
	}
	if opts.Host {
		v.host(ctx)
	}
	v.traffic(ctx)
	return rep, ctx.Err()
}

type verifier struct {
	opts   VerifyOptions
	prefix string
	rep    *VerifyReport
	reg    *check.Registry[*Subject]
	m      *manifest.Manifest
	raw    []byte
	// prefixes maps each component the install carries to its directory.
	prefixes map[string]string
	env      []string
	envErr   error
	// mapped is the libnvshmem_host copies the process check found mapped (-1: not run);
	// loaded the files DeepEP binds its NVSHMEM host symbols to (every mapped one where
	// that was not read).
	mapped int
	loaded []string
	// noRun says why no Python runs with the install's env ("" when it may): a prefix
	// whose files failed their checks may hold code nobody built (a planted
	// sitecustomize.py, an edited module), which an import would run, as whoever runs
	// verify-install.
	noRun string
}

// notRun skips the kinds of target t, saying why (v.noRun).
func (v *verifier) notRun(t check.Target) []CheckResult {
	var out []CheckResult
	for _, k := range v.reg.Kinds() {
		if k.Applies(t) {
			out = append(out, VerifyCheck{ID: k.Name, Status: check.Skip, Read: v.prefix, Found: v.noRun, Why: k.Explain})
		}
	}
	return out
}

// python picks the interpreter for the Python checks.
func (v *verifier) python() string { return Interpreter(v.opts.Python, v.m) }

// Interpreter is the Python the checks of an install of m run with: the one given, else
// the build's when this host has it, else python3 from PATH.
func Interpreter(given string, m *manifest.Manifest) string {
	if given != "" {
		return given
	}
	if m != nil && m.Toolchain != nil && m.Toolchain.Python != "" && disk.FileExists(m.Toolchain.Python) {
		return m.Toolchain.Python
	}
	return "python3"
}

// componentChecks re-runs each installed component's recipe checks and its patch sets'
// effects on the installed copy, with the runtime env the install gives.
func (v *verifier) componentChecks(ctx context.Context) {
	if v.envErr != nil {
		v.rep.add(VerifyCheck{ID: "env.runtime", Status: check.Fail, Read: filepath.Join(v.prefix, manifest.ManifestName),
			Found: v.envErr.Error(), Why: "the recipe checks run with the runtime env the plan gives this prefix", Fix: v.fix()})
		return
	}
	prefixes := v.checkPrefixes(ctx)
	for i := range v.m.Plan.Components {
		pc := &v.m.Plan.Components[i]
		pre, ok := v.prefixes[pc.Name]
		if !ok {
			continue // from the Python environment, or nothing to install
		}
		s := &Subject{Plan: v.m.Plan, Component: pc, Root: pre, Prefixes: prefixes, Env: v.env, Python: v.python(), inst: v}
		for _, r := range CheckComponent(ctx, v.reg, check.Installed, s) {
			v.rep.add(v.recipeCheck(r, pc, pre))
		}
	}
}

// checkPrefixes is every component's prefix for the checks that name another component
// (runpath's from:): the installed ones, and a package of the Python environment where
// this host's interpreter finds it (asked only when a check names it).
func (v *verifier) checkPrefixes(ctx context.Context) map[string]string {
	out := maps.Clone(v.prefixes)
	named := map[string]bool{}
	for _, c := range v.m.Plan.Components {
		for _, ch := range c.Checks {
			if ch.Runpath != nil {
				named[ch.Runpath.From] = true
			}
		}
	}
	for _, c := range v.m.Plan.Components {
		if c.Source.Python == nil || !named[c.Name] {
			continue
		}
		mod := toolchain.ImportName(c.Source.Python.Package)
		if v.noRun != "" {
			continue
		}
		if res, err := inspect.PythonImport(ctx, v.python(), mod, v.env, ""); err == nil {
			switch {
			case len(res.Path) > 0:
				out[c.Name] = res.Path[0]
			case res.File != "":
				out[c.Name] = filepath.Dir(res.File)
			}
		}
	}
	return out
}

func (v *verifier) recipeCheck(r CheckResult, pc *plan.PlanComponent, pre string) VerifyCheck {
	c := r
	if c.Read == "" {
		c.Read = pre
	}
	switch {
	case strings.HasPrefix(r.ID, "effect."):
		e, ok := effectOf(r.ID, pc)
		if ok && e.Installed != "" {
			c.Read = filepath.Join(pre, filepath.FromSlash(e.Installed))
		}
		if ok && e.Why != "" {
			c.Why = e.Why
		}
		if c.Why == "" {
			c.Why = "the patch set's effect must hold on the installed copy, not only on the patched source"
		}
		if !r.OK() {
			c.Why = "the installed copy lacks the patch (a patch applied to a source copy, an unpatched copy installed: the field failure); " + c.Why
			c.Fix = v.fix() + "; never install from a source copy by hand"
		}
	case strings.HasPrefix(r.ID, "python.import:"):
		if c.Why == "" {
			c.Why = "jobs must import the built module from this prefix, not another copy on sys.path"
		}
		if !r.OK() {
			mod := strings.TrimPrefix(r.ID, "python.import:")
			c.Fix = fmt.Sprintf("source %s in the job; remove other copies of %s from the Python environment (pip uninstall); if it still fails, %s",
				filepath.Join(v.prefix, manifest.EnvName), mod, v.fix())
			if lib, sym, ok := inspect.UndefinedSymbol(r.Why); ok {
				c.Fix = undefinedSymbolFix(quote.Term(filepath.Base(lib)), quote.Term(sym))
			}
		}
	default:
		if c.Why == "" {
			c.Why = "the recipe's check, passed on the staged prefix, must hold where jobs load the install"
		}
		if !r.OK() {
			c.Fix = v.fix() + "; if the artifact itself fails it, rebuild with epbuild recipe"
		}
	}
	return c
}

// effectOf finds the effect an effect check ID (effect.<set>.<index>) names, with its
// installed path as the checker resolved it.
func effectOf(id string, pc *plan.PlanComponent) (effect.Effect, bool) {
	rest := strings.TrimPrefix(id, "effect.")
	dot := strings.LastIndexByte(rest, '.')
	if dot < 0 {
		return effect.Effect{}, false
	}
	i, err := strconv.Atoi(rest[dot+1:])
	if err != nil {
		return effect.Effect{}, false
	}
	for _, s := range pc.PatchSets {
		if s.Name == rest[:dot] && i >= 0 && i < len(s.Effects) {
			return installedUnder(s.Effects[i]), true
		}
	}
	return effect.Effect{}, false
}

// undefinedSymbolFix is the fix for an import the dynamic loader stopped: reinstalling
// the same files cannot help, loading the dependency the library was built against can.
func undefinedSymbolFix(lib, sym string) string {
	if strings.HasPrefix(sym, "nccl") || strings.HasPrefix(sym, "pnccl") {
		return fmt.Sprintf("the NCCL this process loads is older than the one %s was built against (it lacks %s): load that NCCL or a newer one, "+
			"first in the process (process.single-nccl names the file torch binds); torch 2.11 needs NCCL 2.28.3 or later (epbuild compat explain R53)", lib, sym)
	}
	return fmt.Sprintf("a library loaded before %s lacks %s: an older release of the library that defines it comes first "+
		"(LD_PRELOAD, LD_LIBRARY_PATH, another wheel in the Python environment); load the release %s was built against", lib, sym, lib)
}
