package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/matrix"
	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/builder/verify"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/mirror"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/builder/toolchain"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/diff"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/patches"
	"github.com/epbuild/epbuild/recipes"
)

// The pipeline as a library call: Open resolves a recipe into a Job, and the Job's
// methods are what `epbuild recipe`, `patch`, `fetch`, `mirror`, `compat check` and
// `matrix` do. The order (rules → toolchain probe → preflight → stages) and the policy on
// the compatibility rules (--ignore-rule, --allow-undecided) live here; the command line
// turns flags into Options and results into text or JSON.

// Options say which recipe, with what overrides, from which sources, under which policy.
type Options struct {
	Library *recipes.Library
	Recipe  string
	Sets    []string
	// CacheDir is the source cache and stage store ("": cache.DefaultDir()).
	CacheDir string
	// Mirror serves every source from a directory laid out by URL; its repositories also
	// decide the rules' commit conditions and name the tags of a commit.
	Mirror   string
	Log      *log.Logger
	Progress source.ProgressMode
	// IgnoreRules lets the job go on despite an error-level finding of these rule ids;
	// the finding stays in the manifest.
	IgnoreRules []string
	// AllowUndecided lets the job go on when an error-level rule could not be decided.
	AllowUndecided bool
	// Rules replaces the embedded rules (tests); nil: compat.LoadRules().
	Rules *compat.Rules
}

// Job is a resolved recipe with where its sources come from.
type Job struct {
	Plan *plan.Plan
	opts Options

	cache   *cache.Cache // opened on first use: a rule check needs none
	sources *stage.FetchSources
	rules   *compat.Rules
	history *compat.History
}

// Open resolves the recipe. Versions of commits a --set names come from the catalogue or
// the tags of the mirror's and cache's repositories.
func Open(opts Options) (*Job, error) {
	if opts.Log == nil {
		opts.Log = log.New(io.Discard)
	}
	j := &Job{opts: opts}
	if err := j.checkIgnoreRules(); err != nil {
		return nil, err
	}
	res, err := plan.NewResolver(opts.Library)
	if err != nil {
		return nil, err
	}
	res.Tags = j.repos().TagsAt
	if j.Plan, err = res.Resolve(opts.Recipe, opts.Sets); err != nil {
		return nil, err
	}
	return j, nil
}

// cacheDir is where the cache is, whether or not it exists.
func (j *Job) cacheDir() (string, error) {
	if j.opts.CacheDir != "" {
		return j.opts.CacheDir, nil
	}
	return cache.DefaultDir()
}

// Cache opens (creating) the source cache and stage store.
func (j *Job) Cache() (*cache.Cache, error) {
	if j.cache != nil {
		return j.cache, nil
	}
	dir, err := j.cacheDir()
	if err != nil {
		return nil, err
	}
	c, err := cache.Open(dir)
	if err != nil {
		return nil, err
	}
	j.cache = c
	return c, nil
}

// Sources opens the fetchers over the cache and the mirror.
func (j *Job) Sources() (*stage.FetchSources, error) {
	if j.sources != nil {
		return j.sources, nil
	}
	c, err := j.Cache()
	if err != nil {
		return nil, err
	}
	src, err := stage.NewSources(c, j.opts.Mirror, j.opts.Log, j.opts.Progress)
	if err != nil {
		return nil, err
	}
	j.sources = src
	return src, nil
}

// repos is the git history at hand: the mirror's repositories, and the cache's when the
// cache exists (a rule check creates no cache).
func (j *Job) repos() source.History {
	h := source.History{Mirror: j.opts.Mirror}
	if j.cache != nil {
		h.Cache = j.cache
	} else if dir, err := j.cacheDir(); err == nil {
		if _, err := os.Stat(dir); err == nil {
			h.Cache, _ = cache.Open(dir)
		}
	}
	return h
}

// Ancestry decides the rules' commit conditions: the embedded history first, then the
// mirror's and the cache's repositories.
func (j *Job) Ancestry() (compat.Ancestry, error) {
	if j.history == nil {
		h, err := compat.LoadHistory()
		if err != nil {
			return nil, fmt.Errorf("load the embedded git history: %w", err)
		}
		j.history = h
	}
	return compat.ChainAncestry(j.history, j.repos()), nil
}

