package modulefile

import (
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
	if _, err := Tcl(Module{Set: []Var{{Name: "A", Value: nonASCII}}}); err == nil || !strings.Contains(err.Error(), "Lua") {
		t.Errorf("Tcl took a value that is not ASCII: %v", err)
	}
	// what no modulefile can carry is refused, naming it
	for _, bad := range []Module{
		{Set: []Var{{Name: "A-B", Value: "x"}}},
		{Set: []Var{{Name: "A", Value: "x\x00"}}},
		{Prepend: []PathVar{{Name: "P", Dirs: []string{"/a:/b"}}}},
	} {
		if _, err := Lua(bad); err == nil {
			t.Errorf("%+v rendered", bad)
		}
	}
}
