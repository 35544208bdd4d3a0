package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// lmodInit is Lmod's bash setup: Debian's lmod package, else $LMOD_PKG.
func lmodInit(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("LMOD_PKG") + "/init/bash", "/usr/share/lmod/lmod/init/bash", "/opt/apps/lmod/lmod/init/bash"} {
		if _, err := os.Stat(p); err == nil && !strings.HasPrefix(p, "/init") {
			return p
		}
	}
	t.Fatal("Lmod is not installed (Debian: lmod; .ci/run installs it)")
	return ""
}

// lmodScript loads the module with real Lmod in bash over a user's own PYTHONPATH,
// LD_LIBRARY_PATH and DEMO_LIB, runs the demo with the loaded env, unloads it, and prints
// the variables after each step.
const lmodScript = `set -e
. "$LMOD_INIT"
export PYTHONPATH=/user/py LD_LIBRARY_PATH=/user/lib DEMO_LIB=/user/own.so
show() { printf '%s py=%s ld=%s lib=%s lane=%s prefix=%s\n' "$1" "$PYTHONPATH" "$LD_LIBRARY_PATH" "${DEMO_LIB-unset}" "${DEMO_LANE_MAPPING-unset}" "${EPBUILD_PREFIX-unset}"; }
module use "$MODDIR"
module load "$MOD"
show load
cd / && python3 -c 'import pydemo; print("run", pydemo.Channel(1).describe())'
module whatis "$MOD" 2>&1 | grep -o 'Plan: [0-9a-f]*'
module unload "$MOD"
show unload
`

// TestModuleWithLmod writes the Lua and the Tcl modulefile of an install and loads each
// with real Lmod: the install's paths go in front of the user's, the recipe's env is set
// (the same values env.sh gives), the demo runs, and unload gives back the user's paths
// (and, from Lua, the user's own value of a variable the recipe sets).
func TestModuleWithLmod(t *testing.T) {
	init := lmodInit(t)
	art := demoArtifact(t)
	prefix := filepath.Join(t.TempDir(), "opt", "demo")
	env := nodeEnv()
	if code, out, errs := run(t, env, "install", art, "--prefix", prefix); code != 0 {
		t.Fatalf("install: exit %d\n%s%s", code, out, errs)
	}
	// what env.sh gives, over the same user's variables
	sh := exec.Command("bash", "-c", `export PYTHONPATH=/user/py LD_LIBRARY_PATH=/user/lib DEMO_LIB=/user/own.so; . "$1"
printf 'load py=%s ld=%s lib=%s lane=%s prefix=%s\n' "$PYTHONPATH" "$LD_LIBRARY_PATH" "$DEMO_LIB" "$DEMO_LANE_MAPPING" "$EPBUILD_PREFIX"`, "bash", filepath.Join(prefix, "env.sh"))
	b, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("env.sh: %v\n%s", err, b)
	}
	wantLoad := string(b)
	if !strings.Contains(wantLoad, "py="+filepath.Join(prefix, "pydemo", "python")+":/user/py ") {
		t.Fatalf("env.sh gave %s", wantLoad)
	}
	// Lua gives back the user's own DEMO_LIB (pushenv); Tcl unsets it (setenv: Lmod's Tcl
	// reader does not undo pushenv)
	wantUnload := map[string]string{
		"lua": "unload py=/user/py ld=/user/lib lib=/user/own.so lane=unset prefix=unset\n",
		"tcl": "unload py=/user/py ld=/user/lib lib=unset lane=unset prefix=unset\n",
	}

	for _, format := range []string{"lua", "tcl"} {
		t.Run(format, func(t *testing.T) {
			moddir := t.TempDir()
			code, out, errs := run(t, env, "module", "--prefix", prefix, "--format", format, "--as", "deepep/demo-1", "-o", moddir)
			if code != 0 || !strings.Contains(out, "module load deepep/demo-1") {
				t.Fatalf("module: exit %d\n%s%s", code, out, errs)
			}
			file := filepath.Join(moddir, "deepep", "demo-1")
			if format == "lua" {
				file += ".lua"
			}
			if _, err := os.Stat(file); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", "-c", lmodScript)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LMOD_INIT=" + init, "MODDIR=" + moddir, "MOD=deepep/demo-1"}
			b, err := cmd.CombinedOutput()
			got := string(b)
			if err != nil {
				t.Fatalf("Lmod: %v\n%s", err, got)
			}
			lines := strings.SplitAfter(got, "\n")
			if len(lines) < 4 || lines[0] != wantLoad {
				t.Errorf("after module load:\n%s\nenv.sh gives:\n%s", got, wantLoad)
			}
			if !strings.Contains(got, "run channel 1 of 4, 1 lanes\n") {
				t.Errorf("the demo did not run with the loaded module:\n%s", got)
			}
			if !strings.Contains(got, "Plan: ") {
				t.Errorf("module whatis names no plan:\n%s", got)
			}
			if !strings.HasSuffix(got, wantUnload[format]) {
				t.Errorf("after module unload:\n%s\nwant:\n%s", got, wantUnload[format])
			}
		})
	}

	// printed to stdout without -o; a bad --as or --format is bad input
	if code, out, _ := run(t, env, "module", "--prefix", prefix); code != 0 || !strings.Contains(out, `prepend_path("PYTHONPATH", "`+filepath.Join(prefix, "pydemo", "python")+`")`) {
		t.Errorf("module to stdout: exit %d\n%s", code, out)
	}
	for _, args := range [][]string{{"--as", "x"}, {"--as", "../x/1"}, {"--format", "yaml"}} {
		if code, _, _ := run(t, env, append([]string{"module", "--prefix", prefix}, args...)...); code != exitBadInput {
			t.Errorf("module %v: exit %d, want %d", args, code, exitBadInput)
		}
	}
	if code, _, errs := run(t, env, "module", "--prefix", t.TempDir()); code != exitBadInput || !strings.Contains(errs, "manifest") {
		t.Errorf("module of a directory with no install: exit %d %s", code, errs)
	}
}
