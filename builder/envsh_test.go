package builder

import (
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/pack"

	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/modulefile"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
)

// shellsUnderTest are the shells env.sh must work in: dash is /bin/sh on Debian and
// Ubuntu (#!/bin/sh batch scripts); bash, zsh and ksh93 are what people log in with.
var shellsUnderTest = []string{"dash", "bash", "zsh", "ksh"}

// sourceIn sources script in shell from dir, with a caller's own PYTHONPATH set and set
// -u (and set -e where strict: a refusing env.sh then ends the caller, as in a batch
// script), and prints what env.sh exported, or the status it returned and what was left.
func sourceIn(t *testing.T, shell, dir, script string, strict bool) (out string, ok bool) {
	t.Helper()
	path, err := exec.LookPath(shell)
	if err != nil {
		t.Fatalf("%s is not installed (.ci/run installs dash, zsh and ksh): %v", shell, err)
	}
	prog := `set -u
if [ "$2" = strict ]; then set -e; fi
PYTHONPATH=/user/py; export PYTHONPATH
. "$1"
st=$?
if [ "$st" -ne 0 ]; then
  printf 'refused %s\nleft=%s %s %s\n' "$st" "${EPBUILD_PREFIX-unset}" "${_epbuild_at-unset}" "$PYTHONPATH"
  exit 0
fi
printf 'prefix=%s\npy=%s\nld=%s\nlib=%s\nlane=%s\nleft=%s\n' "$EPBUILD_PREFIX" "$PYTHONPATH" "$LD_LIBRARY_PATH" "$DEMO_LIB" "$DEMO_LANE_MAPPING" "${_epbuild_at-unset}"
`
	mode := "lax"
	if strict {
		mode = "strict"
	}
	cmd := exec.Command(path, "-c", prog, "sh", script, mode)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", shell, err, b)
	}
	out = string(b)
	if strings.Contains(out, "refused ") {
		// env.sh said why on stderr, and left nothing set
		if !strings.Contains(out, "env.sh: ") || !strings.Contains(out, "left=unset unset /user/py\n") {
			t.Errorf("%s: a refusal without its reason, or with something set:\n%s", shell, out)
		}
		return out, false
	}
	return out, true
}

// wantExports checks what env.sh exported for an install at prefix.
func wantExports(t *testing.T, shell, out, prefix string) {
	t.Helper()
	want := "prefix=" + prefix + "\n" +
		"py=" + prefix + "/pydemo/python:/user/py\n" +
		"ld=" + prefix + "/libdemo/lib\n" +
		"lib=" + prefix + "/libdemo/lib/libdemo.so.1\n" +
		"lane=0:2,1:1\n" +
		"left=unset\n"
	if out != want {
		t.Errorf("%s exported\n%s\nwant\n%s", shell, out, want)
	}
}

// TestEnvScriptShells sources an installed env.sh from dash, bash, zsh and ksh93, from
// another directory and through a symlink: each exports the install's paths, keeps the
// caller's PYTHONPATH, and works under set -eu. A moved install, and one kept as the
// previous install, are never silently taken for where their env.sh says: sh refuses
// (exit 1, nothing set) and the shells that can tell where the file is use that.
func TestEnvScriptShells(t *testing.T) {
	arts := artifacts(t)
	// a prefix that needs quoting: a space and a single quote
	prefix := filepath.Join(t.TempDir(), "it's an install")
	mustInstall(t, arts.A, prefix, false)
	// sourced, never run: not executable
	if st, err := os.Stat(filepath.Join(prefix, manifest.EnvName)); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("installed env.sh: %v %v, want mode 0644", st.Mode(), err)
	}
	elsewhere := t.TempDir()
	link := filepath.Join(elsewhere, "deepep-env.sh")
	if err := os.Symlink(filepath.Join(prefix, manifest.EnvName), link); err != nil {
		t.Fatal(err)
	}
	for _, sh := range shellsUnderTest {
		out, ok := sourceIn(t, sh, "/", filepath.Join(prefix, manifest.EnvName), true)
		if !ok {
			t.Fatalf("%s refused the installed env.sh: %s", sh, out)
		}
		wantExports(t, sh, out, prefix)
		out, _ = sourceIn(t, sh, elsewhere, "./deepep-env.sh", false)
		wantExports(t, sh, out, prefix)
	}

	// the env.sh it exports works: python imports the installed package, from sh
	cmd := exec.Command("dash", "-c", `. "$1" && cd / && python3 -c 'import pydemo, importlib.metadata as m; print(pydemo.__file__)'`, "sh", filepath.Join(prefix, manifest.EnvName))
	if b, err := cmd.CombinedOutput(); err != nil || !strings.HasPrefix(string(b), filepath.Join(prefix, "pydemo", "python")) {
		t.Fatalf("python under the env dash sourced: %v\n%s", err, b)
	}

	// moved by hand: sh cannot know where it is now; bash, zsh and ksh93 can
	moved := prefix + "-moved"
	if err := os.Rename(prefix, moved); err != nil {
		t.Fatal(err)
	}
	for _, sh := range shellsUnderTest {
		out, ok := sourceIn(t, sh, elsewhere, filepath.Join(moved, manifest.EnvName), false)
		if sh == "dash" {
			if ok || !strings.Contains(out, "no longer holds it") {
				t.Errorf("dash sourced a moved install: %s", out)
			}
			continue
		}
		wantExports(t, sh, out, moved)
	}
	rep := mustVerify(t, moved)
	wantStatus(t, rep, map[string]string{"env.prefix": "fail", "env.script": "pass", "files": "pass"})

	// reinstalled with the old one kept as .prev: the old env.sh names the prefix, which now
	// holds another install (another id)
	if err := os.Rename(moved, prefix); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, arts.B, prefix, true)
	prev := prefix + ".prev"
	for _, sh := range shellsUnderTest {
		out, ok := sourceIn(t, sh, "/", filepath.Join(prev, manifest.EnvName), false)
		if sh == "dash" {
			if ok || !strings.Contains(out, "no longer holds it") {
				t.Errorf("dash took the previous install's env.sh for the new one: %s", out)
			}
			continue
		}
		wantExports(t, sh, out, prev)
		out, _ = sourceIn(t, sh, elsewhere, "./deepep-env.sh", false)
		wantExports(t, sh, out, prefix)
	}
	wantStatus(t, mustVerify(t, prefix), map[string]string{"env.prefix": "pass", "env.script": "pass", "files": "pass"})
}

