package modulefile

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const nonASCII = "é ü ∑"

// TestValuesReachTheShell loads a module whose values hold everything Lua, Tcl and the
// shell could read as code (quotes, $, brackets, braces, backslashes, non-ASCII) with
// real Lmod, in both formats: each variable arrives byte for byte, and nothing runs.
func TestValuesReachTheShell(t *testing.T) {
	init := "/usr/share/lmod/lmod/init/bash"
	if p := os.Getenv("LMOD_PKG"); p != "" {
		init = p + "/init/bash"
	}
	if _, err := os.Stat(init); err != nil {
		t.Fatalf("Lmod is not installed (Debian: lmod; `make deps` installs it): %v", err)
	}
	canary := filepath.Join(t.TempDir(), "ran")
	values := []string{
		`it's "quoted"`, `$(touch ` + canary + `)`, "`touch " + canary + "`", `[exec touch ` + canary + `]`,
		`back\slash\n`, `{brace} }`, nonASCII, `a;b|c&d`, `--flag=1 2`,
	}
	m := Module{Name: "t", Version: "1", Whatis: []string{`Name: "t" [x] $y`}, Help: "help {x}\n$y",
		Prepend: []PathVar{{Name: "PYTHONPATH", Dirs: []string{"/a b/c", "/d$e"}}}}
	for i, v := range values {
		m.Set = append(m.Set, Var{Name: "V" + string(rune('A'+i)), Value: v})
	}
	for format, render := range map[string]func(Module) ([]byte, error){"lua": Lua, "tcl": Tcl} {
		dir := t.TempDir()
		values := values
		m := m
		if format == "tcl" {
			// ASCII only: tclsh reads text in the locale's encoding (refused below)
			values = slices.DeleteFunc(slices.Clone(values), func(v string) bool { return v == nonASCII })
			m.Set = slices.DeleteFunc(slices.Clone(m.Set), func(v Var) bool { return v.Value == nonASCII })
		}
		b, err := render(m)
		if err != nil {
			t.Fatal(err)
		}
		name := "1"
		if format == "lua" {
			name += ".lua"
		}
		if err := os.MkdirAll(filepath.Join(dir, "t"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "t", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		script := `set -e; . "$1"; module use "$2"; module load t/1; printf '%s\n' "$PYTHONPATH"`
		for _, v := range m.Set {
			script += `; printf '%s\n' "$` + v.Name + `"`
		}
		cmd := exec.Command("bash", "-c", script, "bash", init, dir)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PYTHONPATH=/user"}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: Lmod: %v\n%s\n%s", format, err, out, b)
		}
		want := "/a b/c:/d$e:/user\n" + strings.Join(values, "\n") + "\n"
		if string(out) != want {
			t.Errorf("%s: the shell got\n%s\nwant\n%s\nmodulefile:\n%s", format, out, want, b)
		}
		if _, err := os.Stat(canary); err == nil {
			t.Fatalf("%s: a value ran a command", format)
		}
	}
	if _, err := Tcl(Module{Name: "t", Version: "1", Set: []Var{{Name: "A", Value: nonASCII}}}); err == nil || !strings.Contains(err.Error(), "Lua") {
		t.Errorf("Tcl took a value that is not ASCII: %v", err)
	}
	// what no modulefile can carry is refused, naming it
	for _, bad := range []Module{
		{Name: "t", Version: "1", Set: []Var{{Name: "A-B", Value: "x"}}},
		{Name: "t", Version: "1", Set: []Var{{Name: "A", Value: "x\x00"}}},
		{Name: "t", Version: "1", Set: []Var{{Name: "A", Value: "x\nid"}}},
		{Name: "t", Version: "1", Prepend: []PathVar{{Name: "P", Dirs: []string{"/a:/b"}}}},
		{Name: "t", Version: "1", Prepend: []PathVar{{Name: "P", Dirs: []string{"/a\nid"}}}},
	} {
		if _, err := Lua(bad); err == nil {
			t.Errorf("%+v rendered", bad)
		}
	}
}

// hostile are strings from a manifest that would run code if a modulefile wrote them as
// code: each ends the comment or the string it is in and runs touch MARKER.
func hostile(marker string) []string {
	return []string{
		"demo\nos.execute(\"touch " + marker + "\")\n--",
		"demo\nexec touch " + marker + "\n#",
		"demo\"); os.execute(\"touch " + marker + "\"); x=(\"",
		"demo\" ; exec touch " + marker + " ; set x \"",
		"demo]] os.execute('touch " + marker + "') --[[",
		"demo\r\nexec touch " + marker,
		"[exec touch " + marker + "]",
		"demo]===] os.execute('touch " + marker + "') --[===[",
	}
}

