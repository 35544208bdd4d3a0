package main

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/mattn/go-isatty"
	"golang.org/x/sys/unix"
)

// terminalWidth is the width of the terminal out is, for tables to fit: $COLUMNS when it
// is a number, else the terminal's size. 0 when out is not a terminal: a table written
// to a file or a pipe keeps its whole cells.
func terminalWidth(out io.Writer, getenv func(string) string) int {
	f, ok := out.(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return 0
	}
	if n, err := strconv.Atoi(getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
		return int(ws.Col)
	}
	return 0
}

// table is a drop-in for the tabwriter.Writer the commands use (cells separated by
// tabs, lines by newlines, two spaces between columns), that fits the width of the
// terminal it writes to: when a row would be wider, the widest column is cut to what is
// left, its cells ending in "…". Written to anything but a terminal, nothing is cut.
type table struct {
	w     io.Writer
	width int
	buf   bytes.Buffer
}

// newTable writes to w, which is the command's stdout (a *countingWriter, which knows
// the terminal's width) or a writer of its own (then nothing is cut).
func newTable(w io.Writer) *table {
	t := &table{w: w}
	if c, ok := w.(*countingWriter); ok {
		t.width = c.width
	}
	return t
}

func (t *table) Write(b []byte) (int, error) { return t.buf.Write(b) }

// Flush writes the rows, aligned and fitted.
func (t *table) Flush() error {
	text := strings.TrimSuffix(t.buf.String(), "\n")
	t.buf.Reset()
	if text == "" {
		return nil
	}
	var rows [][]string
	for _, l := range strings.Split(text, "\n") {
		rows = append(rows, strings.Split(l, "\t"))
	}
	_, err := io.WriteString(t.w, layout(rows, t.width))
	return err
}

// layout aligns rows in columns two spaces apart; with width > 0, the widest columns are
// cut so that every line fits in width (down to columns of 8: narrower terminals wrap).
func layout(rows [][]string, width int) string {
	const gap, least = 2, 8
	var widths []int
	for _, r := range rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	// cut the widest column down to the next widest (or to what fits), and again, until
	// the rows fit or every column is down to least
	for width > 0 {
		total, widest, next := gap*(len(widths)-1), 0, 0
		for i, w := range widths {
			total += w
			if w > widths[widest] {
				widest = i
			}
		}
		for i, w := range widths {
			if i != widest {
				next = max(next, w)
			}
		}
		over := total - width
		if over <= 0 || widths[widest] <= least {
			break
		}
		// at least one narrower each time: columns of the same width take turns
		widths[widest] = max(least, min(widths[widest]-1, max(next, widths[widest]-over)))
	}
	var b strings.Builder
	for _, r := range rows {
		var line strings.Builder
		for i, c := range r {
			c = clipCell(c, widths[i])
			line.WriteString(c)
			if i < len(r)-1 {
				line.WriteString(strings.Repeat(" ", widths[i]-len([]rune(c))+gap))
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// clipCell cuts s to n runes, its last one an ellipsis.
func clipCell(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
