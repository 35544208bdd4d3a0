package stage

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/epbuild/epbuild/builder/verify"

	"github.com/charmbracelet/log"
	"github.com/go-git/go-git/v5"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/inspect"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/patches"
)

// Stages are the stage names, in order (what --force takes, besides all).
func Stages() []string { return slices.Clone(store.StageOrder) }

// Format versions: bump one to invalidate that stage's cached outputs after a change in
// how epbuild produces them.
const (
	patchFormat   = "patch/2"   // 2: the newest file time of an archive source
	buildFormat   = "build/4"   // 2: CMAKE_*FLAGS quoted for the shell Ninja and make use; 3: python/ holds a .dist-info; 4: reproducible (repro.go)
	checkFormat   = "check/3"   // 2: check files that resolve outside the prefix match nothing; 3: no store paths in results
	packageFormat = "package/5" // 2: wheels and the SBOM beside the artifact; 3: epbuild's version left the key and the manifest; 4: a wheel requires the Python packages it was built against; 5: artifact format 2 (zstd seekable frames, the manifest first)
)

// Sources picks the fetcher for a URL (the embedded repositories have their own).
type Sources interface {
	For(rawURL string) (*source.Fetcher, error)
}

// Runner runs a plan through the stages.
type Runner struct {
	Store     *store.Store
	Sources   Sources
	Log       *log.Logger
	Toolchain *toolchain.Toolchain
	// Environ is the base environment for build steps and checks.
	Environ []string
	// OutDir receives the artifact.
	OutDir string
	// Force lists stages to rerun ("all" for every one).
	Force        []string
	AllowApplied bool
	// KeepFailed keeps a failed build step's build directory (builder.BuildOptions.KeepFailed).
	KeepFailed bool
	// Version is epbuild's version, recorded in the manifest.
	Version string
	// SourceDateEpoch, when set, stamps the artifact; else the newest pinned commit's time.
	SourceDateEpoch string
	// Findings are the compatibility rules' warnings, recorded in the manifest.
	Findings []compat.Finding
	// Repro says where builds run and whether the reproducibility measures are on.
	Repro Repro
	// Watch shows the build steps while they run (nil: nothing does).
	Watch Watcher
	// AfterBuild evaluates the rules again with the build facts Run read (facts.go); the
	// findings replace Findings, an error stops the run before the package stage. nil:
	// not evaluated again. The policy is the caller's: the runner only asks.
	AfterBuild func(ctx context.Context, tc *toolchain.Toolchain, build map[string]string) ([]compat.Finding, error)

	// early is the patch stages Build started before preflight (StartPatches): Run
	// takes their outcome.
	early *patchPhase
	// pycache is where the Python runs of the run (the probe's, the import checks') keep
	// the bytecode they compile ("": each run its own).
	pycache string
	// buildFacts and buildFactNotes are what Run read of the built tree (facts.go), for
	// the manifest; AfterBuild evaluates the rules with them.
	buildFacts, buildFactNotes map[string]string
	// probing is the part of the toolchain probe still running (Prober.ProbeLater): Run
	// waits for it before the package stage records the toolchain.
	probing *probing
}

// probing is a toolchain probe's last question, under way.
type probing struct {
	stop   context.CancelFunc
	finish func()
}

// Probing gives the runner the toolchain while the probe's last question is still under
// way (toolchain.Prober.ProbeLater): Run calls finish before the package stage records
// the toolchain, Close stops it (stop) when no Run took it.
func (r *Runner) Probing(tc *toolchain.Toolchain, stop context.CancelFunc, finish func()) {
	r.Toolchain, r.probing = tc, &probing{stop: stop, finish: finish}
}

// SharedBytecode makes the run's bytecode directory, which the Python runs of the run
// (the probe's, the import checks') share, and returns ctx carrying it for the probe;
// Close removes it. ctx as it is when the directory cannot be made.
func (r *Runner) SharedBytecode(ctx context.Context) context.Context {
	dir, err := os.MkdirTemp("", "epbuild-pycache-")
	if err != nil {
		return ctx
	}
	r.pycache = dir
	return inspect.WithBytecodeDir(ctx, dir)
}

// toolchainDone waits for the probe's last answer (it completes r.Toolchain).
func (r *Runner) toolchainDone() {
	if pr := r.probing; pr != nil {
		r.probing = nil
		pr.finish()
		pr.stop()
	}
}

// StageEvent records one stage of one component.
type StageEvent struct {
	Stage     string  `json:"stage"`
	Component string  `json:"component,omitempty"`
	Key       string  `json:"key"`
	Cached    bool    `json:"cached"`
	Seconds   float64 `json:"seconds"`
	// From is the shared build cache the stage's output came from (--cache-from); ""
	// for this machine's store. Its package row's key is the plan key, the artifact's
	// tag there.
	From string `json:"from,omitempty"`
}

