package builder

import (
	"context"
	"errors"
	"fmt"
	"github.com/epbuild/epbuild/builder/store"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/epbuild/epbuild/builder/manifest"
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
	Fetch(ctx context.Context, p *plan.Plan, dir string) (*CachedArtifact, error)
	// Store puts the artifact at path, with what lies beside it, into the store and
	// says where it went.
	Store(ctx context.Context, artifact string) (string, error)
	// String names the store in logs and results.
	String() string
}

// CachedArtifact is an artifact an ArtifactCache fetched.
type CachedArtifact struct {
	Artifact string // the path of the .tar.zst, in the directory given to Fetch
	SHA256   string
	Manifest *manifest.Manifest
	SBOM     string   // "" when the store has none
	Wheels   []string // the wheels the store has, in the directory given to Fetch
	// From is what was fetched (reference and digest).
	From string
}

// CacheReport says what the shared build cache did in a run.
type CacheReport struct {
	From string `json:"from,omitempty"` // the store looked in (--cache-from)
	Hit  bool   `json:"hit"`            // the artifact came from it: nothing was built here
	// Fetched is what was taken (reference and digest).
	Fetched string `json:"fetched,omitempty"`
	To      string `json:"to,omitempty"` // the store pushed to (--cache-to)
	// Stored is where the artifact went; empty when the push failed or was not needed.
	Stored string `json:"stored,omitempty"`
	// Warnings say why the cache was not used, or why the push failed.
	Warnings []string `json:"warnings,omitempty"`
}

// fromCache takes the plan's artifact from opts.CacheFrom when it is there, publishing
// it into OutDir as a build would (the artifact, .sha256, SBOM, wheels). nil with a nil
// error: build here. The rules on the plan are applied first: a plan they stop is
// refused whoever built it.
func (j *Job) fromCache(ctx context.Context, opts BuildOptions, rep *CacheReport) (*Result, error) {
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
	miss := func(why string, kv ...any) (*Result, error) {
		rep.Warnings = append(rep.Warnings, why)
		j.opts.Log.Warn(why+"; building here", append([]any{"from", rep.From}, kv...)...)
		return nil, nil
	}
	if err := os.MkdirAll(opts.OutDir, 0o755); err != nil {
		return nil, publishErr(err, rep.From, opts.OutDir)
	}
	tmp, release, err := StagingDir(opts.OutDir, ".epbuild-cache-")
	if err != nil {
		return nil, publishErr(err, rep.From, opts.OutDir)
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
	case m.PlanKey != j.Plan.Key || m.Recipe != j.Plan.Recipe || filepath.Base(got.Artifact) != ArtifactName(j.Plan):
		return miss(fmt.Sprintf("the build cache holds %s (recipe %s, plan %s) under plan %s", filepath.Base(got.Artifact), m.Recipe, store.ShortKey(m.PlanKey), store.ShortKey(j.Plan.Key)))
	case opts.SourceDateEpoch != "" && opts.SourceDateEpoch != strconv.FormatInt(m.SourceDateEpoch, 10):
		return miss(fmt.Sprintf("the build cache's artifact is stamped SOURCE_DATE_EPOCH=%d, this run asks for %s", m.SourceDateEpoch, opts.SourceDateEpoch))
	case len(got.Wheels) != len(m.Wheels):
		return miss(fmt.Sprintf("the build cache's copy carries %d of the %d wheels its manifest lists (pushed without them)", len(got.Wheels), len(m.Wheels)))
	}
	res, err := publishCached(got, opts.OutDir, j.Plan)
	if err != nil {
		return nil, err
	}
	rep.Hit, rep.Fetched = true, got.From
	for _, c := range m.Components {
		for _, s := range []struct{ stage, key string }{{"patch", c.PatchKey}, {"build", c.BuildKey}, {"check", c.CheckKey}} {
			if s.key != "" {
				res.Stages = append(res.Stages, StageEvent{Stage: s.stage, Component: c.Name, Key: s.key, Cached: true, From: rep.From})
			}
		}
	}
	// the package row: the artifact, under the plan key that is its tag in the store
	res.Stages = append(res.Stages, StageEvent{Stage: "package", Key: j.Plan.Key, Cached: true, From: rep.From, Seconds: time.Since(start).Seconds()})
	res.Components = m.Components
	j.opts.Log.Info("taken from the build cache: no stage ran here", "from", got.From, "artifact", res.Artifact, "built_by", m.Epbuild)
	return res, nil
}