// rulesAndAncestry is what compat.Evaluate and compat.BuildMatrix need besides facts.
func (j *Job) rulesAndAncestry() (*compat.Rules, compat.Ancestry, error) {
	rules, err := j.Rules()
	if err != nil {
		return nil, nil, err
	}
	anc, err := j.Ancestry()
	return rules, anc, err
}

// Rules are the compatibility rules the job is judged by.
func (j *Job) Rules() (*compat.Rules, error) {
	if j.rules == nil {
		if j.opts.Rules != nil {
			j.rules = j.opts.Rules
		} else {
			r, err := compat.LoadRules()
			if err != nil {
				return nil, err
			}
			j.rules = r
		}
	}
	return j.rules, nil
}

// RulesError is a plan (or a build host) that the compatibility rules stop: an
// error-level finding not ignored, or an error-level rule that could not be decided and
// was not allowed. Exit 2 at the plan stage (change the recipe), 3 at preflight (change
// the build host).
type RulesError struct {
	Recipe   string
	Stage    compat.Stage
	Findings []compat.Finding // the ones that stop the job
}

func (e *RulesError) Error() string {
	var broken, titled, undecided, questions, where []string
	add := func(list *[]string, s string) {
		if !slices.Contains(*list, s) {
			*list = append(*list, s)
		}
	}
	for _, f := range e.Findings {
		if !f.Unknown {
			if !slices.Contains(broken, f.ID) {
				broken = append(broken, f.ID)
				titled = append(titled, f.ID+": "+f.Title)
			}
			continue
		}
		add(&undecided, f.Name())
		asked := false
		for _, b := range f.Because {
			// "whether deepep 309785a94ded contains 29d31c095796 is unknown: <where>"
			if q, w, ok := strings.Cut(b, " is unknown: "); ok {
				add(&questions, q)
				add(&where, w)
				asked = true
			}
		}
		if !asked { // a host fact not read, a version range on both sides of a boundary
			for _, b := range f.Because {
				add(&questions, b)
			}
		}
	}
	var parts []string
	if len(broken) > 0 {
		explain := make([]string, len(broken))
		for i, id := range broken {
			explain[i] = "`epbuild compat explain " + id + "`"
		}
		says := "says"
		if len(explain) > 1 {
			says = "say"
		}
		parts = append(parts, fmt.Sprintf("%s breaks %s (%s %s why and what to change)", e.Recipe, strings.Join(titled, "; "), strings.Join(explain, ", "), says))
	}
	if len(undecided) > 0 {
		msg := fmt.Sprintf("%s: %d error-level rules could not be decided (%s): not known %s", e.Recipe, len(undecided),
			strings.Join(undecided, ", "), strings.Join(questions, "; "))
		if len(where) > 0 {
			msg += " (asked: " + strings.Join(where, "; ") + ")"
		}
		parts = append(parts, msg+". "+undecidedFix(questions))
	}
	return strings.Join(parts, "; ")
}

// undecidedFix says how to decide what the rules could not: a commit's history comes from
// a mirror; a build fact (the RC layout NVSHMEM's headers typedef) exists only once the
// build has read it, and the rules judge again with it before anything is packaged.
func undecidedFix(questions []string) string {
	var history, facts bool
	for _, q := range questions {
		if strings.Contains(q, "build fact ") {
			facts = true
		} else {
			history = true
		}
	}
	switch {
	case facts && !history:
		return "They are facts the build reads (NVSHMEM's headers): --allow-undecided builds, and the rules judge again with what the build read before it packages"
	case facts:
		return "Give --mirror DIR with a clone that holds the commit's history to decide the rest; the build facts are read by the build: --allow-undecided builds, and the rules judge again with them before it packages"
	}
	return "Give --mirror DIR with a clone that holds the commit's history to decide them, or --allow-undecided to go on"
}