// Result is a whole run.
type Result struct {
	Plan       *plan.Plan                 `json:"plan"`
	Stages     []StageEvent               `json:"stages"`
	Components []manifest.ComponentResult `json:"components"`
	Artifact   string                     `json:"artifact,omitempty"`
	SHA256     string                     `json:"sha256,omitempty"`
	// SBOM is the CycloneDX SBOM beside the artifact; Wheels the wheels (WheelDir).
	SBOM   string   `json:"sbom,omitempty"`
	Wheels []string `json:"wheels,omitempty"`
	// Host is the machine that ran the run: kept here and in the build logs, not in the
	// artifact.
	Host *BuildHost `json:"host,omitempty"`
	// Rebuild is the rebuild check's comparison (BuildAndCheck).
	Rebuild *RebuildCheck `json:"rebuild,omitempty"`
	// Cache is what the shared build cache did (--cache-from, --cache-to).
	Cache *CacheReport `json:"cache,omitempty"`
}

// Keys computes the key of every stage a run of the plan runs, in the order a run
// reports them, without doing any work (for --plan).
func (r *Runner) Keys(p *plan.Plan) []StageEvent {
	var ev []StageEvent
	ks := r.keys(p)
	for _, c := range p.Components {
		if c.Source.Python != nil {
			continue // the environment's package: its key feeds its dependents', no stage runs
		}
		k := ks[c.Name]
		for _, st := range []struct{ stage, key string }{{"patch", k.patch}, {"build", k.build}, {"check", k.check}} {
			if st.key != "" {
				ev = append(ev, StageEvent{Stage: st.stage, Component: c.Name, Key: st.key, Cached: r.Store.Has(st.stage, st.key)})
			}
		}
	}
	pk := r.packageKey(p, ks)
	ev = append(ev, StageEvent{Stage: "package", Key: pk, Cached: r.Store.Has("package", pk)})
	return planOrder(p, ev)
}

type compKeys struct{ patch, build, check string }

func (r *Runner) keys(p *plan.Plan) map[string]compKeys {
	out := map[string]compKeys{}
	for _, c := range p.Components {
		var k compKeys
		if c.Source.Python != nil {
			pk := r.Toolchain.PythonPackages[c.Source.Python.Package]
			k.build = store.Key(buildFormat, "python", c.Source.Python.Package, pk.Version, pk.Dir)
			out[c.Name] = k
			continue
		}
		k.patch = patchKey(&c)
		deps := map[string]string{}
		for _, d := range c.Depends {
			deps[d] = out[d].build
			if deps[d] == "" {
				// a dependency with nothing to build (a submodule's source) counts by its tree
				deps[d] = out[d].patch
			}
		}
		if len(c.Build) > 0 {
			parts := []any{buildFormat, k.patch, c.Version, c.Build, deps, r.Toolchain.Fingerprint(), r.Repro.key(), r.SourceDateEpoch}
			if c.Tests != nil {
				// the build copies the declared tests into the prefix; none: the key stays
				parts = append(parts, c.Tests)
			}
			k.build = store.Key(parts...)
		}
		if k.build != "" {
			k.check = store.Key(checkFormat, k.build, c.Checks, c.PatchSets, p.Env, deps)
		}
		out[c.Name] = k
	}
	return out
}

// packageKey does not hold epbuild's version: a change of epbuild that changes what the
// package stage writes bumps packageFormat instead (docs/reproducible.md).
func (r *Runner) packageKey(p *plan.Plan, ks map[string]compKeys) string {
	return store.Key(packageFormat, p.Key, ks, r.SourceDateEpoch)
}

func (r *Runner) forced(stage string) bool {
	idx := func(s string) int {
		for i, x := range store.StageOrder {
			if x == s {
				return i
			}
		}
		return -1
	}
	for _, f := range r.Force {
		// forcing a stage forces the ones after it
		if f == "all" || (idx(f) >= 0 && idx(stage) >= idx(f)) {
			return true
		}
	}
	return false
}