// publishCached moves a fetched artifact and what lies beside it into outDir, where a
// build writes them: the wheels first and the artifact last, so that whoever sees the
// artifact sees everything beside it. An SBOM the store lacks is made from the manifest,
// as the package stage makes it.
func publishCached(got *CachedArtifact, outDir string, p *plan.Plan) (*Result, error) {
	res := &Result{Plan: p, SHA256: got.SHA256, Artifact: filepath.Join(outDir, ArtifactName(p))}
	res.SBOM = res.Artifact + SBOMSuffix
	if got.SBOM == "" {
		b, err := sbomBytes(got.Manifest, filepath.Base(got.Artifact), got.SHA256, got.Manifest.Epbuild, SBOMCredits{})
		if err != nil {
			return nil, fmt.Errorf("the SBOM of %s: %w", got.Artifact, err)
		}
		got.SBOM = got.Artifact + SBOMSuffix
		if err := os.WriteFile(got.SBOM, b, 0o644); err != nil {
			return nil, publishErr(err, got.Artifact, res.SBOM)
		}
	}
	if len(got.Wheels) > 0 {
		if err := os.MkdirAll(filepath.Join(outDir, WheelDir(p)), 0o755); err != nil {
			return nil, publishErr(err, got.Artifact, outDir)
		}
	}
	type move struct{ from, to string }
	var moves []move
	for _, w := range got.Wheels {
		to := filepath.Join(outDir, WheelDir(p), filepath.Base(w))
		moves = append(moves, move{w, to})
		res.Wheels = append(res.Wheels, to)
	}
	moves = append(moves, move{got.SBOM, res.SBOM}, move{got.Artifact + ".sha256", res.Artifact + ".sha256"}, move{got.Artifact, res.Artifact})
	for _, mv := range moves {
		if err := os.Rename(mv.from, mv.to); err != nil {
			if errors.Is(err, os.ErrNotExist) && mv.from == got.Artifact+".sha256" {
				err = writeSidecar(res.Artifact, got.SHA256)
			}
			if err != nil {
				return nil, publishErr(err, mv.from, mv.to)
			}
		}
	}
	return res, nil
}

// toCache stores a successful run's artifact in opts.CacheTo. A failure is a warning
// naming the reason: the build succeeded and its artifact is in OutDir. An interrupted
// push is the run's interruption.
func (j *Job) toCache(ctx context.Context, opts BuildOptions, res *Result, rep *CacheReport) error {
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
func withCache(res *Result, err, pushErr error, rep *CacheReport) (*Result, error) {
	if res != nil && (rep.From != "" || rep.To != "") {
		res.Cache = rep
	}
	if err != nil {
		return res, err
	}
	return res, pushErr
}

// StagingDir creates a new directory prefix+random in parent for a download that must
// not appear under its final name before it is checked, and holds an exclusive flock on
// it until release, which also removes it. Directories of that prefix whose lock is free
// are removed first: their process died (SIGKILL, a crash, a full disk) without removing
// them, and no live one can be using them. A staging directory of a live process is
// left alone.
func StagingDir(parent, prefix string) (string, func(), error) {
	RemoveStaleStaging(parent, prefix)
	for range 3 {
		dir, err := os.MkdirTemp(parent, prefix)
		if err != nil {
			return "", nil, err
		}
		f, err := lockDir(dir, unix.LOCK_EX)
		if err != nil {
			_ = os.RemoveAll(dir)
			return "", nil, err
		}
		// another run may have taken it for stale between MkdirTemp and the lock
		st, err1 := f.Stat()
		now, err2 := os.Stat(dir)
		if err1 == nil && err2 == nil && os.SameFile(st, now) {
			return dir, func() { _ = os.RemoveAll(dir); _ = f.Close() }, nil
		}
		_ = f.Close()
	}
	return "", nil, fmt.Errorf("create a staging directory in %s: removed by another run as it was made, three times", parent)
}

// RemoveStaleStaging removes the directories prefix* in parent whose lock nobody holds.
// It is best effort: what cannot be removed stays for the next run.
func RemoveStaleStaging(parent, prefix string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		p := filepath.Join(parent, e.Name())
		f, err := lockDir(p, unix.LOCK_EX|unix.LOCK_NB)
		if err != nil {
			continue // in use, or gone
		}
		_ = os.RemoveAll(p)
		_ = f.Close()
	}
}

// lockDir opens dir and flocks it; the lock lasts until the file is closed or the
// process ends, however it ends.
func lockDir(dir string, how int) (*os.File, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), how)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return f, nil
}