// TestHostileNamesRefused: a name or version that is not a file-name component is
// refused by both formats, so that neither a comment line nor NAME/VERSION.lua can be
// made of it.
func TestHostileNamesRefused(t *testing.T) {
	for _, h := range append(hostile("/tmp/x"), "../../../../../tmp/x", "a/b", "", ".hidden") {
		for _, m := range []Module{{Name: h, Version: "1"}, {Name: "deepep", Version: h}} {
			for format, render := range map[string]func(Module) ([]byte, error){"lua": Lua, "tcl": Tcl} {
				b, err := render(m)
				var ne *NameError
				if !errors.As(err, &ne) || !strings.Contains(err.Error(), "--as NAME/VERSION") {
					t.Errorf("%s: %q/%q: got %v\n%s", format, m.Name, m.Version, err, b)
				}
			}
		}
	}
}

// TestHostileValuesRunNothing loads modulefiles whose whatis, help and values are made to
// break out of their literal, with real Lmod (Lua and Tcl) and with plain tclsh: the
// marker file is never made, and whatis shows the strings as they are.
func TestHostileValuesRunNothing(t *testing.T) {
	init := "/usr/share/lmod/lmod/init/bash"
	if p := os.Getenv("LMOD_PKG"); p != "" {
		init = p + "/init/bash"
	}
	marker := filepath.Join(t.TempDir(), "ran")
	hs := hostile(marker)
	m := Module{Name: "t", Version: "1", Help: strings.Join(hs, "\n")}
	// values go into the shell code Lmod writes, which cannot carry a newline (refused
	// above): each newline here is a blank
	for i, h := range hs {
		m.Whatis = append(m.Whatis, "Name: "+h)
		m.Set = append(m.Set, Var{Name: "V" + string(rune('A'+i)), Value: strings.NewReplacer("\n", " ", "\r", " ").Replace(h)})
	}
	m.Prepend = []PathVar{{Name: "PYTHONPATH", Dirs: []string{"/p [exec touch " + marker + "] $(touch " + marker + ")"}}}
	// what Lmod's Tcl reader would write into its Lua unescaped is refused (measured: a
	// prepend-path value with '"' runs what follows it)
	for _, bad := range []Module{
		{Name: "t", Version: "1", Whatis: []string{hs[len(hs)-1]}},
		{Name: "t", Version: "1", Prepend: []PathVar{{Name: "PATH", Dirs: []string{`/a",os.execute("touch ` + marker + `"),"`}}}},
		{Name: "t", Version: "1", Prepend: []PathVar{{Name: "PATH", Dirs: []string{`/a\b`}}}},
	} {
		if _, err := Tcl(bad); err == nil || !strings.Contains(err.Error(), "use the Lua modulefile") {
			t.Errorf("Tcl took %+v: %v", bad, err)
		}
	}
	for format, render := range map[string]func(Module) ([]byte, error){"lua": Lua, "tcl": Tcl} {
		m := m
		if format == "tcl" {
			m.Whatis = m.Whatis[:len(m.Whatis)-1]
			m.Help = strings.Join(hs[:len(hs)-1], "\n")
		}
		b, err := render(m)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		name := map[string]string{"lua": "1.lua", "tcl": "1"}[format]
		if err := os.MkdirAll(filepath.Join(dir, "t"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "t", name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		script := `. "$1"; module use "$2"; module load t/1; printf '%s\n' "$VA"; module whatis t/1 2>&1; module help t/1 2>&1; module unload t/1`
		cmd := exec.Command("bash", "-c", script, "bash", init, dir)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: Lmod: %v\n%s", format, err, out)
		}
		if !strings.HasPrefix(string(out), m.Set[0].Value+"\n") || !strings.Contains(string(out), "exec touch "+marker) {
			t.Errorf("%s: the values did not arrive as data:\n%s", format, out)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: loading the modulefile ran code:\n%s", format, b)
		}
		if format != "tcl" {
			continue
		}
		// plain tclsh, with the modulefile commands as no-ops: what a Tcl reader sees
		stubs := `foreach c {module-whatis prepend-path conflict pushenv setenv} { proc $c args {} }
proc module-info args { return load }
source [lindex $argv 0]
ModulesHelp
`
		tcl := exec.Command("tclsh", "/dev/stdin", filepath.Join(dir, "t", name))
		tcl.Stdin = strings.NewReader(stubs)
		if out, err := tcl.CombinedOutput(); err != nil {
			t.Fatalf("tclsh: %v\n%s", err, out)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("tclsh: sourcing the modulefile ran code:\n%s", b)
		}
	}
}