// Run takes the plan through every stage, each as soon as what it reads is there:
//
//   - the patch stages, one component after the other (Build starts them before
//     preflight, beside the toolchain probe: they need no toolchain; see StartPatches);
//   - the builds, each once the builds it depends on are done: builds that do not depend
//     on each other run at the same time and share the cores (jobs.go);
//   - the checks, once every component is built (imports need the whole runtime env),
//     beside the package stage, which packs the prefixes meanwhile and writes the
//     manifest, which holds the check results, once they are in.
//
// The first failure stops the work under way (the stopped builds' logs stay, no stage
// output is half written) and is what Run returns; a rerun resumes there, since every
// finished stage is in the store. Result.Stages is in plan order whatever finished
// first: each component's patch and build, then the checks, then the package.
func (r *Runner) Run(ctx context.Context, p *plan.Plan) (*Result, error) {
	res := &Result{Plan: p, Host: r.buildHost()}
	rec := &stageRecord{}
	defer func() { res.Stages = rec.ordered(p) }()
	ks := r.keys(p)

	var outs []patchOut
	var err error
	if ph := r.early; ph != nil && ph.plan == p {
		r.early = nil
		t := time.Now()
		<-ph.done
		r.Log.Debug("waited for the patch stages", "seconds", since(t))
		ph.stop()
		outs, err = ph.outs, ph.err
		rec.add(ph.events...)
	} else {
		var events []StageEvent
		outs, events, err = r.patchAll(ctx, p)
		rec.add(events...)
	}
	comps := make([]manifest.ComponentResult, len(p.Components))
	prefixes := map[string]string{}
	for i, c := range p.Components {
		k := ks[c.Name]
		comps[i] = manifest.ComponentResult{Name: c.Name, PatchKey: k.patch, BuildKey: k.build, CheckKey: k.check}
		if c.Source.Python != nil {
			comps[i].Prefix = r.Toolchain.PythonPackages[c.Source.Python.Package].Dir
			prefixes[c.Name] = comps[i].Prefix
		} else if o := outs[i]; o.tree != "" {
			comps[i].Tree, comps[i].Patches, comps[i].TreeEffects, comps[i].CommitTime = o.tree, o.pj.Sets, o.pj.Effects, o.pj.CommitTime
		}
	}
	res.Components = comps
	if err != nil {
		return res, err
	}
	if err := r.buildAll(ctx, p, outs, comps, prefixes, rec); err != nil {
		return res, err
	}
	r.toolchainDone() // the manifest records it
	if err := r.recordBuildFacts(ctx, p, comps); err != nil {
		return res, err
	}

	env, err := envsh.RuntimeEnv(p, prefixes, r.Environ)
	if err != nil {
		return res, err
	}
	// The package stage packs a copy of what it needs now; the check goroutines fill in
	// comps, which its manifest takes once they are done.
	pres := *res
	pres.Components = slices.Clone(comps)
	checked := make(chan struct{})
	var checkErr error
	go func() {
		defer close(checked)
		checkErr = r.checkAll(ctx, p, comps, prefixes, env, rec)
	}()
	pk := r.packageKey(p, ks)
	pkgErr := r.stage(ctx, rec, "package", "", pk, func(dir string) error {
		return r.pack(ctx, p, &pres, dir, func() ([]manifest.ComponentResult, error) {
			select {
			case <-checked:
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
			if checkErr != nil {
				return nil, errors.New("the checks failed")
			}
			return comps, nil
		})
	}, nil)
	<-checked
	if checkErr != nil {
		return res, checkErr // what stopped the package stage, if it did
	}
	if pkgErr != nil {
		return res, pkgErr
	}
	art := filepath.Join(r.Store.Path("package", pk), pack.ArtifactName(p))
	sum, err := pack.ReadSum(art)
	if err != nil {
		return res, err
	}
	res.SHA256 = sum
	set, err := pack.Publish(p, r.Store.Path("package", pk), r.OutDir, sum)
	if err != nil {
		return res, err
	}
	res.Artifact, res.SBOM, res.Wheels = set.Artifact, set.SBOM, set.Wheels
	return res, nil
}

// patchOut is what a component's patch stage left: its tree and record.
type patchOut struct {
	tree string
	pj   patchJSON
}

// patchKey is the key of a component's patch stage: its source and patch sets.
func patchKey(c *plan.PlanComponent) string { return store.Key(patchFormat, c.Source, c.PatchSets) }

// patchAll runs the patch stage of every component with a tree, in plan order, and
// stops at the first failure. One at a time: each is mostly a fetch, and fetches share
// the terminal's progress bars.
func (r *Runner) patchAll(ctx context.Context, p *plan.Plan) ([]patchOut, []StageEvent, error) {
	rec := &stageRecord{}
	outs := make([]patchOut, len(p.Components))
	for i := range p.Components {
		c := &p.Components[i]
		if c.Source.Python != nil {
			continue
		}
		key := patchKey(c)
		var pj patchJSON
		err := r.stage(ctx, rec, "patch", c.Name, key, func(dir string) error {
			return r.patchStage(ctx, c, dir)
		}, func(dir string) error { return store.ReadJSON(dir, "patch.json", &pj) })
		if err != nil {
			return outs, rec.events, err
		}
		outs[i] = patchOut{tree: filepath.Join(r.Store.Path("patch", key), "tree"), pj: pj}
	}
	return outs, rec.events, nil
}

// patchPhase is the patch stages of a run, started before preflight.
type patchPhase struct {
	plan   *plan.Plan
	stop   context.CancelFunc
	done   chan struct{}
	outs   []patchOut
	events []StageEvent
	err    error
}

// StartPatches starts the patch stages of p in the background; Run takes their outcome
// (a failure too: it is said after preflight, which decides first), and Close stops
// them when the run ends before (preflight failed). They need no toolchain, so they
// run while it is probed; nothing is built before preflight passes.
func (r *Runner) StartPatches(ctx context.Context, p *plan.Plan) {
	ctx, cancel := context.WithCancel(ctx)
	ph := &patchPhase{plan: p, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(ph.done)
		ph.outs, ph.events, ph.err = r.patchAll(ctx, p)
	}()
	r.early = ph
}

// Close stops the work the runner started that a Run did not take (the patch stages,
// the probe's last question), waits for it, removes the run's bytecode directory, and
// closes the store.
func (r *Runner) Close() error {
	if ph := r.early; ph != nil {
		r.early = nil
		ph.stop()
		<-ph.done
	}
	if pr := r.probing; pr != nil {
		r.probing = nil
		pr.stop()
		pr.finish()
	}
	if r.pycache != "" {
		_ = os.RemoveAll(r.pycache)
		r.pycache = ""
	}
	return r.Store.Close()
}

// buildAll runs the build stages: each once the builds of its dependencies are done,
// those ready together at the same time with a share of the jobs each (jobs.go). It
// fills in the prefixes of what it built. The first failure stops the builds running
// (their logs stay under the cache) and starts no other.
func (r *Runner) buildAll(ctx context.Context, p *plan.Plan, outs []patchOut, comps []manifest.ComponentResult, prefixes map[string]string, rec *stageRecord) error {
	var pending []int
	built := map[string]bool{}
	for i, cr := range comps {
		if cr.BuildKey == "" || p.Components[i].Source.Python != nil {
			built[cr.Name] = true // a Python package, or a tree with nothing to build
		} else {
			pending = append(pending, i)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	trees := map[string]string{}
	for i, o := range outs {
		if o.tree != "" {
			trees[p.Components[i].Name] = o.tree
		}
	}
	if !r.Repro.Off {
		// what the steps write gets the same modes under any umask (a wheel keeps them);
		// the umask is the process's: it is set while the builds run, and nothing else
		// does then
		defer setUmask(setUmask(0o022))
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	type ended struct {
		i, jobs int
		err     error
	}
	ends := make(chan ended)
	total := max(r.Toolchain.Jobs, 1)
	held, running := 0, 0
	var first error
	for {
		var ready []int
		if first == nil {
			rest := pending[:0:0]
			for _, i := range pending {
				if slices.ContainsFunc(p.Components[i].Depends, func(d string) bool { return !built[d] }) {
					rest = append(rest, i)
				} else {
					ready = append(ready, i)
				}
			}
			pending = rest
		}
		weights := make([]int, len(ready))
		for k, i := range ready {
			weights[k] = compileUnits(comps[i].Tree)
		}
		shares := shareJobs(total-held, weights)
		for k, i := range ready {
			c := &p.Components[i]
			// what the build may name: its dependencies (all of them built by now)
			depPrefixes, depTrees := map[string]string{}, map[string]string{}
			for _, d := range dependencies(p, c) {
				if v := prefixes[d]; v != "" {
					depPrefixes[d] = v
				}
				if v := trees[d]; v != "" {
					depTrees[d] = v
				}
			}
			key, tree, sde, jobs := comps[i].BuildKey, comps[i].Tree, r.buildTime(outs[i].pj), shares[k]
			if len(ready) > 1 || running > 0 {
				r.Log.Debug("jobs", "component", c.Name, "jobs", jobs, "of", total)
			}
			held += jobs
			running++
			go func() {
				err := r.stage(ctx, rec, "build", c.Name, key, func(dir string) error {
					return r.buildStage(ctx, p, c, tree, key, dir, sde, jobs, depPrefixes, depTrees)
				}, nil)
				ends <- ended{i, jobs, err}
			}()
		}
		if running == 0 {
			if first == nil && len(pending) > 0 {
				return fmt.Errorf("%s: the builds of %d components wait for each other (a dependency cycle)", p.Recipe, len(pending))
			}
			return first
		}
		e := <-ends
		running--
		held -= e.jobs
		name := p.Components[e.i].Name
		switch {
		case e.err == nil:
			built[name] = true
			comps[e.i].Prefix = filepath.Join(r.Store.Path("build", comps[e.i].BuildKey), "prefix")
			prefixes[name] = comps[e.i].Prefix
		case first == nil:
			first = e.err
			stop(fmt.Errorf("build %s failed", name))
		default:
			r.Log.Warn("stopped", "stage", "build "+name, "because", context.Cause(ctx), "error", e.err)
		}
	}
}

// stagedCheckEnv is the env of c's checks on the build host: the runtime env, with the
// shared libraries of each python-wheel component c depends on preloaded (their wheel
// is not installed here, so torch would load the Python environment's copy without
// them) and c's check-env on top. env.sh never gets either.
func stagedCheckEnv(p *plan.Plan, c *plan.PlanComponent, env []string, prefixes map[string]string) []string {
	var pre []string
	for _, d := range dependencies(p, c) {
		dc, ok := p.Component(d)
		if !ok || dc.PythonWheel == nil || dc.Source.Python != nil || prefixes[d] == "" {
			continue
		}
		for _, f := range dc.PythonWheel.Files {
			if sharedLibRe.MatchString(path.Base(f)) {
				pre = append(pre, filepath.Join(prefixes[d], filepath.FromSlash(f)))
			}
		}
	}
	add := maps.Clone(c.CheckEnv)
	if len(pre) > 0 {
		if add == nil {
			add = map[string]string{}
		}
		if old := envsh.Lookup(env, "LD_PRELOAD"); old != "" {
			pre = append([]string{old}, pre...)
		}
		add["LD_PRELOAD"] = strings.Join(pre, ":")
	}
	if len(add) == 0 {
		return env
	}
	return envsh.WithEnv(env, add)
}

// sharedLibRe is a shared library's file name: libnccl.so, libnccl.so.2, libnccl.so.2.30.7.
var sharedLibRe = regexp.MustCompile(`\.so(\.[0-9]+)*$`)

// dependencies lists the components c depends on, directly or not, in plan order.
func dependencies(p *plan.Plan, c *plan.PlanComponent) []string {
	want := map[string]bool{}
	var visit func(*plan.PlanComponent)
	visit = func(c *plan.PlanComponent) {
		for _, d := range c.Depends {
			if !want[d] {
				want[d] = true
				if dc, ok := p.Component(d); ok {
					visit(dc)
				}
			}
		}
	}
	visit(c)
	var out []string
	for _, pc := range p.Components {
		if want[pc.Name] {
			out = append(out, pc.Name)
		}
	}
	return out
}

// checkAll runs the check stages of the built components, at the same time (an import
// check takes seconds), and fills in their results; the error is the first failure in
// plan order. The Python runs share the run's bytecode directory, where the probe left
// what it compiled of torch.
func (r *Runner) checkAll(ctx context.Context, p *plan.Plan, comps []manifest.ComponentResult, prefixes map[string]string, env []string, rec *stageRecord) error {
	if r.pycache != "" {
		ctx = inspect.WithBytecodeDir(ctx, r.pycache)
	}
	reg := verify.Checks()
	errs := make([]error, len(comps))
	var wg sync.WaitGroup
	for i := range comps {
		cr := &comps[i]
		if cr.CheckKey == "" {
			continue
		}
		pc, _ := p.Component(cr.Name)
		cenv := stagedCheckEnv(p, pc, env, prefixes)
		wg.Go(func() {
			var cj checkJSON
			errs[i] = r.stage(ctx, rec, "check", cr.Name, cr.CheckKey, func(dir string) error {
				s := &verify.Subject{Plan: p, Component: pc, Root: cr.Prefix, Prefixes: prefixes, Env: cenv, Python: r.Toolchain.Python}
				results := storeRelative(verify.CheckComponent(ctx, reg, check.Staged, s), r.Store.Dir(), prefixes)
				for _, x := range results {
					if !x.OK() {
						return &verify.ChecksFailed{Where: "the staged prefix of " + cr.Name, Results: results}
					}
				}
				return store.WriteJSON(dir, "check.json", checkJSON{Results: results})
			}, func(dir string) error { return store.ReadJSON(dir, "check.json", &cj) })
			cr.Checks = cj.Results
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// stageRecord collects the stage events of a run from the goroutines that run them.
type stageRecord struct {
	mu     sync.Mutex
	events []StageEvent
}

func (s *stageRecord) add(ev ...StageEvent) {
	s.mu.Lock()
	s.events = append(s.events, ev...)
	s.mu.Unlock()
}

// ordered is the events in plan order, as a run one stage at a time would have them:
// each component's patch then build, then the checks in component order, then the
// package.
func (s *stageRecord) ordered(p *plan.Plan) []StageEvent {
	s.mu.Lock()
	out := slices.Clone(s.events)
	s.mu.Unlock()
	return planOrder(p, out)
}

// planOrder sorts events in place into plan order (see ordered) and returns them.
func planOrder(p *plan.Plan, out []StageEvent) []StageEvent {
	index := map[string]int{}
	for i, c := range p.Components {
		index[c.Name] = i
	}
	rank := func(e StageEvent) [3]int {
		switch e.Stage {
		case "patch":
			return [3]int{0, index[e.Component], 0}
		case "build":
			return [3]int{0, index[e.Component], 1}
		case "check":
			return [3]int{1, index[e.Component], 0}
		}
		return [3]int{2, 0, 0}
	}
	slices.SortStableFunc(out, func(a, b StageEvent) int {
		ra, rb := rank(a), rank(b)
		return slices.Compare(ra[:], rb[:])
	})
	return out
}

// stage runs one stage through the store, logging whether it was cached.
func (r *Runner) stage(ctx context.Context, rec *stageRecord, stage, comp, key string, make func(dir string) error, load func(dir string) error) error {
	if r.forced(stage) && r.Store.Has(stage, key) {
		if err := r.Store.Forget(stage, key); err != nil {
			return err
		}
	}
	start := time.Now()
	what := stage
	if comp != "" {
		what = stage + " " + comp
	}
	cached, err := r.Store.Produce(ctx, stage, key, func(dir string) error {
		r.Log.Info("running", "stage", stage, "component", comp, "key", key[:12])
		return make(dir)
	})
	if err != nil {
		return err
	}
	ev := StageEvent{Stage: stage, Component: comp, Key: key, Cached: cached, Seconds: time.Since(start).Seconds()}
	rec.add(ev)
	if cached {
		r.Log.Debug("cached", "stage", what, "key", key[:12])
	} else {
		r.Log.Info("done", "stage", what, "seconds", math.Round(ev.Seconds*10)/10)
	}
	if load != nil {
		return load(r.Store.Path(stage, key))
	}
	return nil
}

type patchJSON struct {
	Sets       []*patches.SetResult `json:"sets,omitempty"`
	Effects    []verify.CheckResult `json:"effects,omitempty"`
	CommitTime int64                `json:"commit_time,omitempty"`
	// SourceTime is the newest file time of an archive source, before patching: its
	// builds' SOURCE_DATE_EPOCH, where a git source has its commit's time.
	SourceTime int64 `json:"source_time,omitempty"`
}

type checkJSON struct {
	Results []verify.CheckResult `json:"results"`
}

// upstream adapts a source.Fetcher to the patch engine's Upstream.
type upstream struct{ s Sources }

func (u upstream) Diff(ctx context.Context, d patches.DiffSpec) ([]byte, error) {
	f, err := u.s.For(d.Repo)
	if err != nil {
		return nil, err
	}
	return f.Diff(ctx, source.DiffSpec{Repo: d.Repo, Base: d.Base, Head: d.Head, Ref: d.Ref})
}

func (u upstream) File(ctx context.Context, fs patches.FileSpec) ([]byte, error) {
	f, err := u.s.For(fs.Repo)
	if err != nil {
		return nil, err
	}
	return f.File(ctx, source.FileSpec{Repo: fs.Repo, Commit: fs.Commit, Path: fs.Path})
}

// Materialize lays out a component's pinned source in dest (which must not exist).
func Materialize(ctx context.Context, s Sources, c *plan.PlanComponent, dest string) error {
	switch {
	case c.Source.Git != nil:
		g := c.Source.Git
		f, err := s.For(g.URL)
		if err != nil {
			return err
		}
		return f.CheckoutGit(ctx, source.Git{URL: g.URL, Commit: g.Commit, Ref: g.Ref}, dest)
	case c.Source.Archive != nil:
		a := c.Source.Archive
		f, err := s.For(a.URL)
		if err != nil {
			return err
		}
		return f.ExtractArchive(ctx, source.Archive{URL: a.URL, SHA256: a.SHA256, Strip: a.Strip}, dest)
	}
	return fmt.Errorf("component %s: a %s source has no tree", c.Name, c.Source.Kind())
}

// ApplySets applies the component's patch sets in order on tree, then checks their
// effects there.
func ApplySets(ctx context.Context, s Sources, c *plan.PlanComponent, tree string, opts patches.Options) ([]*patches.SetResult, []verify.CheckResult, error) {
	if opts.CheckOnly {
		// each set on the tree the sets before it leave, as the real apply sees it
		sets, failed, err := patches.CheckSeries(ctx, tree, c.PatchSets, upstream{s}, opts)
		if err != nil {
			return sets, nil, &PatchError{Component: c.Name, Set: c.PatchSets[failed].Name, Err: err}
		}
		return sets, nil, nil
	}
	var sets []*patches.SetResult
	for _, set := range c.PatchSets {
		sr, err := patches.Apply(ctx, tree, set, upstream{s}, opts)
		if sr != nil {
			sets = append(sets, sr)
		}
		if err != nil {
			return sets, nil, &PatchError{Component: c.Name, Set: set.Name, Err: err}
		}
	}
	return sets, verify.TreeEffects(c, tree), nil
}

// PatchError is a patch set that did not apply: exit 1 (a conflict), or 2 when the
// patch set's own pin is wrong.
type PatchError struct {
	Component, Set string
	Err            error
}

func (e *PatchError) Error() string {
	return fmt.Sprintf("patch %s with %s: %v", e.Component, e.Set, e.Err)
}
func (e *PatchError) Unwrap() error { return e.Err }

// ExitCode: a bad pin is bad input, anything else a failed job.
func (e *PatchError) ExitCode() int {
	var pe *patches.PinError
	if errors.As(e.Err, &pe) || errors.Is(e.Err, source.ErrBadPin) {
		return 2
	}
	return 1
}

func (r *Runner) patchStage(ctx context.Context, c *plan.PlanComponent, dir string) error {
	tree := filepath.Join(dir, "tree")
	if err := Materialize(ctx, r.Sources, c, tree); err != nil {
		return err
	}
	var srcTime int64
	if c.Source.Git == nil {
		srcTime = newestFileTime(tree)
	}
	sets, effects, err := ApplySets(ctx, r.Sources, c, tree, patches.Options{AllowApplied: r.AllowApplied})
	if err != nil {
		return err
	}
	for _, e := range effects {
		if !e.OK() {
			return &verify.ChecksFailed{Where: "the patched tree of " + c.Name, Results: effects}
		}
	}
	pj := patchJSON{Sets: sets, Effects: effects, SourceTime: srcTime}
	if c.Source.Git != nil {
		pj.CommitTime = commitTime(tree)
	}
	return store.WriteJSON(dir, "patch.json", pj)
}

func commitTime(tree string) int64 {
	repo, err := git.PlainOpen(tree)
	if err != nil {
		return 0
	}
	head, err := repo.Head()
	if err != nil {
		return 0
	}
	cm, err := repo.CommitObject(head.Hash())
	if err != nil {
		return 0
	}
	return cm.Committer.When.Unix()
}

// buildStage builds a component into dir with jobs jobs. prefixes and trees are those of
// the components it may name (its dependencies). The caller sets the umask (buildAll).
func (r *Runner) buildStage(ctx context.Context, p *plan.Plan, c *plan.PlanComponent, tree, key, dir string, sde int64, jobs int, prefixes, trees map[string]string) error {
	wd, err := r.acquireWorkDir(ctx, c.Name, key)
	if err != nil {
		return fmt.Errorf("build %s: %w", c.Name, err)
	}
	kept := false
	defer func() {
		if kept {
			wd.keep()
		} else {
			wd.release()
		}
	}()
	work := wd.path
	src := filepath.Join(work, "src")
	if err := copyTree(tree, src); err != nil {
		return r.buildRootFull(fmt.Errorf("build %s: copy the patched tree: %w", c.Name, err))
	}
	// The logs live under the cache while the steps run, so that a failed step's whole
	// log outlives the stage's temporary directory; a finished build keeps them.
	logs, err := r.Store.StepLogs("build", key)
	if err != nil {
		return fmt.Errorf("build %s: %w", c.Name, err)
	}
	// the path the build is told it installs to; the files land under destdir
	prefix := filepath.Join(r.Store.Path("build", key), "prefix")
	if !r.Repro.Off {
		prefix = filepath.Join(work, "prefix")
	}
	destdir := filepath.Join(dir, "destdir")
	if err := os.MkdirAll(destdir+prefix, 0o755); err != nil {
		return fmt.Errorf("build %s: %w", c.Name, err)
	}
	t := r.Toolchain
	vars := map[string]string{"prefix": prefix, "jobs": strconv.Itoa(jobs), "cuda.home": t.CUDAHome, "nvcc": t.NVCC, "mpi.home": t.MPIHome}
	// what the build may name of its dependencies, through stable links when the
	// measures are on: their paths end up in what it builds (RUNPATH, -I)
	for _, pc := range p.Components {
		pre, tr := prefixes[pc.Name], trees[pc.Name]
		if !r.Repro.Off && pc.Source.Python == nil {
			if pre, tr, err = linkDependency(work, pc.Name, pre, tr); err != nil {
				return fmt.Errorf("build %s: %w", c.Name, err)
			}
		}
		if pre != "" {
			vars[pc.Name+".prefix"] = pre
		}
		if tr != "" {
			vars[pc.Name+".src"] = tr
		}
		vars[pc.Name+".version"] = pc.Version
	}
	base := map[string]string{}
	if t.CUDAHome != "" {
		base["CUDA_HOME"] = t.CUDAHome
		// CUDA 13 moved cuda/std under include/cccl; host compilers need it (R12)
		if t.CCCL != "" {
			cpath := t.CCCL
			if old := toolchain.GetenvFrom(r.Environ, "CPATH"); old != "" {
				cpath += ":" + old
			}
			base["CPATH"] = cpath
		}
	}
	var mapFlag string
	if !r.Repro.Off {
		maps.Copy(base, reproEnv(r.Environ, c.Name, wd, sde, t))
		if err := os.Mkdir(filepath.Join(wd.out, "tmp"), 0o755); err != nil {
			return fmt.Errorf("build %s: %w", c.Name, err)
		}
		mapFlag = strings.Join(prefixMapFlags(c.Name, wd, t), " ")
		w, err := writeNVCCWrappers(wd, t)
		if err != nil {
			return fmt.Errorf("build %s: write the nvcc wrappers: %w", c.Name, err)
		}
		if w.nvcc != "" {
			vars["nvcc"] = w.nvcc // a make-based build (NCCL) takes it as NVCC={{nvcc}}
		}
		for k, script := range map[string]string{"PYTORCH_NVCC": w.nvcc, "CMAKE_CUDA_COMPILER_LAUNCHER": w.launcher} {
			switch {
			case script == "":
			case toolchain.GetenvFrom(r.Environ, k) != "":
				r.Log.Warn("nvcc runs as "+k+" says, without the seed that makes its output reproducible", "component", c.Name)
			default:
				base[k] = script
			}
		}
	}
	if err := writeBuildRecord(logs, buildRecord{Host: r.buildHost(), Dir: work, Out: wd.out, Env: base}); err != nil {
		return fmt.Errorf("build %s: %w", c.Name, err)
	}
	se := &stepEnv{component: c.Name, src: src, work: work, out: wd.out, prefix: prefix, destdir: destdir, logs: logs,
		env: envsh.WithEnv(r.Environ, base), jobs: jobs, ninja: t.Ninja != "", python: t.Python, watch: r.Watch, mapFlag: mapFlag}
	for i, st := range c.Build {
		var err error
		switch {
		case st.CMake != nil:
			err = se.cmake(ctx, i, st.CMake, vars)
		case st.PythonExtension != nil:
			err = se.pythonExtension(ctx, i, st.PythonExtension, vars)
		case st.Command != nil:
			err = se.command(ctx, i, st.Command, vars)
		}
		if err != nil {
			var be *BuildError
			if r.KeepFailed && errors.As(err, &be) && !be.Stopped {
				kept, be.Kept = true, work
				if wd.out != work {
					be.Kept += " (the build trees: " + wd.out + ")"
				}
			}
			return r.buildRootFull(err)
		}
	}
	if err := se.copyTests(c.Tests); err != nil {
		return err
	}
	if err := os.Rename(destdir+prefix, filepath.Join(dir, "prefix")); err != nil {
		return fmt.Errorf("build %s: stage the prefix: %w", c.Name, err)
	}
	if err := os.Rename(logs, filepath.Join(dir, "logs")); err != nil {
		return fmt.Errorf("build %s: keep the logs: %w", c.Name, err)
	}
	return os.RemoveAll(destdir)
}

// buildTime is a build's SOURCE_DATE_EPOCH: the one given, else its source's time (the
// pinned commit's, or an archive's newest file's), so that it follows from the pins.
func (r *Runner) buildTime(pj patchJSON) int64 {
	if n, err := strconv.ParseInt(r.SourceDateEpoch, 10, 64); err == nil {
		return n
	}
	if pj.CommitTime > 0 {
		return pj.CommitTime
	}
	return pj.SourceTime
}

// buildRootFull names a full build root as such (exit 3): with the measures on, the
// build trees are there, not in the cache. As for the cache (Store.noSpace), a step that
// failed while the root is nearly full counts as having filled it; a full cache is
// Store.noSpace's to name.
func (r *Runner) buildRootFull(err error) error {
	var ns *disk.NoSpaceError
	if r.Repro.Off || errors.As(err, &ns) {
		return err
	}
	root := r.Repro.root()
	free, full := disk.FullDisk(root)
	if !full {
		return err
	}
	return &disk.NoSpaceError{Op: "build in " + root, Path: root, Free: free, Fix: fixBuildRoot, Err: err}
}

// linkDependency makes work/deps/<name>/prefix and src point at a component's staged
// prefix and patched tree, and returns those stable paths ("" for what it lacks).
func linkDependency(work, name, prefix, tree string) (string, string, error) {
	dir := filepath.Join(work, "deps", name)
	var outP, outT string
	for _, l := range []struct {
		target string
		link   string
		out    *string
	}{{prefix, "prefix", &outP}, {tree, "src", &outT}} {
		if l.target == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", "", err
		}
		p := filepath.Join(dir, l.link)
		if err := os.Symlink(l.target, p); err != nil {
			return "", "", err
		}
		*l.out = p
	}
	return outP, outT, nil
}

// newestFileTime is the newest modification time of a regular file in a tree, in whole
// seconds (0 for none). Directories do not count: the extractor made the tree's own.
func newestFileTime(dir string) int64 {
	var newest int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil && info.ModTime().Unix() > newest {
			newest = info.ModTime().Unix()
		}
		return nil
	})
	return newest
}

// storeRelative writes the components' staged prefixes, which lie in the cache, as the
// paths they have in the artifact (<component>/...) in the check results the manifest
// records: where the cache is is the machine's business.
func storeRelative(rs []verify.CheckResult, store string, prefixes map[string]string) []verify.CheckResult {
	var pairs []string
	for _, name := range slices.Sorted(maps.Keys(prefixes)) {
		if pre := prefixes[name]; pre != "" && strings.HasPrefix(pre, store+string(filepath.Separator)) {
			pairs = append(pairs, pre+string(filepath.Separator), name+"/", pre, name)
		}
	}
	if len(pairs) == 0 {
		return rs
	}
	rep := strings.NewReplacer(pairs...)
	out := make([]verify.CheckResult, len(rs))
	for i, r := range rs {
		for _, f := range []*string{&r.Read, &r.Expected, &r.Found, &r.Why, &r.Fix} {
			*f = rep.Replace(*f)
		}
		out[i] = r
	}
	return out
}

// pack is the package stage: res's components give the prefixes and times, checked the
// results the manifest records (pack.Write).
func (r *Runner) pack(ctx context.Context, p *plan.Plan, res *Result, dir string, checked func() ([]manifest.ComponentResult, error)) error {
	return pack.Write(ctx, pack.Input{Plan: p, Components: res.Components, SourceDateEpoch: r.SourceDateEpoch,
		Toolchain: r.Toolchain, Findings: r.Findings, BuildFacts: r.buildFacts, BuildFactNotes: r.buildFactNotes,
		Version: r.Version}, dir, checked)
}

// since is the seconds since t, to the millisecond: the debug log's timings.
func since(t time.Time) float64 { return float64(time.Since(t).Milliseconds()) / 1000 }
