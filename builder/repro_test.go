package builder

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/compat"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// The demo built by two processes that differ in everything a build must not depend on:
// the cache's path (and its depth), the cores it may use (taskset -c 0: one), the umask,
// TZ, LANG and the python3 on PATH (a wrapper script in front of the real one). The
// artifacts are byte-identical, and each process's build record shows it ran as set up.
func TestDemoReproducibleAcrossMachines(t *testing.T) {
	if os.Getenv("EPBUILD_TEST_CHILD") == "repro" {
		res, err := demoRun(t, os.Getenv("EPBUILD_TEST_DIR"), os.Getenv("EPBUILD_TEST_OUT"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("SHA256 %s\n", res.SHA256)
		return
	}
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Fatalf("taskset (util-linux) is needed to run a build on one core: %v", err)
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("the demo needs python3")
	}
	shim := t.TempDir()
	if err := os.WriteFile(filepath.Join(shim, "python3"), []byte("#!/bin/sh\nexec "+quote.ShellAlways(python)+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	type run struct {
		cache, umask string
		env          []string
		argv         []string
	}
	runs := []run{
		{cache: filepath.Join(base, "c"), umask: "022", env: []string{"TZ=UTC", "LANG=C"}},
		{cache: filepath.Join(base, "x", "y", "z", "a much deeper cache"), umask: "077",
			env:  []string{"TZ=Asia/Kolkata", "LANG=de_DE.UTF-8", "PATH=" + shim + string(os.PathListSeparator) + os.Getenv("PATH")},
			argv: []string{taskset, "-c", "0"}},
	}
	var sums []string
	for i, r := range runs {
		out := filepath.Join(base, fmt.Sprintf("out%d", i))
		argv := append(append([]string{"sh", "-c", `umask "$0" && exec "$@"`, r.umask}, r.argv...), os.Args[0], "-test.run=^TestDemoReproducibleAcrossMachines$")
		cmd := exec.Command(argv[0], argv[1:]...)
		var env []string
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); k != "LC_ALL" && k != "LANG" && k != "TZ" && (k != "PATH" || i == 0) {
				env = append(env, kv)
			}
		}
		cmd.Env = append(env, append(r.env, "EPBUILD_TEST_CHILD=repro", "EPBUILD_TEST_DIR="+r.cache, "EPBUILD_TEST_OUT="+out)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("build %d: %v\n%s", i, err, b)
		}
		_, sum, ok := strings.Cut(string(b), "SHA256 ")
		if !ok {
			t.Fatalf("build %d printed no sha256:\n%s", i, b)
		}
		sums = append(sums, strings.Fields(sum)[0])
		// each build recorded the machine as it was set up
		rec := readBuildRecord(t, r.cache, "libdemo")
		wantJobs, wantPython := rec.Host.Jobs, python
		if i == 1 {
			wantJobs, wantPython = 1, filepath.Join(shim, "python3")
		}
		if rec.Host.Jobs != wantJobs || (i == 1 && rec.Host.Python != wantPython) || rec.Host.Cache != r.cache {
			t.Errorf("build %d recorded %+v; want %d jobs, python %s, cache %s", i, rec.Host, wantJobs, wantPython, r.cache)
		}
		if rec.Env["SOURCE_DATE_EPOCH"] == "" || rec.Env["TZ"] != "UTC" || !strings.HasPrefix(rec.Dir, "/tmp/epbuild-libdemo-") {
			t.Errorf("build %d: %+v", i, rec)
		}
	}
	if sums[0] != sums[1] {
		t.Fatalf("the artifact depends on the machine: %s and %s", sums[0], sums[1])
	}
	// and nothing of either machine is in it
	m := artifactManifest(t, filepath.Join(base, "out0"))
	for _, s := range []string{base, shim, `"jobs"`, python} {
		if bytes.Contains(m, []byte(s)) {
			t.Errorf("the manifest holds %q", s)
		}
	}
}

// buildRecord is what a build stage records of its host and directories beside its logs
// (logs/build.json), read back as a user of the cache would.
type buildRecord struct {
	Host *stage.BuildHost  `json:"host"`
	Dir  string            `json:"dir"`
	Out  string            `json:"out,omitempty"`
	Env  map[string]string `json:"env"`
}

func readBuildRecord(t *testing.T, cache, comp string) buildRecord {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(cache, "stages", "build", "*", "logs", "build.json"))
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		var rec buildRecord
		if err := json.Unmarshal(b, &rec); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(rec.Dir, "-"+comp+"-") {
			return rec
		}
	}
	t.Fatalf("no build record of %s in %s (%v)", comp, cache, logs)
	return buildRecord{}
}

