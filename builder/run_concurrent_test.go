package builder

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
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

// shape is a recipe of several components, each from a git repository of its own in a
// mirror laid out by URL (example.invalid/shape/<repo>), and a control directory where
// the build steps leave markers and wait for each other's. The waits end a test that
// would hang, after a minute; they never time anything.
type shape struct {
	mirror, recipe, ctl string
}

// waitFor is sh that waits until the glob matches, or fails saying why.
func waitFor(glob, why string) string {
	return fmt.Sprintf(`i=0; until ls %s >/dev/null 2>&1; do i=$((i+1)); if [ $i -gt 1200 ]; then echo %q >&2; exit 1; fi; sleep 0.05; done`, glob, why)
}

// newShape commits each repository's files and writes the recipe from body, in which
// COMMIT_<repo> stands for a repository's commit, URL_<repo> for its URL, @CTL@ for
// the control directory.
func newShape(t *testing.T, repos map[string]map[string]string, body string) shape {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("the fixture repositories are made with the git CLI: %v", err)
	}
	s := shape{mirror: t.TempDir(), ctl: t.TempDir()}
	var pairs []string
	for name, files := range repos {
		work, commit := commitFiles(t, files, name)
		pairs = append(pairs, "COMMIT_"+name, commit, "URL_"+name, "https://example.invalid/shape/"+name)
		gitIn(t, work, "clone", "-q", "--bare", work, filepath.Join(s.mirror, "example.invalid", "shape", name+".git"))
	}
	pairs = append(pairs, "@CTL@", s.ctl)
	s.recipe = filepath.Join(t.TempDir(), "shape.yaml")
	if err := os.WriteFile(s.recipe, []byte(strings.NewReplacer(pairs...).Replace(body)), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// runner is a Runner over a fresh cache with the probed toolchain, jobs cores (0: the
// machine's), and the plan.
func (s shape) runner(t *testing.T, jobs int) (*Runner, *plan.Plan) {
	t.Helper()
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve(s.recipe, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	src, err := NewSources(c, s.mirror, log.New(io.Discard), source.ProgressOff)
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

func (s shape) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.ctl, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
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
func forkShape(t *testing.T) shape {
	step := func(name, other, after string) string {
		return strconv.Quote(`set -e; test -f "$BASE/base.txt"; echo "$JOBS" > "$CTL/` + name + `.jobs"; : > "$CTL/` + name + `.started"; ` +
			waitFor(`"$CTL/`+other+`.started"`, other+" never built beside "+name) + "; " + after +
			`mkdir -p "$DESTDIR$PREFIX" && echo ` + name + ` > "$DESTDIR$PREFIX/` + name + `.txt"`)
	}
	body := strings.NewReplacer(
		"LONG", step("long", "short", waitFor(`"$CTL"/store/stages/build/*/prefix/short.txt`, "short never finished")+"; "),
		"SHORT", step("short", "long", ""),
	).Replace(forkRecipe)
	return newShape(t, forkRepos, body)
}

// Builds that depend only on what is built run at the same time (each waits until the
// other has started), with the cores split by their compile units; the stage table is in
// plan order although short finished first, and two runs give the same artifact.
func TestIndependentBuildsRunTogether(t *testing.T) {
	s := forkShape(t)
	r, p := s.runner(t, 16)
	// the steps find the store through CTL/store
	if err := os.Symlink(r.Store.Dir(), filepath.Join(s.ctl, "store")); err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if long, short := s.read(t, "long.jobs"), s.read(t, "short.jobs"); long != "14" || short != "2" {
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
	r2, _ := s.runner(t, 16)
	if err := os.Remove(filepath.Join(s.ctl, "store")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(r2.Store.Dir(), filepath.Join(s.ctl, "store")); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"long.started", "short.started"} {
		os.Remove(filepath.Join(s.ctl, f))
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
		"SHORT", strconv.Quote(`set -e; : > "$CTL/bad.started"; `+waitFor(`"$CTL/slow.started"`, "slow never started")+`; [ ! -e "$CTL/fail" ] || { echo "bad fails" >&2; exit 7; }; `+waitFor(`"$CTL/never"`, "bad waited")),
	).Replace(forkRecipe)
	s := newShape(t, forkRepos, body)
	check := func(t *testing.T, r *Runner, res *Result) {
		t.Helper()
		pid, err := strconv.Atoi(s.read(t, "slow.pid"))
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
		if err := os.WriteFile(filepath.Join(s.ctl, "fail"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		defer os.Remove(filepath.Join(s.ctl, "fail"))
		r, p := s.runner(t, 0)
		res, err := r.Run(context.Background(), p)
		var be *BuildError
		if !errors.As(err, &be) || be.Component != "short" || be.Stopped || !strings.Contains(be.Tail, "bad fails") {
			t.Fatalf("want the failed build's error, got %v", err)
		}
		check(t, r, res)
	})
	t.Run("Ctrl-C", func(t *testing.T) {
		for _, f := range []string{"slow.started", "slow.pid", "bad.started"} {
			os.Remove(filepath.Join(s.ctl, f))
		}
		r, p := s.runner(t, 0)
		ctx, cancel := context.WithCancelCause(context.Background())
		go func() {
			for _, f := range []string{"slow.started", "bad.started"} {
				for i := 0; i < 1200; i++ {
					if _, err := os.Stat(filepath.Join(s.ctl, f)); err == nil {
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

// Preflight decides before the patch stages' outcome is said, although they ran while
// the toolchain was probed: with a tool missing, that is the error (exit 3) even when a
// source cannot be fetched; with none missing, the fetch's error; and nothing is built.
func TestPreflightDecidesFirst(t *testing.T) {
	const body = `name: order
cluster: test
description: a fetch that fails
toolchain: {cmake: "CMAKE"}
components:
  - name: lib
    version: 1.0.0
    source: {git: {url: "URL_lib", commit: 1111111111111111111111111111111111111111}}
    build:
      - cmake: {}
`
	for _, tc := range []struct {
		name, cmake string
		want        func(error) bool
	}{
		{"a tool missing", ">=999", func(err error) bool { var pe *toolchain.PreflightError; return errors.As(err, &pe) }},
		{"none missing", ">=3", func(err error) bool {
			var pe *toolchain.PreflightError
			return err != nil && !errors.As(err, &pe) && strings.Contains(err.Error(), "1111111111")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newShape(t, map[string]map[string]string{"lib": {"README": "lib\n"}}, strings.Replace(body, "CMAKE", tc.cmake, 1))
			cacheDir := filepath.Join(t.TempDir(), "cache")
			j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: s.recipe, CacheDir: cacheDir, Mirror: s.mirror, Log: log.New(io.Discard)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv})
			if !tc.want(err) {
				t.Fatalf("got %v", err)
			}
			if des, _ := os.ReadDir(filepath.Join(cacheDir, "logs")); len(des) != 0 {
				t.Errorf("a build ran: %v", des)
			}
			if des, _ := os.ReadDir(filepath.Join(cacheDir, "tmp")); len(des) != 0 {
				t.Errorf("temporary directories left: %v", des)
			}
		})
	}
}

// The toolchain probe runs beside the patch stages: the fetch of an archive (from a
// server on loopback) waits until cmake is asked its version, and cmake, asked, waits
// until the fetch has begun. One after the other, either would wait in vain.
func TestProbeRunsBesidePatches(t *testing.T) {
	real, err := exec.LookPath("cmake")
	if err != nil {
		t.Skip("no cmake to ask")
	}
	ctl, bin := t.TempDir(), t.TempDir()
	wrapper := "#!/bin/sh\nCTL=" + strconv.Quote(ctl) + "\nif [ \"$1\" = --version ]; then\n  : > \"$CTL/probe.started\"\n  " +
		strings.ReplaceAll(waitFor(`"$CTL/fetch.started"`, "the fetch never began while the probe ran"), "exit 1", `: > "$CTL/probe.alone"; break`) +
		"\nfi\nexec " + strconv.Quote(real) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "cmake"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(zw)
	data := []byte("the source\n")
	if err := tw.WriteHeader(&tar.Header{Name: "src/README", Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	tw.Close()
	zw.Close()
	sum := sha256.Sum256(tgz.Bytes())
	alone := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		os.WriteFile(filepath.Join(ctl, "fetch.started"), nil, 0o644)
		for i := 0; ; i++ {
			if _, err := os.Stat(filepath.Join(ctl, "probe.started")); err == nil {
				break
			}
			if i > 1200 {
				alone = true
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		w.Write(tgz.Bytes())
	}))
	defer srv.Close()
	recipe := filepath.Join(t.TempDir(), "probe.yaml")
	body := `name: probe
cluster: test
description: an archive fetched while the toolchain is probed
components:
  - name: src
    version: 1.0.0
    source: {archive: {url: "` + srv.URL + `/src.tar.gz", sha256: ` + hex.EncodeToString(sum[:]) + `, strip: 1}}
    build:
      - command: {run: [sh, -c, 'mkdir -p "$DESTDIR$PREFIX" && cp README "$DESTDIR$PREFIX/"']}
`
	if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: recipe, CacheDir: filepath.Join(t.TempDir(), "cache"), Log: log.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ctl, "probe.alone")); err == nil || alone {
		t.Errorf("the probe and the fetch ran one after the other (probe alone: %v, fetch alone: %v)", err == nil, alone)
	}
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
			s := newShape(t, repos, strings.Replace(body, "EXTRA", tc.extra, 1))
			r, p := s.runner(t, 0)
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
			m := decodeManifestWithTar(t, res.Artifact)
			if len(m.Components) != 1 || len(m.Components[0].Checks) != 1 || !m.Components[0].Checks[0].OK() || !strings.Contains(m.Components[0].Checks[0].ID, "import") {
				t.Errorf("the manifest's checks: %+v", m.Components)
			}
		})
	}
}

func TestShareJobs(t *testing.T) {
	for _, tc := range []struct {
		free    int
		weights []int
		want    []int
	}{
		{16, []int{6, 1}, []int{14, 2}},     // DeepEP beside the NVSHMEM smoke test
		{16, []int{145, 90}, []int{10, 6}},  // NVSHMEM beside NCCL, both from source
		{2, []int{6, 1}, []int{2, 1}},       // too few: everyone gets one
		{16, []int{1}, []int{16}},           // alone: every core
		{8, []int{0, 0, 0}, []int{3, 3, 2}}, // no units counts as one; ties to the earlier
		{0, []int{5, 5}, []int{1, 1}},       // nothing free: one each all the same
		{16, []int{1, 1, 1, 1}, []int{4, 4, 4, 4}},
		{16, nil, []int{}},
	} {
		if got := shareJobs(tc.free, tc.weights); !slices.Equal(got, tc.want) {
			t.Errorf("shareJobs(%d, %v) = %v, want %v", tc.free, tc.weights, got, tc.want)
		}
	}
}

func TestCompileUnits(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"a.c", "b.CC", "k/c.cu", "k/d.cpp", "e.cxx", "x.h", "x.cuh", "x.py", ".git/objects/y.c"} {
		p := filepath.Join(dir, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n := compileUnits(dir); n != 5 {
		t.Errorf("%d compile units, want 5", n)
	}
	if n := compileUnits(t.TempDir()); n != 1 {
		t.Errorf("an empty tree: %d, want 1", n)
	}
}

// Which NCCL torch loads, which only the manifest records, is asked while the build runs:
// the fixture torch answers only once a build stage has begun, and the manifest has its
// answer.
func TestNCCLAskedBesideTheBuild(t *testing.T) {
	for _, tool := range []string{"gcc", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	cacheDir := filepath.Join(t.TempDir(), "cache")
	site := fixture.TorchSite(t, "2.28.9", "2.28.9", nil)
	init := filepath.Join(site, "torch", "__init__.py")
	body, err := os.ReadFile(init)
	if err != nil {
		t.Fatal(err)
	}
	alone := filepath.Join(t.TempDir(), "alone")
	wait := fmt.Sprintf(`import os, time
for _ in range(1200):
    if os.path.isdir(%q):
        break
    time.sleep(0.05)
else:
    open(%q, "w").close()
`, filepath.Join(cacheDir, "stages", "build"), alone)
	if err := os.WriteFile(init, append([]byte(wait), body...), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", site)
	s := newShape(t, map[string]map[string]string{"app": {"README": "app\n"}}, `name: ncclwait
cluster: test
description: torch's NCCL, and something to build
components:
  - name: nccl
    source: {python: {package: nvidia-nccl-cu12}}
  - name: app
    version: 1.0.0
    source: {git: {url: "URL_app", commit: COMMIT_app}}
    build:
      - command: {run: [sh, -c, 'mkdir -p "$DESTDIR$PREFIX" && cp README "$DESTDIR$PREFIX/"']}
`)
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: s.recipe, CacheDir: cacheDir, Mirror: s.mirror, Log: log.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(alone); err == nil {
		t.Error("torch's NCCL was asked before any build began")
	}
	m := decodeManifestWithTar(t, res.Artifact)
	if m.Toolchain == nil || m.Toolchain.NCCL == nil || m.Toolchain.NCCL.Version != "2.28.9" || m.Toolchain.NCCL.Path != "nvidia/nccl/lib/libnccl.so.2.28.9" {
		t.Errorf("the manifest's NCCL: %+v", m.Toolchain)
	}
}