// TestEnvScriptUnpackedByHand: an artifact unpacked with tar has env.sh as the artifact
// carries it (no prefix written in): the shells that can tell where it is use that, sh
// refuses and says how to install it.
func TestEnvScriptUnpackedByHand(t *testing.T) {
	dir := t.TempDir()
	if b, err := exec.Command("tar", "--zstd", "-xf", artifacts(t).A, "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("tar: %v %s", err, b)
	}
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, sh := range shellsUnderTest {
		out, ok := sourceIn(t, sh, dir, "./"+manifest.EnvName, false)
		if sh == "dash" {
			if ok || !strings.Contains(out, "epbuild install did not write it") {
				t.Errorf("dash sourced an env.sh with no prefix: %s", out)
			}
			continue
		}
		wantExports(t, sh, out, real)
	}
	// a #!/bin/sh -e batch script stops at a refusing env.sh: nothing runs without the install
	cmd := exec.Command("dash", "-c", `set -e; . ./env.sh; echo ran on`)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err == nil || strings.Contains(string(b), "ran on") {
		t.Errorf("a set -e script ran on past a refusing env.sh: %v\n%s", err, b)
	}
	// through a symlink, a shell that can tell cannot resolve it portably: it refuses
	link := filepath.Join(t.TempDir(), "env.sh")
	if err := os.Symlink(filepath.Join(dir, manifest.EnvName), link); err != nil {
		t.Fatal(err)
	}
	if out, ok := sourceIn(t, "bash", "/", link, false); ok || !strings.Contains(out, "is a symlink") {
		t.Errorf("bash sourced an unplaced env.sh through a symlink: %s", out)
	}
	rep := mustVerify(t, dir)
	wantStatus(t, rep, map[string]string{"env.prefix": "warn", "env.script": "pass", "files": "pass"})
}

