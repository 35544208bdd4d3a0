package builder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// demoRun runs the embedded demo recipe with its cache under dir through the pipeline's
// entry point, as `epbuild recipe demo` does, and returns the result.
func demoRun(t testing.TB, dir, out string, force ...string) (*stage.Result, error) {
	t.Helper()
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: dir, Log: log.New(io.Discard), Progress: source.ProgressLines})
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Build(context.Background(), BuildOptions{OutDir: out, Version: "test", Force: force, Environ: os.Environ(), Getenv: os.Getenv})
	var pe *toolchain.PreflightError
	if errors.As(err, &pe) {
		t.Skipf("the demo cannot build here: %v", err)
	}
	return res, err
}

func TestDemoEndToEnd(t *testing.T) {
	// the cold run is the warm demo's (built cold through demoRun's entry point); the
	// reruns below run on a copy of its cache, at another path
	w := warmBuild(t)
	res, dir, out := w.res, warmCache(t), t.TempDir()
	for _, s := range res.Stages {
		if s.Cached {
			t.Errorf("cold run found %s %s cached", s.Stage, s.Component)
		}
	}
	if len(res.Stages) != 7 {
		t.Errorf("stages: %+v", res.Stages)
	}
	// the effects were proven on the tree, the checks on the staged prefix
	var passed int
	for _, c := range res.Components {
		for _, e := range append(c.TreeEffects, c.Checks...) {
			if e.Status == "fail" {
				t.Errorf("%s: %s failed: %s", c.Name, e.ID, e.Found)
			}
			if e.Status == "pass" {
				passed++
			}
		}
	}
	if passed < 8 {
		t.Errorf("only %d checks passed", passed)
	}
	// the artifact installs and its python package works with env.sh
	inst := t.TempDir()
	if b, err := exec.Command("tar", "--zstd", "-xf", res.Artifact, "-C", inst).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, b)
	}
	cmd := exec.Command("bash", "-c", `. ./env.sh && cd / && python3 -c 'import pydemo; c = pydemo.Channel(1); print(c.describe())'`)
	cmd.Dir = inst
	b, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(b), "channel 1 of 4, 1 lanes") {
		t.Fatalf("installed demo does not run: %v\n%s", err, b)
	}

	// a rerun in another cache holding the same stages does no work and gives the same
	// artifact
	res2, err := demoRun(t, dir, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res2.Stages {
		if !s.Cached {
			t.Errorf("rerun redid %s %s", s.Stage, s.Component)
		}
	}
	if res2.SHA256 != res.SHA256 {
		t.Errorf("rerun changed the artifact: %s vs %s", res2.SHA256, res.SHA256)
	}
	// --force=build rebuilds build, check, package but not patch; same bytes
	res3, err := demoRun(t, dir, out, "build")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range res3.Stages {
		if s.Cached != (s.Stage == "patch") {
			t.Errorf("--force=build: %s %s cached=%v", s.Stage, s.Component, s.Cached)
		}
	}
	if res3.SHA256 != res.SHA256 {
		t.Errorf("a forced rebuild changed the artifact: %s vs %s", res3.SHA256, res.SHA256)
	}
	// the forced rebuild ran in another cache than the cold run, into another output
	// directory: the artifact does not depend on the cache location
	// the wheel beside it too: a forced rebuild in another cache gives the same bytes
	if len(res.Wheels) != 1 || filepath.Base(filepath.Dir(res.Wheels[0])) != pack.WheelDir(res.Plan) {
		t.Fatalf("wheels beside the artifact: %v", res.Wheels)
	}
	want := mustReadFile(t, res.Wheels[0])
	for i, r := range []*stage.Result{res2, res3} {
		if len(r.Wheels) != 1 || !bytes.Equal(mustReadFile(t, r.Wheels[0]), want) {
			t.Errorf("build %d gave another wheel: %v", i+2, r.Wheels)
		}
	}
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDemoKilled kills the demo run at moments spread over it; each next run completes
// and yields the identical artifact.
func TestDemoKilled(t *testing.T) {
	if os.Getenv("EPBUILD_TEST_CHILD") == "demo" {
		if _, err := demoRun(t, os.Getenv("EPBUILD_TEST_DIR"), os.Getenv("EPBUILD_TEST_OUT")); err != nil {
			t.Fatal(err)
		}
		return
	}
	w := warmBuild(t)
	ref := w.res
	dir, out := t.TempDir(), t.TempDir()
	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^TestDemoKilled$")
		// the child's temporary files land where the test cleans up, even when it is killed
		cmd.Env = append(os.Environ(), "EPBUILD_TEST_CHILD=demo", "EPBUILD_TEST_DIR="+dir, "EPBUILD_TEST_OUT="+out, "TMPDIR="+t.TempDir())
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	killed := 0
	// kill runs a child after at; it fails the test where the child failed on its own
	kill := func(what string, at time.Duration) {
		t.Helper()
		cmd := child()
		var b bytes.Buffer
		cmd.Stdout, cmd.Stderr = &b, &b
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: the run failed before the kill after %v: %v\n%s", what, at, err, b.String())
			}
		case <-time.After(at):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			killed++
		}
	}
	// the next run completes, with the reference's bytes
	complete := func(what string) {
		t.Helper()
		res, err := demoRun(t, dir, out)
		if err != nil {
			t.Fatalf("%s: the run after the kill failed: %v", what, err)
		}
		if res.SHA256 != ref.SHA256 {
			t.Fatalf("%s: artifact %s after a kill, want %s", what, res.SHA256, ref.SHA256)
		}
	}
	// kill points spread over the stages, not drawn at random. One cold build, killed
	// early (probe, fetch, patch), midway (the builds) and late (checks, packing): each
	// next run goes on from what the killed one left, and is killed in turn, or completes.
	last := 0.0
	for _, f := range []float64{0.1, 0.45, 0.8} {
		kill(fmt.Sprintf("cold, %.0f%% in", f*100), time.Duration((f-last)*float64(w.took)))
		last = f
	}
	complete("cold")
	// runs on the made cache (reading it, the output) killed across such a run in a
	// child, timed once; each next run completes
	start := time.Now()
	if b, err := child().CombinedOutput(); err != nil {
		t.Fatalf("a rerun in a child: %v\n%s", err, b)
	}
	rerun := time.Since(start)
	for _, f := range []float64{0.35, 0.7} {
		what := fmt.Sprintf("a rerun, %.0f%% in", f*100)
		kill(what, time.Duration(f*float64(rerun)))
		complete(what)
	}
	t.Logf("%d of 5 runs killed midway (a cold build takes %v, a rerun %v)", killed, w.took, rerun)
	if killed < 3 {
		t.Errorf("only %d of 5 runs were killed midway", killed)
	}
}

// A cold run into a cache that does not exist yet keeps its rule findings (plan and
// preflight) there, so that the first rerun does not evaluate the rules again; asking for
// the findings alone creates no cache.
func TestColdRunKeepsFindings(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: dir, Log: log.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Findings(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("Findings alone made the cache %s: %v", dir, err)
	}
	// the warm demo's cache is what a cold run into a cache that did not exist left
	// (nothing else runs in it: tests run on copies)
	kept, err := filepath.Glob(filepath.Join(warmBuild(t).dir, "cache", "compat", "*.json"))
	if err != nil || len(kept) != 2 {
		t.Fatalf("after a cold run the cache keeps findings %v (%v), want the plan's and preflight's", kept, err)
	}
}
