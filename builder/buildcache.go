package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/builder/store"

	"github.com/epbuild/epbuild/builder/plan"
)

// The shared build cache (epbuild recipe --cache-from / --cache-to): artifacts kept
// under their plan key in a store that many machines reach (an OCI registry,
// builder/oci.BuildCache). Before any stage, a run looks the plan up there and, when it
// is there, takes the checked artifact instead of building; after a successful build it
// stores the artifact there. The cache never fails a build: a store that cannot be
// reached, refuses the credentials or holds something unusable is a warning and a build
// here, and a store that refuses the push after a good build is a warning too.

// ArtifactCache is a store of built artifacts keyed by plan key.
type ArtifactCache interface {
	// Fetch brings the artifact of plan p into dir (a new directory of the caller's),
	// checked as install checks it, with what a build writes beside it that the store
	// has (its .sha256, SBOM and wheels); nil with a nil error when the store does not
	// hold the plan.
	Fetch(ctx context.Context, p *plan.Plan, dir string) (*pack.Fetched, error)
	// Store puts the artifact at path, with what lies beside it, into the store and
	// says where it went.
	Store(ctx context.Context, artifact string) (string, error)
	// String names the store in logs and results.
	String() string
}

// fromCache takes the plan's artifact from opts.CacheFrom when it is there, publishing
// it into OutDir as a build would (the artifact, .sha256, SBOM, wheels). nil with a nil
// error: build here. The rules on the plan are applied first: a plan they stop is
// refused whoever built it.
func (j *Job) fromCache(ctx context.Context, opts BuildOptions, rep *stage.CacheReport) (*stage.Result, error) {
	if opts.CacheFrom == nil || opts.PlanOnly {
		return nil, nil
	}
	rep.From = opts.CacheFrom.String()
	if len(opts.Force) > 0 {
		j.opts.Log.Info("--force: building here, not taking the artifact from the build cache", "from", rep.From)
		return nil, nil
	}
	if err := checkSourceDateEpoch(opts.SourceDateEpoch); err != nil {
		return nil, err
	}
	if _, err := j.Findings(ctx, nil); err != nil {
		return nil, err
	}
	miss := func(why string, kv ...any) (*stage.Result, error) {
		rep.Warnings = append(rep.Warnings, why)
		j.opts.Log.Warn(why+"; building here", append([]any{"from", rep.From}, kv...)...)
		return nil, nil
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, pack.PublishError(err, rep.From, opts.OutDir)
	}
	tmp, release, err := pack.StagingDir(opts.OutDir, ".epbuild-cache-")
	if err != nil {
		return nil, pack.PublishError(err, rep.From, opts.OutDir)
	}
	defer release()
	start := time.Now()
	got, err := opts.CacheFrom.Fetch(ctx, j.Plan, tmp)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("take %s from the build cache %s: %w", j.Plan.Recipe, rep.From, ctx.Err())
	case err != nil:
		return miss("the build cache cannot be used: " + err.Error())
	case got == nil:
		j.opts.Log.Info("not in the build cache; building here", "from", rep.From, "plan", store.ShortKey(j.Plan.Key))
		return nil, nil
	}
	m := got.Manifest
	switch {
	case m.PlanKey != j.Plan.Key || m.Recipe != j.Plan.Recipe || filepath.Base(got.Artifact) != pack.ArtifactName(j.Plan):
		return miss(fmt.Sprintf("the build cache holds %s (recipe %s, plan %s) under plan %s", filepath.Base(got.Artifact), m.Recipe, store.ShortKey(m.PlanKey), store.ShortKey(j.Plan.Key)))
	case opts.SourceDateEpoch != "" && opts.SourceDateEpoch != strconv.FormatInt(m.SourceDateEpoch, 10):
		return miss(fmt.Sprintf("the build cache's artifact is stamped SOURCE_DATE_EPOCH=%d, this run asks for %s", m.SourceDateEpoch, opts.SourceDateEpoch))
	case len(got.Wheels) != len(m.Wheels):
		return miss(fmt.Sprintf("the build cache's copy carries %d of the %d wheels its manifest lists (pushed without them)", len(got.Wheels), len(m.Wheels)))
	}
	set, err := pack.PublishFetched(got, opts.OutDir, j.Plan)
	if err != nil {
		return nil, err
	}
	res := &stage.Result{Plan: j.Plan, SHA256: set.SHA256, Artifact: set.Artifact, SBOM: set.SBOM, Wheels: set.Wheels}
	rep.Hit, rep.Fetched = true, got.From
	for _, c := range m.Components {
		for _, s := range []struct{ stage, key string }{{"patch", c.PatchKey}, {"build", c.BuildKey}, {"check", c.CheckKey}} {
			if s.key != "" {
				res.Stages = append(res.Stages, stage.StageEvent{Stage: s.stage, Component: c.Name, Key: s.key, Cached: true, From: rep.From})
			}
		}
	}
	// the package row: the artifact, under the plan key that is its tag in the store
	res.Stages = append(res.Stages, stage.StageEvent{Stage: "package", Key: j.Plan.Key, Cached: true, From: rep.From, Seconds: time.Since(start).Seconds()})
	res.Components = m.Components
	j.opts.Log.Info("taken from the build cache: no stage ran here", "from", got.From, "artifact", res.Artifact, "built_by", m.Epbuild)
	return res, nil
}

// toCache stores a successful run's artifact in opts.CacheTo. A failure is a warning
// naming the reason: the build succeeded and its artifact is in OutDir. An interrupted
// push is the run's interruption.
func (j *Job) toCache(ctx context.Context, opts BuildOptions, res *stage.Result, rep *stage.CacheReport) error {
	if opts.CacheTo == nil || res == nil || res.Artifact == "" {
		return nil
	}
	rep.To = opts.CacheTo.String()
	if rep.Hit && rep.To == rep.From {
		return nil // taken from there: it has it
	}
	where, err := opts.CacheTo.Store(ctx, res.Artifact)
	switch {
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("push %s to the build cache %s: %w; the build succeeded: %s", filepath.Base(res.Artifact), rep.To, ctx.Err(), res.Artifact)
	case err != nil:
		msg := "--cache-to failed, the build did not: " + err.Error()
		rep.Warnings = append(rep.Warnings, msg)
		j.opts.Log.Warn(msg, "to", rep.To, "artifact", res.Artifact)
		return nil
	}
	rep.Stored = where
	j.opts.Log.Info("stored in the build cache", "to", where)
	return nil
}

// withCache joins a run's result with the cache's report and the push's error.
func withCache(res *stage.Result, err, pushErr error, rep *stage.CacheReport) (*stage.Result, error) {
	if res != nil && (rep.From != "" || rep.To != "") {
		res.Cache = rep
	}
	if err != nil {
		return res, err
	}
	return res, pushErr
}