func artifactManifest(t *testing.T, out string) []byte {
	t.Helper()
	arts, _ := filepath.Glob(filepath.Join(out, "*.tar.zst"))
	if len(arts) != 1 {
		t.Fatalf("artifacts in %s: %v", out, arts)
	}
	return fixture.ReadManifestWithTar(t, arts[0])
}

// repoFixture is a git repository served from a mirror laid out by URL, and a recipe file
// that builds it.
type repoFixture struct {
	mirror, recipe string
}

// newFixture commits files to a repository at example.invalid/fixture/NAME and writes a
// recipe from body, where URL and COMMIT stand for the repository's.
func newFixture(t *testing.T, name string, files map[string]string, body string) repoFixture {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("the fixture repository is made with the git CLI: %v", err)
	}
	work, commit := fixture.Commit(t, files, "fixture")
	mirror := t.TempDir()
	fixture.Git(t, work, "clone", "-q", "--bare", work, filepath.Join(mirror, "example.invalid", "fixture", name+".git"))
	recipe := filepath.Join(t.TempDir(), name+".yaml")
	body = strings.NewReplacer("URL", "https://example.invalid/fixture/"+name, "COMMIT", commit).Replace(body)
	if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return repoFixture{mirror: mirror, recipe: recipe}
}

func (f repoFixture) job(t *testing.T, cache string) *Job {
	t.Helper()
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: f.recipe, CacheDir: cache, Mirror: f.mirror,
		Log: log.New(io.Discard), Progress: source.ProgressLines})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (f repoFixture) build(t *testing.T, cache, out string, repro stage.Repro) (*stage.Result, error) {
	t.Helper()
	res, err := f.job(t, cache).Build(context.Background(), BuildOptions{OutDir: out, Version: "test", Environ: os.Environ(), Getenv: os.Getenv, Repro: repro})
	var pe *toolchain.PreflightError
	if errors.As(err, &pe) {
		t.Skipf("the fixture cannot build here: %v", err)
	}
	return res, err
}

// A C library whose assertion message and a function carry __FILE__, built with CMake
// (the recipe sets CMAKE_C_FLAGS, to which the map is added) and as a Python extension
// (setuptools, the source made absolute as torch's cpp_extension makes it; CFLAGS
// carries the map), in two caches: the same bytes, and __FILE__ reads
// <component>/src/<file>, not where the build ran. With the measures off it reads the
// build directory in the cache, which is what the first half of the test rules out.
const fixtureC = `#include <assert.h>
#include <stddef.h>
const char *fixture_file(void) { return __FILE__; }
int fixture_half(int x) { assert(x % 2 == 0); return x / 2; }
`

func fileMacroFixture(t *testing.T) repoFixture {
	return newFixture(t, "filemacro", map[string]string{
		"fixture.c": fixtureC,
		"CMakeLists.txt": `cmake_minimum_required(VERSION 3.13)
project(fixture C)
add_library(fixture SHARED fixture.c)
set_target_properties(fixture PROPERTIES VERSION 1.0.0 SOVERSION 1)
install(TARGETS fixture LIBRARY DESTINATION lib)
`,
		"fixext.c": fixtureC + `#include <Python.h>
static PyObject *where(PyObject *self, PyObject *args) { return PyUnicode_FromString(fixture_file()); }
static PyMethodDef methods[] = {{"where", where, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "fixext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_fixext(void) { return PyModule_Create(&mod); }
`,
		"setup.py": `import os
from setuptools import setup, Extension
setup(name="fixext", version="1.0", ext_modules=[Extension("fixext", [os.path.abspath("fixext.c")])])
`,
	}, `name: filemacro
cluster: test
description: a C library whose assertions carry __FILE__
toolchain: {python: ">=3.8", cmake: ">=3.13"}
components:
  - name: clib
    version: 1.0.0
    source: {git: {url: "URL", commit: COMMIT}}
    build:
      - cmake: {options: {CMAKE_C_FLAGS: "-O2"}}
  - name: pyfix
    version: 1.0.0
    source: {git: {url: "URL", commit: COMMIT}}
    build:
      - python-extension: {}
`)
}