// buildHostVerdict joins the two judgements of the build host before any work: what the
// toolchain lacks (missing) and what the rules at preflight say (rules). A rule that holds
// on what was probed says why the host cannot build (CUDA 13 cannot compile this NVSHMEM,
// R33) even when something is missing too; one left undecided by a missing tool is left
// out, since the missing tool says it.
func buildHostVerdict(missing, rules error) error {
	var re *RulesError
	switch {
	case missing != nil && errors.As(rules, &re):
		if decided := re.decided(); decided != nil {
			return errors.Join(decided, missing)
		}
		return missing
	case missing != nil && rules != nil:
		return errors.Join(missing, rules)
	case missing != nil:
		return missing
	}
	return rules
}

// decided is e with only the findings that were decided, nil when none was.
func (e *RulesError) decided() *RulesError {
	var fs []compat.Finding
	for _, f := range e.Findings {
		if !f.Unknown {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return &RulesError{Recipe: e.Recipe, Stage: e.Stage, Findings: fs}
}

// ExitCode: a plan the rules stop is bad input; a build host they stop lacks something.
func (e *RulesError) ExitCode() int {
	if e.Stage == compat.StagePreflight {
		return 3
	}
	return 2
}

// Findings evaluates the rules at the plan stage (tc nil) or at preflight (the probed
// toolchain) and applies the policy: the findings come back whole (the manifest records
// them), with a *RulesError when they stop the job. Findings with every condition decided
// are kept in the cache, so a rerun does not evaluate the rules again.
func (j *Job) Findings(ctx context.Context, tc *toolchain.Toolchain) ([]compat.Finding, error) {
	return j.findings(ctx, tc, false)
}

// findings is Findings; with run, for a run that goes on to open the cache, the findings
// are kept even where the cache does not exist yet (it is made for them), unless they stop
// the run: the first rerun after a cold run then finds them.
func (j *Job) findings(ctx context.Context, tc *toolchain.Toolchain, run bool) ([]compat.Finding, error) {
	facts, stage := plan.FactsFromPlan(j.Plan), compat.StagePlan
	if tc != nil {
		facts, stage = toolchain.PreflightFacts(facts, j.Plan, tc), compat.StagePreflight
	}
	var fs []compat.Finding
	keep, exists := "", false // kept only in a cache that exists, or that a run makes: a rule check creates none
	if dir, err := j.cacheDir(); err == nil {
		keep = filepath.Join(dir, "compat", store.Key("compat/2", compat.DataDigest(), facts, stage, j.opts.Rules != nil)+".json")
		_, err := os.Stat(dir)
		exists = err == nil
		if _, err := cache.Inspect(dir); err != nil {
			keep = "" // not a cache: nothing is written there (the run says why)
		}
	}
	if !exists && !run {
		keep = ""
	}
	if b, err := os.ReadFile(keep); keep == "" || err != nil || json.Unmarshal(b, &fs) != nil {
		rules, anc, err := j.rulesAndAncestry()
		if err != nil {
			return nil, err
		}
		if fs, err = compat.Evaluate(ctx, rules, facts, stage, anc); err != nil {
			return nil, fmt.Errorf("check %s against the compatibility rules: %w", j.Plan.Recipe, err)
		}
		perr := j.policy(fs, stage)
		if decided(fs) && keep != "" && (exists || perr == nil) {
			if b, err := json.Marshal(fs); err == nil && os.MkdirAll(filepath.Dir(keep), 0o755) == nil {
				_ = disk.WriteFileAtomic(keep, b) // a cache: a failed write only costs a re-evaluation
			}
		}
		return fs, perr
	}
	return fs, j.policy(fs, stage)
}

func decided(fs []compat.Finding) bool {
	return !slices.ContainsFunc(fs, func(f compat.Finding) bool { return f.Unknown })
}

// policy stops the job on an error-level finding (unless --ignore-rule names it) and on
// an undecided error-level rule (unless --allow-undecided); it logs the rest.
func (j *Job) policy(fs []compat.Finding, stage compat.Stage) error {
	var stop []compat.Finding
	for _, f := range fs {
		switch {
		case f.Severity == compat.SeverityError && slices.Contains(j.opts.IgnoreRules, f.ID):
			// asked for: the finding is kept (the manifest records it) but does not stop the run
			j.opts.Log.Warn("ignored by --ignore-rule: "+f.Message, "rule", f.ID, "stage", stage)
		case f.Severity == compat.SeverityError:
			stop = append(stop, f)
		case f.Unknown && f.IfDecided == compat.SeverityError && stage == compat.StagePlan && j.askedAgain(f):
			// the toolchain probe answers it: preflight asks again, and stops there if it must
			j.opts.Log.Debug("undecided at plan time, asked again at preflight: "+f.Message, "rule", f.Name())
		case f.Unknown && f.IfDecided == compat.SeverityError && !j.opts.AllowUndecided && !slices.Contains(j.opts.IgnoreRules, f.ID):
			stop = append(stop, f)
		case f.Unknown && f.IfDecided == compat.SeverityError:
			j.opts.Log.Warn("undecided, allowed: "+f.Message, "rule", f.Name(), "stage", stage)
		default:
			j.opts.Log.Warn(f.Message, "rule", f.ID, "stage", stage)
		}
	}
	if len(stop) > 0 {
		return &RulesError{Recipe: j.Plan.Recipe, Stage: stage, Findings: stop}
	}
	return nil
}

// askedAgain reports whether preflight evaluates f's rule again (with the probed toolchain).
func (j *Job) askedAgain(f compat.Finding) bool {
	rules, err := j.Rules()
	return err == nil && rules.RunsAt(f.ID, f.Case, compat.StagePreflight)
}

// BuildOptions configure Build.
type BuildOptions struct {
	// OutDir receives the artifact.
	OutDir string
	// Force lists stages to rerun ("all" for every one).
	Force        []string
	AllowApplied bool
	// KeepFailed keeps the build directory of a failed build step (its path is in the
	// BuildError), so that logs it points to (CMakeError.log) can be read; the next build
	// of that component removes it.
	KeepFailed bool
	// Version is epbuild's, recorded in the manifest.
	Version string
	// SourceDateEpoch stamps the artifact ("": the newest pinned commit's time).
	SourceDateEpoch string
	// Environ is the base environment of build steps and checks.
	Environ []string
	// Getenv is what the toolchain probe reads (CUDA_HOME, PATH, ...).
	Getenv func(string) string
	// PlanOnly computes the stage keys and what is cached, and does no work.
	PlanOnly bool
	// Repro: where builds run, and whether the reproducibility measures are on.
	Repro stage.Repro
	// Watch shows the build steps while they run (nil: nothing does).
	Watch stage.Watcher
	// CacheFrom is the shared build cache looked in before any stage; CacheTo the one a
	// successful build is stored in (buildcache.go). nil: none.
	CacheFrom, CacheTo ArtifactCache
}

// Build runs the main job in its order: the rules on the plan (a plan they stop is bad
// input), the toolchain probe, then (unless PlanOnly) everything missing from the build
// host at once (exit 3), the rules on the probed toolchain, and the stages. The result
// of PlanOnly has the stage keys and no artifact. With CacheFrom, a plan the cache holds
// is taken from it before the probe, and no stage runs; with CacheTo, a successful
// build is stored there. Neither fails the build (buildcache.go).
func (j *Job) Build(ctx context.Context, opts BuildOptions) (*stage.Result, error) {
	var cached stage.CacheReport
	if res, err := j.fromCache(ctx, opts, &cached); res != nil || err != nil {
		return withCache(res, err, j.toCache(ctx, opts, res, &cached), &cached)
	}
	r, err := j.runner(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if opts.PlanOnly {
		return &stage.Result{Plan: j.Plan, Stages: r.Keys(j.Plan)}, nil
	}
	t := time.Now()
	if err := j.preflight(ctx, r); err != nil {
		return nil, err
	}
	j.opts.Log.Debug("preflight passed", "seconds", since(t))
	res, err := r.Run(ctx, j.Plan)
	if err != nil || (opts.CacheFrom == nil && opts.CacheTo == nil) {
		return res, err
	}
	return withCache(res, nil, j.toCache(ctx, opts, res, &cached), &cached)
}

// runner checks the options and the rules on the plan, opens the store, starts the
// patch stages (unless PlanOnly) and probes the toolchain meanwhile: everything a run
// needs, short of preflight, which decides before anything is built. The caller closes
// the runner.
func (j *Job) runner(ctx context.Context, opts BuildOptions) (*stage.Runner, error) {
	if err := checkSourceDateEpoch(opts.SourceDateEpoch); err != nil {
		return nil, err
	}
	for _, f := range opts.Force {
		if f != "all" && !slices.Contains(store.StageOrder, f) {
			return nil, &plan.UsageError{Err: fmt.Errorf("--force=%s: use all, patch, build, check or package", f)}
		}
	}
	t := time.Now()
	findings, err := j.findings(ctx, nil, true)
	if err != nil {
		return nil, err
	}
	j.opts.Log.Debug("rules decided on the plan", "seconds", since(t))
	c, err := j.Cache()
	if err != nil {
		return nil, err
	}
	var pkgs []string
	for _, comp := range j.Plan.Components {
		if comp.Source.Python != nil {
			pkgs = append(pkgs, comp.Source.Python.Package)
		}
		// the package a python-wheel replaces: its version is what undoes the install
		if w := comp.PythonWheel; w != nil && comp.Source.Python == nil && !slices.Contains(pkgs, w.Package) {
			pkgs = append(pkgs, w.Package)
		}
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	store, err := store.OpenStore(c.Dir())
	if err != nil {
		return nil, err
	}
	if store.ReadOnly() {
		j.opts.Log.Debug("the cache is read-only: cached stages are served, use times and the run's record are not written", "cache", c.Dir())
	}
	src, err := j.Sources()
	if err != nil {
		store.Close()
		return nil, err
	}
	r := &stage.Runner{
		Store: store, Sources: src, Log: j.opts.Log, Environ: opts.Environ,
		OutDir: opts.OutDir, Force: opts.Force, AllowApplied: opts.AllowApplied, KeepFailed: opts.KeepFailed, Version: opts.Version,
		SourceDateEpoch: opts.SourceDateEpoch, Findings: findings, Repro: opts.Repro, Watch: opts.Watch,
	}
	probeCtx, stop := context.WithCancel(ctx)
	if !opts.PlanOnly {
		r.StartPatches(ctx, j.Plan)
		// The probe's Python runs (torch's NCCL imports torch) and the import checks share
		// the bytecode they compile: compiling torch is most of an import of it.
		probeCtx = r.SharedBytecode(probeCtx)
	}
	prober := &toolchain.Prober{Getenv: getenv, Packages: pkgs, Torch: j.Plan.Toolchain.Torch != "",
		CMakePackages: toolchain.NeedsCMakePackages(j.Plan), Prefixes: toolchain.CMakePrefixPath(j.Plan), NCCL: torchNCCL(j.Plan)}
	// what only the manifest needs of the toolchain (torch's NCCL) is still asked while
	// preflight decides and the builds run: Run takes it before the package stage
	t = time.Now()
	tc, finish := prober.ProbeLater(probeCtx, filepath.Join(c.Dir(), "toolchain"))
	r.Probing(tc, stop, finish)
	r.AfterBuild = j.rulesAfterBuild
	j.opts.Log.Debug("probed the toolchain", "seconds", since(t))
	return r, nil
}

// preflight stops a run whose build host lacks something (exit 3) or that the rules stop
// on the probed toolchain; the rules' findings join the runner's.
func (j *Job) preflight(ctx context.Context, r *stage.Runner) error {
	pre, err := j.findings(ctx, r.Toolchain, true)
	if err := buildHostVerdict(toolchain.Preflight(j.Plan, r.Toolchain), err); err != nil {
		return err
	}
	r.Findings = append(r.Findings, pre...)
	return nil
}

// NotReproducibleError is a rebuild check whose two artifacts differ: the job failed.
type NotReproducibleError struct {
	Recipe string
	Check  *stage.RebuildCheck
	First  string // the first artifact's sha256
}

func (e *NotReproducibleError) Error() string {
	return fmt.Sprintf("rebuild check: a second build of %s at another location gave other bytes (sha256 %s, not %s): %d of %d entries differ; the second artifact is kept at %s; `epbuild diff` compares the two",
		e.Recipe, e.Check.SHA256[:12], e.First[:12], len(e.Check.Diff.Changes), e.Check.Diff.Entries, e.Check.Kept)
}

// ExitCode: the job failed.
func (e *NotReproducibleError) ExitCode() int { return 1 }

// BuildAndCheck builds the plan as Build does (or finds it cached), then builds it a
// second time from nothing in a stage store of its own at another place in the cache
// (the fetched sources are shared), compares the two artifacts and fails with
// *NotReproducibleError when they differ, keeping the second beside the first
// (OutDir/rebuild/). The result's Rebuild holds the comparison. It does not look in
// CacheFrom (it is a build); an artifact that built the same twice goes to CacheTo.
func (j *Job) BuildAndCheck(ctx context.Context, opts BuildOptions) (*stage.Result, error) {
	if opts.PlanOnly {
		return nil, &plan.UsageError{Err: errors.New("--rebuild-check builds: it does not go with --plan")}
	}
	r, err := j.runner(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if err := j.preflight(ctx, r); err != nil {
		return nil, err
	}
	res, err := r.Run(ctx, j.Plan)
	if err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp(filepath.Join(r.Store.Dir(), "tmp"), "rebuild-")
	if err != nil {
		return res, fmt.Errorf("rebuild check: %w", err)
	}
	defer func() { _ = disk.MakeWritable(dir); _ = os.RemoveAll(dir) }()
	res2, varied, err := r.Rebuild(ctx, j.Plan, dir)
	if err != nil {
		return res, err
	}
	rep, err := diff.Compare(ctx, res.Artifact, res2.Artifact, diff.Options{TempDir: dir})
	if err != nil {
		return res, fmt.Errorf("rebuild check: %w", err)
	}
	res.Rebuild = &stage.RebuildCheck{Equal: rep.Equal, SHA256: res2.SHA256, Varied: varied, Diff: rep}
	if rep.Equal {
		var cached stage.CacheReport // an artifact that builds the same twice is worth sharing
		return withCache(res, nil, j.toCache(ctx, opts, res, &cached), &cached)
	}
	kept := filepath.Join(filepath.Dir(res.Artifact), "rebuild", filepath.Base(res.Artifact))
	if err := pack.PublishArtifact(res2.Artifact, kept, res2.SHA256); err != nil {
		return res, fmt.Errorf("rebuild check: keep the second artifact: %w", err)
	}
	res.Rebuild.Kept = kept
	return res, &NotReproducibleError{Recipe: j.Plan.Recipe, Check: res.Rebuild, First: res.SHA256}
}

// torchNCCL reports whether the plan takes NCCL from the Python environment: the NCCL
// torch loads, whose version the probe then records.
func torchNCCL(p *plan.Plan) bool {
	c, ok := p.Component("nccl")
	return ok && c.Source.Python != nil
}

// checkSourceDateEpoch refuses a SOURCE_DATE_EPOCH that is not whole seconds, before any work.
func checkSourceDateEpoch(sde string) error {
	if sde == "" {
		return nil
	}
	if n, err := strconv.ParseInt(sde, 10, 64); err != nil || n < 0 {
		return &plan.UsageError{Err: fmt.Errorf("SOURCE_DATE_EPOCH=%q: give whole seconds since 1970 (e.g. $(git log -1 --format=%%ct)), or unset it to use the newest pinned commit's time", sde)}
	}
	return nil
}

// PatchOptions configure Patch.
type PatchOptions struct {
	// Out keeps the patched trees (Out/<component>); "" patches in a temporary directory.
	Out string
	patches.Options
}

// PatchReport is what patching one component did.
type PatchReport struct {
	Component string               `json:"component"`
	Tree      string               `json:"tree,omitempty"`
	Sets      []*patches.SetResult `json:"sets"`
	Effects   []verify.CheckResult `json:"effects,omitempty"`
	Error     string               `json:"error,omitempty"`
}

// Patch applies every component's patch sets, in order, on a fresh layout of its pinned
// source, and proves their effects (unless CheckOnly). It goes on after a component that
// fails; the error is the first failure (a conflict, a bad pin, an effect not shown). A
// source that cannot be laid out ends it with no reports.
func (j *Job) Patch(ctx context.Context, opts PatchOptions) ([]PatchReport, error) {
	src, err := j.Sources()
	if err != nil {
		return nil, err
	}
	root := opts.Out
	if root == "" {
		if root, err = os.MkdirTemp("", "epbuild-patch-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(root)
	}
	var reports []PatchReport
	var first error
	for _, c := range j.Plan.Components {
		if len(c.PatchSets) == 0 {
			continue
		}
		tree := filepath.Join(root, c.Name)
		if err := stage.Materialize(ctx, src, &c, tree); err != nil {
			return nil, err // no tree to patch: nothing to report
		}
		sets, effects, err := stage.ApplySets(ctx, src, &c, tree, opts.Options)
		rep := PatchReport{Component: c.Name, Sets: sets, Effects: effects}
		if opts.Out != "" {
			rep.Tree = tree
		}
		if err != nil {
			rep.Error = err.Error()
			if first == nil {
				first = err
			}
		}
		for _, ef := range effects {
			if !ef.OK() && first == nil {
				first = &verify.ChecksFailed{Where: "the patched tree of " + c.Name, Results: effects}
			}
		}
		reports = append(reports, rep)
	}
	return reports, first
}

// FetchReport is where one component's source went.
type FetchReport struct {
	Component string `json:"component"`
	Pin       string `json:"pin"`
	// Dest is the laid-out workspace ("" when only cached); Python the package of a
	// component taken from the Python environment (nothing fetched).
	Dest   string `json:"dest,omitempty"`
	Python string `json:"python,omitempty"`
}

// Fetch brings every pinned source into the cache; with out, each also becomes a
// workspace out/<component> (a real git checkout at the pinned commit, or a plain tree).
func (j *Job) Fetch(ctx context.Context, out string) ([]FetchReport, error) {
	src, err := j.Sources()
	if err != nil {
		return nil, err
	}
	// outside the stage store: no space in the cache or in out is said here (exit 3)
	places := []disk.Place{{Dir: j.cache.Dir(), Fix: store.FixCacheSpace}, {Dir: out, Fix: disk.FixOutSpace}}
	var reps []FetchReport
	for _, c := range j.Plan.Components {
		var err error
		switch {
		case c.Source.Git != nil:
			g := c.Source.Git
			var f *source.Fetcher
			if f, err = src.For(g.URL); err == nil {
				err = f.FetchGit(ctx, source.Git{URL: g.URL, Commit: g.Commit, Ref: g.Ref})
			}
		case c.Source.Archive != nil:
			a := c.Source.Archive
			var f *source.Fetcher
			if f, err = src.For(a.URL); err == nil {
				_, err = f.FetchArchive(ctx, source.Archive{URL: a.URL, SHA256: a.SHA256, Strip: a.Strip})
			}
		default:
			reps = append(reps, FetchReport{Component: c.Name, Python: c.Source.Python.Package})
			continue
		}
		if err != nil {
			return reps, disk.NoSpaceIn(err, "fetch "+c.Name, places...)
		}
		rep := FetchReport{Component: c.Name, Pin: c.Source.Pin()}
		if out != "" {
			rep.Dest = filepath.Join(out, c.Name)
			if err := stage.Materialize(ctx, src, &c, rep.Dest); err != nil {
				return reps, disk.NoSpaceIn(err, "lay out "+c.Name+" in "+rep.Dest, places...)
			}
		}
		reps = append(reps, rep)
	}
	return reps, nil
}

// Mirror writes into dir what the jobs need (builder/mirror), each job's sources read
// through its own fetcher and cache.
func Mirror(ctx context.Context, dir string, jobs ...*Job) (mirror.Report, error) {
	in := make([]mirror.Job, 0, len(jobs))
	for _, j := range jobs {
		src, err := j.Sources()
		if err != nil {
			return mirror.Report{Dir: dir}, err
		}
		in = append(in, mirror.Job{Plan: j.Plan, Fetcher: src.Main, CacheDir: j.cache.Dir()})
	}
	return mirror.Write(ctx, dir, in...)
}

// MatrixOptions configure BuildMatrix: the recipe (its Options) and the axes; none: the
// recipe's own matrix: field.
type MatrixOptions struct {
	Options
	Axes []compat.Axis
}

// BuildMatrix evaluates the rules on every combination of the axes (see compat.BuildMatrix),
// with the job's ancestry and its policy on undecided rules.
func BuildMatrix(ctx context.Context, opts MatrixOptions) (*compat.Matrix, error) {
	j := &Job{opts: opts.Options}
	if err := j.checkIgnoreRules(); err != nil {
		return nil, err
	}
	res, err := plan.NewResolver(opts.Library)
	if err != nil {
		return nil, err
	}
	res.Tags = j.repos().TagsAt
	axes := opts.Axes
	if len(axes) == 0 {
		doc, err := res.Load(opts.Recipe, opts.Sets)
		if err != nil {
			return nil, err
		}
		for _, n := range slices.Sorted(maps.Keys(doc.Recipe.Matrix)) {
			x, err := compat.NewAxis(n, doc.Recipe.Matrix[n])
			if err != nil {
				return nil, &recipes.Error{File: doc.File, Msg: "matrix: " + err.Error()}
			}
			axes = append(axes, x)
		}
	}
	rules, anc, err := j.rulesAndAncestry()
	if err != nil {
		return nil, err
	}
	facts := func(sets []string) (compat.Facts, error) {
		p, err := res.Resolve(opts.Recipe, sets)
		if err != nil {
			return compat.Facts{}, err
		}
		return plan.FactsFromPlan(p), nil
	}
	return compat.BuildMatrix(ctx, opts.Recipe, axes, opts.Sets, rules, anc, facts, opts.AllowUndecided)
}

// MatrixRunOptions configure RunMatrix: the matrix (MatrixOptions), the run's own
// options (matrix.Options, its Matrix and Build set by RunMatrix), and what a cell's
// build takes besides them, as for Build.
type MatrixRunOptions struct {
	MatrixOptions
	Run             matrix.Options
	SourceDateEpoch string
	Repro           stage.Repro
}

// RunMatrix builds the matrix (BuildMatrix) and runs its allowed cells one after another
// (matrix.Run), each built as Build builds a job of the recipe with the cell's sets.
func RunMatrix(ctx context.Context, opts MatrixRunOptions) (*matrix.Report, error) {
	if opts.Log == nil {
		opts.Log = log.New(io.Discard)
	}
	run := opts.Run
	if run.Getenv == nil {
		run.Getenv = os.Getenv
	}
	if run.Log == nil {
		run.Log = opts.Log
	}
	run.Matrix = func(ctx context.Context) (*compat.Matrix, error) { return BuildMatrix(ctx, opts.MatrixOptions) }
	run.Build = func(ctx context.Context, sets []string, dir string) (*stage.Result, error) {
		o := opts.Options
		o.Sets = sets
		j, err := Open(o)
		if err != nil {
			return nil, err
		}
		res, err := j.Build(ctx, BuildOptions{OutDir: dir, Version: run.Version, SourceDateEpoch: opts.SourceDateEpoch,
			Environ: run.Environ, Getenv: run.Getenv, Repro: opts.Repro})
		var re *RulesError
		if errors.As(err, &re) {
			var ids []string
			for _, f := range re.Findings {
				ids = append(ids, f.ID)
			}
			return res, &matrix.RefusedError{Rules: ids, Err: err}
		}
		return res, err
	}
	return matrix.Run(ctx, run)
}

// since is the seconds since t, to the millisecond: the debug log's timings.
func since(t time.Time) float64 { return float64(time.Since(t).Milliseconds()) / 1000 }

// checkIgnoreRules refuses an --ignore-rule id that names no rule: ignoring nothing
// silently would let the job stop, or go on, for a reason the user did not mean.
func (j *Job) checkIgnoreRules() error {
	if len(j.opts.IgnoreRules) == 0 {
		return nil
	}
	rules, err := j.Rules()
	if err != nil {
		return err
	}
	for _, id := range j.opts.IgnoreRules {
		if _, ok := rules.Get(id); !ok {
			return &plan.UsageError{Err: fmt.Errorf("--ignore-rule %s: no such rule; the closest: %s (`epbuild compat list` shows them all)",
				quote.Term(id), strings.Join(rules.Closest(id, 3), ", "))}
		}
	}
	return nil
}
