package quote

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

var hostile = []string{
	"plain",
	"",
	"it's",
	"a b\tc",
	"demo\nos.execute(\"touch /tmp/x\")\n--",
	"demo\nexec touch /tmp/x\n#",
	"$(touch x)`touch y`${HOME}",
	"[exec touch z]{}\"\\",
	"\x1b]0;title\x07\x1b[2J\x1b[1A",
	"caf\u00e9 \u202egnp.exe",
	"\xff\xfe",
}

// TestShellRoundTrip: every hostile value comes back byte for byte through a real sh.
func TestShellRoundTrip(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	for _, s := range hostile {
		if strings.ContainsRune(s, 0) {
			continue
		}
		out, err := exec.Command(sh, "-c", "printf %s "+Shell(s)).Output()
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if string(out) != s {
			t.Errorf("sh read %q back as %q", s, out)
		}
	}
}

// TestLuaTclStayData: a value quoted for Lua/Tcl is one literal, whatever it holds.
func TestLuaTclStayData(t *testing.T) {
	for _, s := range hostile {
		l := Lua(s)
		if strings.ContainsAny(l[1:len(l)-1], "\n\r") {
			t.Errorf("Lua(%q) = %s holds a line break", s, l)
		}
		tq := Tcl(s)
		body := tq[1 : len(tq)-1]
		for i := 0; i < len(body); i++ {
			c := body[i]
			if c == '\\' {
				i++
				continue
			}
			if c < 0x20 || strings.IndexByte("\"$[]{}", c) >= 0 {
				t.Errorf("Tcl(%q) = %s leaves %q unescaped", s, tq, c)
			}
		}
	}
	if tclsh, err := exec.LookPath("tclsh"); err == nil {
		dir := t.TempDir()
		for _, s := range hostile {
			if !ASCII(s) {
				continue
			}
			f := filepath.Join(dir, "t.tcl")
			os.WriteFile(f, []byte("puts -nonewline "+Tcl(s)+"\n"), 0o644)
			out, err := exec.Command(tclsh, f).Output()
			if err != nil {
				t.Fatalf("tclsh on %q: %v", s, err)
			}
			if string(out) != s {
				t.Errorf("tclsh read %q back as %q", s, out)
			}
		}
	}
}

// TestTermNoControl: nothing a terminal acts on survives, printable text does.
func TestTermNoControl(t *testing.T) {
	for _, s := range hostile {
		out := Term(s)
		for _, r := range out {
			if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == 0x202e {
				t.Errorf("Term(%q) = %q keeps %U", s, out, r)
			}
		}
	}
	if got := Term("café ok"); got != "café ok" {
		t.Errorf("Term changed printable text: %q", got)
	}
	if got := Term("OK\nOK: the nodes agree"); strings.Contains(got, "\n") {
		t.Errorf("a newline reached the terminal: %q", got)
	}
}

func TestName(t *testing.T) {
	for _, ok := range []string{"demo", "gcp-b200", "1.2.1+29d31c0", "a_b.c"} {
		if err := Name("recipe name", ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "../../../tmp/x", "a/b", ".hidden", "-rf", "a\nb", "a b", strings.Repeat("a", 129), "é"} {
		if err := Name("recipe name", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestTail(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{{"  ok\n", 10, "ok"}, {"abcdef", 3, "…def"}, {"ééé", 2, "…éé"}, {"", 3, ""}} {
		if got := Tail(c.in, c.n); got != c.want {
			t.Errorf("Tail(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