func TestFileMacroMapped(t *testing.T) {
	f := fileMacroFixture(t)
	base := t.TempDir()
	a, err := f.build(t, filepath.Join(base, "a"), filepath.Join(base, "outa"), stage.Repro{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.build(t, filepath.Join(base, "deeper", "still", "b"), filepath.Join(base, "outb"), stage.Repro{})
	if err != nil {
		t.Fatal(err)
	}
	if a.SHA256 != b.SHA256 {
		rep, _ := pack.Diff(context.Background(), a.Artifact, b.Artifact, 0)
		t.Fatalf("two caches, two artifacts: %s and %s\n%+v", a.SHA256, b.SHA256, rep)
	}
	inst := t.TempDir()
	if out, err := exec.Command("tar", "--zstd", "-xf", a.Artifact, "-C", inst).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, out)
	}
	lib := filepath.Join(inst, "clib", "lib", "libfixture.so.1.0.0")
	exts, _ := filepath.Glob(filepath.Join(inst, "pyfix", "python", "fixext*.so"))
	if len(exts) != 1 {
		t.Fatalf("the extension: %v", exts)
	}
	for file, want := range map[string]string{lib: "clib/src/fixture.c", exts[0]: "pyfix/src/fixext.c"} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte(want+"\x00")) {
			t.Errorf("%s: __FILE__ is not %q", file, want)
		}
		for _, leak := range []string{"/tmp/epbuild-", base} {
			if bytes.Contains(data, []byte(leak)) {
				t.Errorf("%s holds %q", file, leak)
			}
		}
	}
	// the interpreter reads the same
	cmd := exec.Command("python3", "-c", "import fixext; print(fixext.where())")
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(inst, "pyfix", "python"))
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "pyfix/src/fixext.c" {
		t.Errorf("fixext.where(): %v %s", err, out)
	}

	// with the measures off, the build directory in the cache is what __FILE__ says
	offCache := filepath.Join(base, "off")
	off, err := f.build(t, offCache, filepath.Join(base, "outoff"), stage.Repro{Off: true})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := pack.Diff(context.Background(), a.Artifact, off.Artifact, 0)
	if err != nil {
		t.Fatal(err)
	}
	var sawLib bool
	for _, c := range rep.Changes {
		if c.Path == "clib/lib/libfixture.so.1.0.0" {
			sawLib = true
			if len(c.Sections) == 0 || !strings.Contains(strings.Join(c.OnlyB, " "), filepath.Join(offCache, "tmp", "work-")) {
				t.Errorf("with the measures off: %+v", c)
			}
		}
	}
	if !sawLib {
		t.Errorf("with the measures off the library is the same: %+v", rep.Changes)
	}
}

