package builder

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/benchcmp"
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/stage"
)

// TestCompareWall: a whole cold `epbuild recipe` of a recipe shaped as single-node,
// against a hand run of its slowest path, as the GPU comparison pits `epbuild recipe
// single-node` against a hand build of DeepEP. ext stands for DeepEP: a setup.py C
// extension that also sleeps standStill (the nvcc time), built against a package of the
// Python environment (setuptools, as DeepEP against the NVSHMEM wheel); smoke stands for
// the NVSHMEM smoke test (a cc compile and a sleep, 13/98 of ext's). The hand run: git
// clone of the mirror, checkout, `setup.py egg_info build` with the arguments epbuild's
// python-extension step gives it. epbuild does besides: the probe, the rules, smoke's
// build, the checks (an import), the package stage and its publication; the ratio says how
// much of that the concurrency hides. overhead_s is the difference of the medians.
func TestCompareWall(t *testing.T) {
	benchcmp.Skip(t)
	benchcmp.Need(t, "git", "cc", "python3")
	const standStill = 3.0
	s := fixture.NewShape(t, map[string]map[string]string{
		"ext": {
			"setup.py": `import os, time
from setuptools import setup, Extension
time.sleep(float(os.environ.get("STAND_IN_SECONDS", "0")))  # stands for nvcc
setup(name="ext", version="1.0", packages=["ext"], ext_modules=[Extension("ext._core", ["core.c"])])
`,
			"ext/__init__.py": "from ext._core import answer\n",
			"core.c": `#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, NULL}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "_core", NULL, -1, methods};
PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&mod); }
`,
		},
		"smoke": {
			"smoke.c":  "int main(void) { return 0; }\n",
			"build.sh": "set -e\nmkdir -p \"$DESTDIR$PREFIX/bin\"\ncc -O2 -o \"$DESTDIR$PREFIX/bin/smoke\" smoke.c\nsleep \"$SECONDS_\"\n",
		},
	}, fmt.Sprintf(`name: wall
cluster: test
description: single-node's shape
toolchain: {python: ">=3.8"}
components:
  - name: env
    source: {python: {package: setuptools}}
  - name: ext
    version: 1.0.0
    source: {git: {url: "URL_ext", commit: COMMIT_ext}}
    depends: [env]
    build:
      - python-extension: {env: {STAND_IN_SECONDS: "%[1]g"}}
    checks: [{import: ext}, {file: "python/ext/_core*.so"}]
  - name: smoke
    version: 0.1.0
    source: {git: {url: "URL_smoke", commit: COMMIT_smoke}}
    depends: [env]
    build:
      - command: {run: [sh, build.sh], env: {SECONDS_: "%[2]g"}}
    checks: [{file: bin/smoke}]
`, standStill, standStill*13/98))
	bin := filepath.Join(t.TempDir(), "epbuild")
	if b, err := exec.Command("go", "build", "-o", bin, "../cmd/epbuild").CombinedOutput(); err != nil {
		t.Fatalf("build epbuild: %v %s", err, b)
	}
	tmp := t.TempDir()
	// cold: a fresh cache each time
	ours := func(tb testing.TB) benchcmp.Sample {
		dir, err := os.MkdirTemp(tmp, "epbuild-")
		if err != nil {
			tb.Fatal(err)
		}
		defer os.RemoveAll(dir)
		return benchcmp.Shell(tb, dir, `EPBUILD_CACHE="$PWD/cache" "$1" recipe "$2" --mirror "$3" -o out --log-level error >/dev/null`, bin, s.Recipe, s.Mirror)
	}
	hand := func(tb testing.TB) benchcmp.Sample {
		dir, err := os.MkdirTemp(tmp, "hand-")
		if err != nil {
			tb.Fatal(err)
		}
		defer os.RemoveAll(dir)
		return benchcmp.Shell(tb, dir, `mkdir egg && git clone -q "$1" ext && cd ext && git checkout -q "$(git rev-parse HEAD)" &&
STAND_IN_SECONDS="$2" python3 setup.py -q egg_info --egg-base ../egg build --build-lib ../lib --build-temp ../tmp >/dev/null`,
			filepath.Join(s.Mirror, "example.invalid", "shape", "ext.git"), fmt.Sprint(standStill))
	}
	res := benchcmp.Compare(t, benchcmp.Rounds(5), ours, hand)

	// where epbuild's time goes, from one more run: the sum of its stages is what a run of
	// one stage at a time would take
	dir := t.TempDir()
	cmd := exec.Command(bin, "recipe", s.Recipe, "--mirror", s.Mirror, "-o", filepath.Join(dir, "out"), "--json", "--log-level", "error")
	cmd.Env = append(os.Environ(), "EPBUILD_CACHE="+filepath.Join(dir, "cache"))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("epbuild recipe: %v", err)
	}
	var run stage.Result
	if err := json.Unmarshal(out, &run); err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, e := range run.Stages {
		sum += e.Seconds
	}
	med := func(ss []benchcmp.Sample) float64 {
		w := make([]time.Duration, len(ss))
		for i, s := range ss {
			w[i] = s.Wall
		}
		return benchcmp.Median(w).Seconds()
	}
	res.Print("wall", fmt.Sprintf("overhead_s=%.3f", med(res.Ours)-med(res.Anchor)), fmt.Sprintf("stages_sum_s=%.3f", sum),
		fmt.Sprintf("stand_in_s=%g", standStill), fmt.Sprintf("cores=%d", benchcmp.Workers()))
}
