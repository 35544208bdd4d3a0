package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/quote"
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
	prefix := pristineInstall(t)
	env := nodeEnv()
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
	// both give back the user's own DEMO_LIB (pushenv; in Tcl with Lmod's own environment
	// put back, see modulefile) and unset what the user did not have
	wantUnload := map[string]string{
		"lua": "unload py=/user/py ld=/user/lib lib=/user/own.so lane=unset prefix=unset\n",
		"tcl": "unload py=/user/py ld=/user/lib lib=/user/own.so lane=unset prefix=unset\n",
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

			// a second install never loads beside the first: Lmod swaps within the family
			// "deepep" (Lua), and the one name rule or the conflict (Tcl) holds
			second := map[string]string{"lua": "other/2", "tcl": "deepep/demo-2"}[format]
			if code, out, errs := run(t, env, "module", "--prefix", prefix, "--format", format, "--as", second, "-o", moddir); code != 0 {
				t.Fatalf("module: exit %d\n%s%s", code, out, errs)
			}
			both := exec.Command("bash", "-c", `. "$LMOD_INIT"; module use "$MODDIR"; module load "$MOD"; module load "$SECOND"; module -t list 2>&1`)
			both.Env = append(cmd.Env, "SECOND="+second)
			b, err = both.CombinedOutput()
			if strings.Contains(string(b), "deepep/demo-1\n") && strings.Contains(string(b), second+"\n") {
				t.Errorf("two installs loaded at once (%v):\n%s", err, b)
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

// TestModuleHostileManifest: an install whose manifest names its recipe so as to run code
// from a modulefile, or to write one outside -o DIR, gets no modulefile under that name
// (bad input, nothing written anywhere); under a name given with --as, its modulefile
// loads with real Lmod, Lua and Tcl, and no code runs.
func TestModuleHostileManifest(t *testing.T) {
	init := lmodInit(t)
	prefix := pristineInstall(t)
	env := nodeEnv()
	mpath := filepath.Join(prefix, "manifest.json")
	raw, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	base := t.TempDir()
	moddir := filepath.Join(base, "a", "b", "mods")
	for _, recipe := range []string{
		"demo\nos.execute(\"touch " + marker + "\")\n--",
		"demo\nexec touch " + marker + "\n#",
		"../../../x",
		"../../../../../../../../../../" + strings.TrimPrefix(marker, "/"),
	} {
		m["recipe"] = recipe
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(mpath, b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, format := range []string{"lua", "tcl"} {
			code, out, errs := run(t, env, "module", "--prefix", prefix, "--format", format, "-o", moddir)
			if code != exitBadInput || !strings.Contains(errs, "--as NAME/VERSION") {
				t.Errorf("recipe %q, %s: exit %d\n%s%s", recipe, format, code, out, errs)
			}
		}
		// nothing was written, in -o DIR or above it
		filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
			if p != base {
				t.Errorf("recipe %q: module wrote %s", recipe, p)
			}
			return err
		})
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("recipe %q: a file was written at %s", recipe, marker)
		}

		// under a name of the admin's choice, the hostile recipe is data (whatis)
		for _, format := range []string{"lua", "tcl"} {
			dir := t.TempDir()
			if code, out, errs := run(t, env, "module", "--prefix", prefix, "--format", format, "--as", "deepep/1", "-o", dir); code != 0 {
				t.Fatalf("module --as: exit %d\n%s%s", code, out, errs)
			}
			cmd := exec.Command("bash", "-c", `set -e; . "$LMOD_INIT"; module use "$MODDIR"; module load deepep/1; module whatis deepep/1 2>&1; module unload deepep/1`)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LMOD_INIT=" + init, "MODDIR=" + dir}
			b, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(b), "Name: "+strings.SplitN(quote.Term(recipe), `\n`, 2)[0]) {
				t.Errorf("%s: Lmod: %v\n%s", format, err, b)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("recipe %q: loading the %s modulefile ran code", recipe, format)
			}
		}
	}
	for _, as := range []string{"deepep/1\nexec touch " + marker, "de\"ep/1", "deepep/.1", "deepep/1/2"} {
		if code, _, errs := run(t, env, "module", "--prefix", prefix, "--as", as, "-o", moddir); code != exitBadInput {
			t.Errorf("--as %q: exit %d %s", as, code, errs)
		}
	}
}