// A build directory that an interrupted build left is removed by the next build of the
// key; a root where others could swap a build directory, or that is not a directory, is
// refused before any work.
func TestBuildRoot(t *testing.T) {
	root := t.TempDir()
	stale := filepath.Join(root, "epbuild-libdemo-000000000000")
	os.MkdirAll(filepath.Join(stale, "src"), 0o755)
	// the demo's key is not known before the plan: find it, then plant the leftover
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: t.TempDir(), Log: log.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	plan, err := j.Build(context.Background(), BuildOptions{PlanOnly: true, Version: "test", Getenv: os.Getenv, Repro: stage.Repro{Root: root}})
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, s := range plan.Stages {
		if s.Stage == "build" && s.Component == "libdemo" {
			key = s.Key
		}
	}
	left := filepath.Join(root, "epbuild-libdemo-"+key[:12])
	if err := os.Rename(stale, left); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(left, "src", "junk.c"), []byte("#error left behind\n"), 0o644)
	res, err := j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv, Repro: stage.Repro{Root: root}})
	var pe *toolchain.PreflightError
	if errors.As(err, &pe) {
		t.Skipf("the demo cannot build here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.SHA256 == "" {
		t.Fatal("no artifact")
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		if e.IsDir() {
			t.Errorf("left in the build root: %s", e.Name())
		}
	}

	for name, setup := range map[string]func(string) string{
		"a symlink": func(d string) string {
			os.Symlink(t.TempDir(), filepath.Join(d, "root"))
			return filepath.Join(d, "root")
		},
		"writable by all, not sticky": func(d string) string {
			os.Chmod(d, 0o777)
			return d
		},
	} {
		bad := setup(t.TempDir())
		// a cache of its own: the root is no part of the key, so the first cache has the build
		j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: t.TempDir(), Log: log.New(io.Discard)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv, Repro: stage.Repro{Root: bad}})
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "EPBUILD_BUILD_ROOT") {
			t.Errorf("%s root: %v", name, err)
		}
	}
}

// A build root that fills up during the build is named as full (exit 3). Real tmpfs
// mounts, in a mount namespace of a child process (as TestFullDisk makes them).
func TestBuildRootMounts(t *testing.T) {
	fixture.InMountNamespace(t, "TestBuildRootMounts", "rootmounts", buildRootMountsChild)
}

func buildRootMountsChild(t *testing.T) {
	fixture.PrivateMounts(t)
	// the demo's CMake build does not fit in 96k
	small := fixture.MountTmpfs(t, 0, "96k")
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: t.TempDir(), Log: log.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv, Repro: stage.Repro{Root: small}})
	var ns *disk.NoSpaceError
	if !errors.As(err, &ns) || ns.Path != small || ns.ExitCode() != 3 || !strings.Contains(err.Error(), "EPBUILD_BUILD_ROOT") {
		t.Errorf("a full build root: %v", err)
	}
	if ents, _ := os.ReadDir(small); len(ents) > 2 {
		t.Errorf("left in the full root: %v", ents)
	}
}

// --rebuild-check: the demo built a second time from nothing elsewhere gives the same
// bytes; a build that writes the time into its output fails the check, which names the
// file and keeps the second artifact beside the first.
func TestRebuildCheck(t *testing.T) {
	// the first build finds its stages made; the second is built from nothing
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: warmCache(t), Log: log.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := j.BuildAndCheck(context.Background(), BuildOptions{OutDir: out, Version: "test", Environ: os.Environ(), Getenv: os.Getenv})
	var pe *toolchain.PreflightError
	if errors.As(err, &pe) {
		t.Skipf("the demo cannot build here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Rebuild == nil || !res.Rebuild.Equal || res.Rebuild.SHA256 != res.SHA256 || res.Rebuild.Kept != "" {
		t.Fatalf("%+v", res.Rebuild)
	}
	// what users vary between builds was varied
	for _, want := range []string{"build root ", "jobs ", "TZ=", "umask 077", "cache "} {
		if !slices.ContainsFunc(res.Rebuild.Varied, func(v string) bool { return strings.HasPrefix(v, want) }) {
			t.Errorf("the second build did not vary %q: %q", want, res.Rebuild.Varied)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "rebuild")); err == nil {
		t.Error("an equal second artifact was kept")
	}

	f := newFixture(t, "stamped", map[string]string{"README": "stamped\n"}, `name: stamped
cluster: test
description: a build that writes the time into its output
components:
  - name: stamped
    version: 1.0.0
    source: {git: {url: "URL", commit: COMMIT}}
    build:
      - command: {run: [sh, -c, 'date +%s%N > "$DESTDIR$PREFIX/stamp"']}
`)
	cache := t.TempDir()
	res, err = f.job(t, cache).BuildAndCheck(context.Background(), BuildOptions{OutDir: out, Version: "test", Environ: os.Environ(), Getenv: os.Getenv})
	var nr *NotReproducibleError
	if !errors.As(err, &nr) || nr.ExitCode() != 1 || !strings.Contains(err.Error(), "stamped") {
		t.Fatalf("%v", err)
	}
	var paths []string
	for _, c := range res.Rebuild.Diff.Changes {
		paths = append(paths, c.Path)
	}
	if strings.Join(paths, " ") != "manifest.json stamped/stamp" {
		t.Errorf("changes: %v", paths)
	}
	if sum, err := disk.FileSHA256(res.Rebuild.Kept); err != nil || sum != res.Rebuild.SHA256 || filepath.Dir(filepath.Dir(res.Rebuild.Kept)) != out {
		t.Errorf("kept %s: %s %v", res.Rebuild.Kept, sum, err)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "tmp", "rebuild-*")); len(left) != 0 {
		t.Errorf("left in the cache: %v", left)
	}
}