func TestBakeEnvScript(t *testing.T) {
	p := &plan.Plan{Recipe: "x", Key: strings.Repeat("a", 64), Env: map[string]string{"A": "{{c.prefix}}/lib"}}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "c", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	script, err := envsh.EnvScript(p, root, []string{"c"})
	if err != nil {
		t.Fatal(err)
	}
	baked, err := envsh.BakeEnv(script, envsh.EnvBaked{At: "/opt/it's", ID: "0123"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(baked, "\n_epbuild_at='/opt/it'\\''s'\n_epbuild_id='0123'\n") {
		t.Errorf("baked lines:\n%s", baked)
	}
	tmpl, b, err := envsh.UnbakeEnv(baked)
	if err != nil || tmpl != script || b != (envsh.EnvBaked{At: "/opt/it's", ID: "0123"}) {
		t.Errorf("unbake: %v %+v", err, b)
	}
	if _, err := envsh.BakeEnv(baked, envsh.EnvBaked{At: "/x", ID: "1"}); err == nil {
		t.Error("a baked env.sh was baked again")
	}
	// a newline and a backslash stay on the prefix line, escaped for printf %b
	for _, at := range []string{"/a\nb", `/a\b\n`, "/a\\\n'\"$[]\n"} {
		b, err := envsh.BakeEnv(script, envsh.EnvBaked{At: at, ID: "1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, got, err := envsh.UnbakeEnv(b); err != nil || got.At != at || strings.Count(b, "\n") != strings.Count(script, "\n") {
			t.Errorf("%q: read back %q, %v\n%s", at, got.At, err, b)
		}
	}
	if _, err := envsh.BakeEnv(script, envsh.EnvBaked{At: "/a\x00b", ID: "1"}); err == nil {
		t.Error("a prefix with a NUL was written into env.sh")
	}
	vars, _, got, err := envsh.ParseEnvScript(baked, "/opt/it's")
	if err != nil || got.At != "/opt/it's" || vars["A"] != "/opt/it's/c/lib" {
		t.Errorf("parse the baked script: %v %+v %v", err, got, vars)
	}
	// the value install writes is the only thing it may change
	for name, bad := range map[string]string{
		"a substitution in the prefix line": strings.Replace(baked, "_epbuild_at='/opt/it'\\''s'", "_epbuild_at=$(id)", 1),
		"an edited locator":                 strings.Replace(baked, "return 1", "true", 1),
		"an export after the tail":          baked + "export B=$(id)\n",
		"no tail":                           strings.Replace(baked, envsh.EnvTail, "", 1),
		"a command":                         strings.Replace(baked, envsh.EnvTail, "rm -rf /\n"+envsh.EnvTail, 1),
	} {
		if _, _, _, err := envsh.ParseEnvScript(bad, "/opt/x"); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

// TestEnvScriptPrefixes installs the demo into prefixes holding what shells, Tcl and Lua
// read as code or as separators, sources its env.sh in dash, bash, zsh and ksh93 (set
// -eu), runs verify-install, and loads its modulefiles with real Lmod: every one gets
// the prefix byte for byte, and nothing in a name runs. A ':' is refused at install (it
// separates PATH's entries); a Tcl modulefile refuses non-ASCII, and a modulefile a
// newline (Lmod would run what follows it), each saying so.
func TestEnvScriptPrefixes(t *testing.T) {
	arts := artifacts(t)
	base := t.TempDir()
	marker := filepath.Join(base, "ran")
	init := "/usr/share/lmod/lmod/init/bash"
	if p := os.Getenv("LMOD_PKG"); p != "" {
		init = p + "/init/bash"
	}
	names := []string{"[x] *? $(touch ran) `touch ran` a;touch ran", `back\slash\n "quo'te"`, "new\nline end\n", "ünï € sp ace\t", "-dash $HOME ${x-y}"}
	for i, name := range names {
		prefix := filepath.Join(base, fmt.Sprint(i), name)
		mustInstall(t, arts.A, prefix, false)
		for _, sh := range shellsUnderTest {
			out, ok := sourceIn(t, sh, base, filepath.Join(prefix, manifest.EnvName), true)
			if !ok {
				t.Errorf("%s refused the env.sh of %q: %s", sh, prefix, out)
				continue
			}
			wantExports(t, sh, out, prefix)
		}
		if rep := mustVerify(t, prefix); rep.Failed() {
			for _, c := range rep.Checks {
				if c.Status == "fail" {
					t.Errorf("verify-install %q: %s: %s", prefix, c.ID, c.Found)
				}
			}
		}
		for _, format := range []string{"lua", "tcl"} {
			mod, err := pack.Module(pack.ModuleOptions{Prefix: prefix, Name: "t", Version: "1"})
			var b []byte
			if err == nil {
				b, err = map[string]func(modulefile.Module) ([]byte, error){"lua": modulefile.Lua, "tcl": modulefile.Tcl}[format](mod)
			}
			switch {
			case strings.Contains(name, "\n"):
				if err == nil || !strings.Contains(err.Error(), "newline") {
					t.Errorf("%s modulefile of %q: %v", format, prefix, err)
				}
				continue
			case format == "tcl" && !quote.ASCII(name):
				if err == nil || !strings.Contains(err.Error(), "not ASCII") {
					t.Errorf("%s modulefile of %q: %v", format, prefix, err)
				}
				continue
			case format == "tcl" && strings.ContainsAny(name, "\"\\\t"):
				if err == nil || !strings.Contains(err.Error(), "use the Lua modulefile") {
					t.Errorf("%s modulefile of %q: %v", format, prefix, err)
				}
				continue
			case err != nil:
				t.Errorf("%s modulefile of %q: %v", format, prefix, err)
				continue
			}
			dir := t.TempDir()
			file := filepath.Join(dir, "t", map[string]string{"lua": "1.lua", "tcl": "1"}[format])
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(file, b, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", "-c", `. "$1"; module use "$2"; module load t/1; printf '%s|%s' "$EPBUILD_PREFIX" "$PYTHONPATH"`, "bash", init, dir)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
			cmd.Dir = base
			got, err := cmd.CombinedOutput()
			if want := prefix + "|" + filepath.Join(prefix, "pydemo", "python"); err != nil || string(got) != want {
				t.Errorf("%s modulefile of %q: %v: got\n%q\nwant\n%q", format, prefix, err, got, want)
			}
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a prefix ran a command")
	}
	_, err := install.Install(context.Background(), install.InstallOptions{Artifact: arts.A, Prefix: filepath.Join(base, "a:b"), Version: "test"})
	var re *install.PrefixRefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "PATH, PYTHONPATH and LD_LIBRARY_PATH") {
		t.Errorf("a prefix with ':': %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "a:b")); err == nil {
		t.Error("a refused prefix was made")
	}
}

// TestEnvScriptTwice sources an env.sh twice in dash, bash, zsh and ksh93 over a user's
// PATH, PYTHONPATH and a site's LD_PRELOAD (blank-separated, as XALT and Darshan write
// it): once gives PREFIX/bin first on PATH and the install's preload in front of the
// site's, and twice gives the same. Run as a program instead, it sets nothing, says how
// to source it, and exits 1.
func TestEnvScriptTwice(t *testing.T) {
	root := filepath.Join(t.TempDir(), "it's [an] install")
	for _, d := range []string{"c/lib", "c/python", "bin"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	p := &plan.Plan{Recipe: "x", Key: strings.Repeat("a", 64), Env: map[string]string{"LD_PRELOAD": "{{c.prefix}}/lib/x.so", "A": "{{c.prefix}}/lib"}}
	script, err := envsh.EnvScript(p, root, []string{"c"})
	if err != nil {
		t.Fatal(err)
	}
	baked, err := envsh.BakeEnv(script, envsh.EnvBaked{At: root, ID: "0123"})
	if err != nil {
		t.Fatal(err)
	}
	envPath := filepath.Join(root, manifest.EnvName)
	if err := os.WriteFile(envPath, []byte(baked), envsh.EnvMode); err != nil {
		t.Fatal(err)
	}
	vars, _, _, err := envsh.ParseEnvScript(baked, root)
	if err != nil || vars["PATH"] != root+"/bin" || vars["LD_PRELOAD"] != root+"/c/lib/x.so" || vars["PYTHONPATH"] != root+"/c/python" {
		t.Errorf("verify reads back %v, %v", vars, err)
	}
	// the runtime env verify-install gives a command (--traffic, --smoke) does the same
	env, err := envsh.RuntimeEnv(p, map[string]string{"c": filepath.Join(root, "c")}, []string{"LD_PRELOAD=/site/xalt.so"})
	if err != nil || !slices.Contains(env, "LD_PRELOAD="+root+"/c/lib/x.so:/site/xalt.so") {
		t.Errorf("runtime env: %v %q", err, env)
	}
	prog := `set -eu
PATH=/usr/bin:/bin LD_PRELOAD='/site/xalt.so /site/darshan.so' PYTHONPATH=/user/py
export LD_PRELOAD PYTHONPATH
show() { printf 'path=%s\npy=%s\nld=%s\npre=%s\na=%s\nleft=%s\n' "$PATH" "$PYTHONPATH" "$LD_LIBRARY_PATH" "$LD_PRELOAD" "$A" "${_epbuild_p-unset}"; }
. "$1"
once=$(show)
. "$1"
twice=$(show)
printf '%s\n' "$once"
if [ "$once" != "$twice" ]; then printf 'twice:\n%s\n' "$twice"; fi
`
	want := "path=" + root + "/bin:/usr/bin:/bin\npy=" + root + "/c/python:/user/py\nld=" + root + "/c/lib\npre=" + root + "/c/lib/x.so:/site/xalt.so /site/darshan.so\na=" + root + "/c/lib\nleft=unset\n"
	for _, sh := range shellsUnderTest {
		cmd := exec.Command(sh, "-c", prog, "sh", envPath)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != want {
			t.Errorf("%s: %v: got\n%s\nwant\n%s", sh, err, out, want)
		}
		// run as a program: by path, and from its directory
		for _, arg := range []string{envPath, "./" + manifest.EnvName} {
			cmd := exec.Command(sh, arg)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), "source it: . '"+strings.ReplaceAll(arg, "'", `'\''`)+"'") {
				t.Errorf("%s %s: %v\n%s", sh, arg, err, out)
			}
		}
	}
}
