package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/creack/pty"
)

// TestTableFitsTheTerminal: on a terminal of 80 columns (a pty) every line of epbuild
// list fits, cut cells ending in "…"; COLUMNS overrides the terminal's size; written to
// anything else the table keeps whole cells.
func TestTableFitsTheTerminal(t *testing.T) {
	_, wide, _ := run(t, nil, "list")
	if widest(wide) <= 80 {
		t.Fatalf("epbuild list is %d columns wide: the test needs a wider table", widest(wide))
	}
	if strings.Contains(wide, "…") {
		t.Errorf("a table not written to a terminal was cut:\n%s", wide)
	}
	for _, c := range []struct {
		cols    uint16
		columns string
		want    int
	}{{80, "", 80}, {200, "60", 60}} {
		ptmx, tty, err := pty.Open()
		if err != nil {
			t.Skipf("no pty here: %v", err)
		}
		if err := pty.Setsize(ptmx, &pty.Winsize{Cols: c.cols, Rows: 24}); err != nil {
			t.Fatal(err)
		}
		got := make(chan []byte)
		go func() { b, _ := io.ReadAll(ptmx); got <- b }()
		var errb bytes.Buffer
		code := Main([]string{"list"}, Streams{In: strings.NewReader(""), Out: tty, Err: &errb}, func(k string) string {
			if k == "COLUMNS" {
				return c.columns
			}
			return ""
		})
		tty.Close()
		out := strings.ReplaceAll(string(<-got), "\r\n", "\n")
		ptmx.Close()
		if code != 0 {
			t.Fatalf("list on a terminal: exit %d %s", code, errb.String())
		}
		if widest(out) > c.want || !strings.Contains(out, "…") || !strings.Contains(out, "demo") {
			t.Errorf("%d columns (COLUMNS=%q): lines up to %d wide:\n%s", c.cols, c.columns, widest(out), out)
		}
	}
}

func widest(s string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		n = max(n, utf8.RuneCountInString(l))
	}
	return n
}

// TestLayout: the widest columns give way first, and no further than 8 runes.
func TestLayout(t *testing.T) {
	rows := [][]string{{"ID", "STATUS", "FOUND"}, {"host.gpus", "fail", strings.Repeat("x", 100)}}
	got := layout(rows, 40)
	want := "ID         STATUS  FOUND\nhost.gpus  fail    " + strings.Repeat("x", 20) + "…\n"
	if got != want {
		t.Errorf("layout at 40:\n%q\nwant\n%q", got, want)
	}
	if got := layout(rows, 0); !strings.Contains(got, strings.Repeat("x", 100)) {
		t.Errorf("layout without a width cut a cell:\n%s", got)
	}
	if got := layout(rows, 5); widest(got) > 9+2+6+2+8 {
		t.Errorf("layout at 5 cut below 8 runes or not at all:\n%s", got)
	}
}