// What a build step gets: the environment the measures set, the user's CFLAGS kept with
// the map added, and nvcc through the wrapper. There is no CUDA toolkit here: a
// stand-in nvcc answers --version and --help as nvcc 13.0 does (the two options the probe
// looks for) and prints the arguments it is run with.
func TestStepEnvironment(t *testing.T) {
	cuda := t.TempDir()
	nvcc := filepath.Join(cuda, "bin", "nvcc")
	os.MkdirAll(filepath.Dir(nvcc), 0o755)
	os.WriteFile(nvcc, []byte(`#!/bin/sh
case "$1" in
--version) echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0 ;;
--help) printf '%s\n' "--objdir-as-tempdir                         (-objtemp)" "--frandom-seed <seed>                       (-frandom-seed)"; exit 0 ;;
esac
printf '%s\n' "$@"
`), 0o755)
	f := newFixture(t, "envcheck", map[string]string{"k.cu": "// a kernel\n"}, `name: envcheck
cluster: test
description: prints the environment of its build step
components:
  - name: envcheck
    version: 1.0.0
    source: {git: {url: "URL", commit: COMMIT}}
    build:
      - command:
          run: [sh, -c, 'env > "$DESTDIR$PREFIX/env.txt" && "$PYTORCH_NVCC" -c "$SRC/k.cu" -o "$SRC/../build/k.o" > "$DESTDIR$PREFIX/nvcc.txt"']
          env: {NVCC: "{{nvcc}}"}
`)
	getenv := func(k string) string {
		if k == "CUDA_HOME" {
			return cuda
		}
		return os.Getenv(k)
	}
	defer syscall.Umask(syscall.Umask(0o077))
	res, err := f.job(t, t.TempDir()).Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test",
		Environ: append(os.Environ(), "CFLAGS=-DFROM_USER", "LANG=de_DE.UTF-8"), Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	pre := res.Components[0].Prefix
	envb, err := os.ReadFile(filepath.Join(pre, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(envb), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	work := env["PWD"]
	if !strings.HasPrefix(work, "/tmp/epbuild-envcheck-") || filepath.Base(work) != "src" {
		t.Fatalf("the step ran in %q", work)
	}
	work = filepath.Dir(work)
	want := map[string]string{
		"SOURCE_DATE_EPOCH": "1735689600", // the fixture's commit time
		"TZ":                "UTC", "LC_ALL": "C.UTF-8", "PYTHONHASHSEED": "0",
		"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.DevNull,
		"TMPDIR":                       work + "/tmp",
		"PREFIX":                       work + "/prefix",
		"CUDA_HOME":                    cuda,
		"PYTORCH_NVCC":                 work + "/.epbuild/nvcc",
		"CMAKE_CUDA_COMPILER_LAUNCHER": work + "/.epbuild/nvcc-launcher",
		"NVCC":                         work + "/.epbuild/nvcc", // {{nvcc}}: what NCCL's make takes
	}
	// gcc 8 and later map the build directory away (-ffile-prefix-map)
	if v, err := compat.ParseVersion(gccVersion(t)); err == nil && !v.Less(compat.MustVersion("8")) {
		want["CFLAGS"] = "-DFROM_USER -ffile-prefix-map=" + work + "=envcheck"
		want["CXXFLAGS"] = "-ffile-prefix-map=" + work + "=envcheck"
		want["NVCC_APPEND_FLAGS"] = "-Xcompiler=-ffile-prefix-map=" + work + "=envcheck"
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	args, err := os.ReadFile(filepath.Join(pre, "nvcc.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(args), "-objtemp\n--frandom-seed=src/../build/k.o\n-c\n") {
		t.Errorf("nvcc ran with:\n%s", args)
	}
	if res.Host == nil || res.Host.Jobs == 0 || res.Host.BuildRoot != stage.DefaultBuildRoot {
		t.Errorf("host record: %+v", res.Host)
	}
	// the step wrote under umask 022, whatever epbuild's: a wheel keeps the modes
	if st, err := os.Stat(filepath.Join(pre, "env.txt")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("env.txt: %v %v", st.Mode(), err)
	}
}

func gccVersion(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("gcc", "-dumpfullversion").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Two builds of one plan in two caches at the same time share the build directory of
// each key: the lock beside it makes the second wait for the first, and both give the
// same bytes.
func TestConcurrentBuildsOfOneKey(t *testing.T) {
	root := t.TempDir()
	type out struct {
		res *stage.Result
		err error
	}
	done := make(chan out, 2)
	for i := 0; i < 2; i++ {
		go func() {
			j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: t.TempDir(), Log: log.New(io.Discard)})
			if err != nil {
				done <- out{err: err}
				return
			}
			res, err := j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv, Repro: stage.Repro{Root: root}})
			done <- out{res, err}
		}()
	}
	a, b := <-done, <-done
	var pe *toolchain.PreflightError
	if errors.As(a.err, &pe) {
		t.Skipf("the demo cannot build here: %v", a.err)
	}
	if a.err != nil || b.err != nil {
		t.Fatalf("%v / %v", a.err, b.err)
	}
	if a.res.SHA256 != b.res.SHA256 {
		t.Errorf("%s and %s", a.res.SHA256, b.res.SHA256)
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		t.Errorf("left in the build root: %s", e.Name())
	}
	// a lock file per build key in this user's lock directory beside the source
	// directories, in /tmp whatever the root; nothing else left there
	private := filepath.Join(stage.DefaultBuildRoot, fmt.Sprintf("epbuild-locks-%d", os.Getuid()))
	var locks int
	for _, st := range a.res.Stages {
		if st.Stage != "build" {
			continue
		}
		name := "epbuild-" + st.Component + "-" + st.Key[:12]
		if _, err := os.Stat(filepath.Join(private, name+".lock")); err == nil {
			locks++
		}
		if _, err := os.Stat(filepath.Join(stage.DefaultBuildRoot, name)); err == nil && !heldByAnother(t, filepath.Join(private, name+".lock")) {
			// another test package building the same plan at this moment holds it
			t.Errorf("left: %s", name)
		}
	}
	if locks != 2 {
		t.Errorf("%d lock files in %s, want one per build key (2)", locks, private)
	}
}

// Two builds of one plan under two build roots, in two caches, by two epbuild versions,
// give the same stage keys and the same bytes; a root that does not exist yet is made. The
// first build is the warm demo's (the default root, version "test").
func TestSameBytesAnyRootAnyVersion(t *testing.T) {
	first := warmBuild(t).res
	root := filepath.Join(t.TempDir(), "not", "yet")
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: t.TempDir(), Log: log.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	second, err := j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test-1", Environ: os.Environ(), Getenv: os.Getenv, Repro: stage.Repro{Root: root}})
	if err != nil {
		t.Fatalf("root %s: %v", root, err)
	}
	if first.SHA256 != second.SHA256 {
		t.Errorf("two roots, two artifacts: %s and %s", first.SHA256, second.SHA256)
	}
	keys := func(r *stage.Result) map[string]string {
		m := map[string]string{}
		for _, s := range r.Stages {
			m[s.Stage+"/"+s.Component] = s.Key
		}
		return m
	}
	if a, b := keys(first), keys(second); !maps.Equal(a, b) {
		t.Errorf("the stage keys depend on the root:\n%v\n%v", a, b)
	}
}

// heldByAnother reports whether a build holds the lock file now: the build directory of
// a key is in use, not left behind, while its lock is held.
func heldByAnother(t *testing.T, lock string) bool {
	t.Helper()
	f, err := os.Open(lock)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return true
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}
