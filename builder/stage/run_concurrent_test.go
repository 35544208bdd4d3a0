package stage

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/verify"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// shapeRunner is a Runner over a fresh cache of s's recipe with the probed toolchain, jobs cores (0: the
// machine's), and the plan.
func shapeRunner(t *testing.T, s fixture.Shape, jobs int) (*Runner, *plan.Plan) {
	t.Helper()
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve(s.Recipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSources(c, s.Mirror, log.New(io.Discard), source.ProgressOff)
	if err != nil {
		t.Fatal(err)
	}
	store, err := store.OpenStore(c.Dir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	var pkgs []string
	for _, c := range p.Components {
		if c.Source.Python != nil {
			pkgs = append(pkgs, c.Source.Python.Package)
		}
	}
	tc := (&toolchain.Prober{Getenv: os.Getenv, Packages: pkgs}).Probe(context.Background())
	if jobs > 0 {
		tc.Jobs = jobs
	}
	return &Runner{Store: store, Sources: src, Log: log.New(io.Discard), Toolchain: tc, Environ: os.Environ(),
		OutDir: filepath.Join(t.TempDir(), "out"), Version: "test"}, p
}

// base, and long and short that depend only on what needs no build after it, as deepep
// and nvshmem-smoke depend on nvshmem (long on a package of the Python environment too,
// as on the NVSHMEM wheel): long has six compile units, short one.
var forkRepos = map[string]map[string]string{
	"base":  {"README": "the base\n"},
	"long":  {"k1.cu": "", "k2.cu": "", "k3.cu": "", "k4.cu": "", "k5.cpp": "", "k6.cpp": "", "README": "long\n"},
	"short": {"smoke.cu": "", "README": "short\n"},
}

const forkRecipe = `name: fork
cluster: test
description: two builds that depend only on a third
components:
  - name: env
    source: {python: {package: setuptools}}
  - name: base
    version: 1.0.0
    source: {git: {url: "URL_base", commit: COMMIT_base}}
    build:
      - command: {run: [sh, -c, 'mkdir -p "$DESTDIR$PREFIX" && echo base > "$DESTDIR$PREFIX/base.txt"']}
    checks: [{file: base.txt}]
  - name: long
    version: 1.0.0
    source: {git: {url: "URL_long", commit: COMMIT_long}}
    depends: [base, env]
    build:
      - command:
          env: {JOBS: "{{jobs}}", BASE: "{{base.prefix}}", CTL: "@CTL@"}
          run: [sh, -c, LONG]
    checks: [{file: long.txt}]
  - name: short
    version: 1.0.0
    source: {git: {url: "URL_short", commit: COMMIT_short}}
    depends: [base]
    build:
      - command:
          env: {JOBS: "{{jobs}}", BASE: "{{base.prefix}}", CTL: "@CTL@"}
          run: [sh, -c, SHORT]
    checks: [{file: short.txt}]
`

// forkShape: long and short each wait until the other has started; long ends only once
// short's build is in the store, so that it finishes last.
func forkShape(t *testing.T) fixture.Shape {
	step := func(name, other, after string) string {
		return strconv.Quote(`set -e; test -f "$BASE/base.txt"; echo "$JOBS" > "$CTL/` + name + `.jobs"; : > "$CTL/` + name + `.started"; ` +
			fixture.WaitFor(`"$CTL/`+other+`.started"`, other+" never built beside "+name) + "; " + after +
			`mkdir -p "$DESTDIR$PREFIX" && echo ` + name + ` > "$DESTDIR$PREFIX/` + name + `.txt"`)
	}
	body := strings.NewReplacer(
		"LONG", step("long", "short", fixture.WaitFor(`"$CTL"/store/stages/build/*/prefix/short.txt`, "short never finished")+"; "),
		"SHORT", step("short", "long", ""),
	).Replace(forkRecipe)
	return fixture.NewShape(t, forkRepos, body)
}

// Builds that depend only on what is built run at the same time (each waits until the
// other has started), with the cores split by their compile units; the stage table is in
// plan order although short finished first, and two runs give the same artifact.
func TestIndependentBuildsRunTogether(t *testing.T) {
	s := forkShape(t)
	r, p := shapeRunner(t, s, 16)
	// the steps find the store through CTL/store
	if err := os.Symlink(r.Store.Dir(), filepath.Join(s.Ctl, "store")); err != nil {
		t.Fatal(err)
	}
	planned := r.Keys(p) // what --plan prints, before the run
	res, err := r.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if long, short := s.Read(t, "long.jobs"), s.Read(t, "short.jobs"); long != "14" || short != "2" {
		t.Errorf("jobs: long %s, short %s; want 14 and 2 of 16 (6 compile units to 1)", long, short)
	}
	var order []string
	for _, e := range res.Stages {
		order = append(order, e.Stage+" "+e.Component)
	}
	want := []string{"patch base", "build base", "patch long", "build long", "patch short", "build short",
		"check base", "check long", "check short", "package "}
	if !slices.Equal(order, want) {
		t.Errorf("stage table %q, want %q", order, want)
	}
	// --plan lists the stages a run runs, with their keys: none for the environment's package
	for i, e := range planned {
		if i >= len(res.Stages) || e.Stage != res.Stages[i].Stage || e.Component != res.Stages[i].Component || e.Key != res.Stages[i].Key || e.Cached {
			t.Errorf("--plan's stages %+v, the run's %+v", planned, res.Stages)
			break
		}
	}
	if len(planned) != len(res.Stages) {
		t.Errorf("--plan lists %d stages, the run ran %d", len(planned), len(res.Stages))
	}
	var names []string
	for _, c := range res.Components {
		names = append(names, c.Name)
		if c.Name != "env" && (len(c.Checks) != 1 || !c.Checks[0].OK()) {
			t.Errorf("%s: checks %+v", c.Name, c.Checks)
		}
	}
	if !slices.Equal(names, []string{"env", "base", "long", "short"}) {
		t.Errorf("components %q", names)
	}

	// a second cold run in another store: the same bytes
	r2, _ := shapeRunner(t, s, 16)
	if err := os.Remove(filepath.Join(s.Ctl, "store")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(r2.Store.Dir(), filepath.Join(s.Ctl, "store")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"long.started", "short.started"} {
		os.Remove(filepath.Join(s.Ctl, f))
	}
	res2, err := r2.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if res2.SHA256 != res.SHA256 {
		t.Errorf("a second run gave %s, the first %s", res2.SHA256, res.SHA256)
	}
}

// The first build that fails stops the one running beside it: its step and what that
// started end, its log stays under the cache, no stage output or temporary directory is
// left, and the error is the failed build's. Ctrl-C stops both the same way.
func TestFirstBuildFailureStopsTheOthers(t *testing.T) {
	slowStep := `echo $$ > "$CTL/slow.pid"; echo "slow is building"; : > "$CTL/slow.started"; sleep 300`
	body := strings.NewReplacer(
		"LONG", strconv.Quote(`set -e; `+slowStep),
		"SHORT", strconv.Quote(`set -e; : > "$CTL/bad.started"; `+fixture.WaitFor(`"$CTL/slow.started"`, "slow never started")+`; [ ! -e "$CTL/fail" ] || { echo "bad fails" >&2; exit 7; }; `+fixture.WaitFor(`"$CTL/never"`, "bad waited")),
	).Replace(forkRecipe)
	s := fixture.NewShape(t, forkRepos, body)
	check := func(t *testing.T, r *Runner, res *Result) {
		t.Helper()
		pid, err := strconv.Atoi(s.Read(t, "slow.pid"))
		if err != nil {
			t.Fatal(err)
		}
		if alive(pid) {
			t.Errorf("the slow build's step (%d) outlived the run", pid)
		}
		logs, _ := filepath.Glob(filepath.Join(r.Store.Dir(), "logs", "build-*", "00-command.log"))
		kept := 0
		for _, l := range logs {
			if b, _ := os.ReadFile(l); strings.Contains(string(b), "slow is building") {
				kept++
			}
		}
		if kept != 1 {
			t.Errorf("the slow build's log is not kept under the cache: %v", logs)
		}
		if des, _ := os.ReadDir(filepath.Join(r.Store.Dir(), "tmp")); len(des) != 0 {
			t.Errorf("temporary directories left: %v", des)
		}
		for _, c := range res.Components {
			if (c.Name == "long" || c.Name == "short") && (c.BuildKey == "" || r.Store.Has("build", c.BuildKey)) {
				t.Errorf("%s: a build output is stored (%q)", c.Name, c.BuildKey)
			}
		}
		for _, e := range res.Stages {
			if e.Stage == "build" && e.Component != "base" || e.Stage == "check" || e.Stage == "package" {
				t.Errorf("stage %s %s recorded", e.Stage, e.Component)
			}
		}
	}
	t.Run("a failure", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(s.Ctl, "fail"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Join(s.Ctl, "fail"))
		r, p := shapeRunner(t, s, 0)
		res, err := r.Run(context.Background(), p)
		var be *BuildError
		if !errors.As(err, &be) || be.Component != "short" || be.Stopped || !strings.Contains(be.Tail, "bad fails") {
			t.Fatalf("want the failed build's error, got %v", err)
		}
		check(t, r, res)
	})
	t.Run("Ctrl-C", func(t *testing.T) {
		for _, f := range []string{"slow.started", "slow.pid", "bad.started"} {
			os.Remove(filepath.Join(s.Ctl, f))
		}
		r, p := shapeRunner(t, s, 0)
		ctx, cancel := context.WithCancelCause(context.Background())
		go func() {
			for _, f := range []string{"slow.started", "bad.started"} {
				for i := 0; i < 1200; i++ {
					if _, err := os.Stat(filepath.Join(s.Ctl, f)); err == nil {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			cancel(errors.New("interrupted"))
		}()
		res, err := r.Run(ctx, p)
		var be *BuildError
		if !errors.As(err, &be) || !be.Stopped || !strings.Contains(err.Error(), "interrupted") {
			t.Fatalf("want a stopped build, got %v", err)
		}
		check(t, r, res)
	})
}

// The checks run beside the package stage: the import check's module waits, when
// imported, until the package stage has begun, and the manifest records its result.
// A check that fails stops the package stage: no artifact, nothing half written.
func TestChecksRunBesidePackaging(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	repos := map[string]map[string]string{"waiter": {
		"setup.py": "from setuptools import setup\nsetup(name='waiter', version='1.0', packages=['waiter'])\n",
		"waiter/__init__.py": `import glob, os, time
for _ in range(1200):
    if glob.glob(os.path.join(os.environ["WAITER_STORE"], "stages", "package")):
        break
    time.sleep(0.05)
else:
    raise SystemExit("the package stage never began while the check ran")
`,
	}}
	const body = `name: waiter
cluster: test
description: a module that waits for the package stage when imported
toolchain: {python: ">=3.8"}
components:
  - name: waiter
    version: 1.0.0
    source: {git: {url: "URL_waiter", commit: COMMIT_waiter}}
    build:
      - python-extension: {}
    checks: [{import: waiter}EXTRA]
`
	for _, tc := range []struct{ name, extra string }{{"passing", ""}, {"failing", ", {file: python/missing.py}"}} {
		t.Run(tc.name, func(t *testing.T) {
			s := fixture.NewShape(t, repos, strings.Replace(body, "EXTRA", tc.extra, 1))
			r, p := shapeRunner(t, s, 0)
			r.Environ = append(os.Environ(), "WAITER_STORE="+r.Store.Dir())
			res, err := r.Run(context.Background(), p)
			if tc.extra != "" {
				var cf *verify.ChecksFailed
				if !errors.As(err, &cf) {
					t.Fatalf("want the failed check, got %v", err)
				}
				pk := r.packageKey(p, r.keys(p))
				if r.Store.Has("package", pk) {
					t.Error("a package output was stored after a check failed")
				}
				if des, _ := os.ReadDir(filepath.Join(r.Store.Dir(), "tmp")); len(des) != 0 {
					t.Errorf("temporary directories left: %v", des)
				}
				if des, _ := os.ReadDir(r.OutDir); len(des) != 0 {
					t.Errorf("written to the output directory: %v", des)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			m := fixture.DecodeManifestWithTar(t, res.Artifact)
			if len(m.Components) != 1 || len(m.Components[0].Checks) != 1 || !m.Components[0].Checks[0].OK() || !strings.Contains(m.Components[0].Checks[0].ID, "import") {
				t.Errorf("the manifest's checks: %+v", m.Components)
			}
		})
	}
}

// {{mpi.home}} gives a step the MPI the toolchain probe found (MPI_HOME with mpi.h, else
// where mpicc finds mpi.h), the one the manifest records, and {{cuda.home}} its
// CUDA: a build step names the build host's tools through the probe, not a search of
// its own.
func TestHostTemplatesReachSteps(t *testing.T) {
	s := fixture.NewShape(t, map[string]map[string]string{"one": {"README": "one\n"}}, `name: hosttemplates
cluster: test
description: a step that names the build host's MPI and CUDA
toolchain: {require: [mpi]}
components:
  - name: one
    version: 1.0.0
    source: {git: {url: "URL_one", commit: COMMIT_one}}
    build:
      - command:
          env: {MPI: "{{mpi.home}}", CUDA: "{{cuda.home}}", CTL: "@CTL@"}
          run: [sh, -c, 'echo "$MPI" > "$CTL/mpi" && echo "$CUDA" > "$CTL/cuda" && mkdir -p "$DESTDIR$PREFIX" && : > "$DESTDIR$PREFIX/one.txt"']
    checks: [{file: one.txt}]
`)
	r, p := shapeRunner(t, s, 2)
	r.Toolchain.MPIHome, r.Toolchain.CUDAHome = "/opt/hpcx/ompi", "/opt/cuda-13.0"
	if _, err := r.Run(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if got := s.Read(t, "mpi"); got != "/opt/hpcx/ompi" {
		t.Errorf("{{mpi.home}} gave %q", got)
	}
	if got := s.Read(t, "cuda"); got != "/opt/cuda-13.0" {
		t.Errorf("{{cuda.home}} gave %q", got)
	}
}
