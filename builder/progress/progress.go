// Package progress shows the build steps while they run: on a terminal, a live line per
// running step (its elapsed time and the last line of its log) below the log, drawn by
// mpb (the renderer the fetch progress uses too); elsewhere
// (CI, a pipe, a file), a heartbeat log line per running step at a fixed interval, so
// that a long step is never silent and a CI job is never killed for printing nothing.
package progress

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/log"
	"github.com/mattn/go-isatty"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"
)

// Mode is how the running steps are shown.
type Mode int

// The modes.
const (
	// Lines: a heartbeat log line per running step every Options.Every.
	Lines Mode = iota
	// Live: a redrawn line per running step below the log, on a terminal.
	Live
	// Off: nothing.
	Off
)

// DefaultEvery is the heartbeat interval: often enough for CI systems that kill a job
// silent for minutes, rare enough to keep a log readable.
const DefaultEvery = 30 * time.Second

// redrawEvery is how often the live lines are redrawn.
const redrawEvery = 250 * time.Millisecond

// Detect picks Live when w is a terminal with a width, CI is unset and TERM is not
// dumb; Lines otherwise.
func Detect(w io.Writer, getenv func(string) string) Mode {
	if getenv("CI") != "" || getenv("TERM") == "dumb" {
		return Lines
	}
	f, ok := w.(interface{ Fd() uintptr })
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return Lines
	}
	if termWidth(f.Fd()) <= 0 {
		return Lines
	}
	return Live
}

func termWidth(fd uintptr) int {
	ws, err := unix.IoctlGetWinsize(int(fd), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// Options configure a Display.
type Options struct {
	Mode Mode
	// Out is where live lines are drawn (the terminal the log goes to).
	Out io.Writer
	// Log receives the heartbeat lines (Lines mode).
	Log *log.Logger
	// Every is the heartbeat interval (default DefaultEvery).
	Every time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Display follows the running steps. Its methods are safe for concurrent use.
type Display struct {
	opts Options
	// live draws the running steps below the log (Live mode), one bar without a filler
	// per step, its line made by Line
	live *mpb.Progress

	mu     sync.Mutex
	steps  []*step
	stop   chan struct{}
	closed bool
}

type step struct {
	name, log string
	start     time.Time
	done      chan struct{}
	beat      sync.WaitGroup // the heartbeat goroutine
	bar       *mpb.Bar       // Live mode
}

// New starts a display; Close ends it.
func New(opts Options) *Display {
	if opts.Every <= 0 {
		opts.Every = DefaultEvery
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	if opts.Mode == Lines && opts.Log == nil {
		opts.Mode = Off
	}
	d := &Display{opts: opts, stop: make(chan struct{})}
	if opts.Mode == Live {
		d.live = mpb.New(mpb.WithOutput(opts.Out), mpb.WithRefreshRate(redrawEvery), mpb.WithAutoRefresh())
	}
	return d
}

// width is the terminal's width where Out is one, else 80.
func (d *Display) width() int {
	if f, ok := d.opts.Out.(interface{ Fd() uintptr }); ok {
		if w := termWidth(f.Fd()); w > 0 {
			return w
		}
	}
	return 80
}

// Step shows a step named name, running since since (zero: now), whose output goes to
// the file logPath, until the returned function is called.
func (d *Display) Step(name, logPath string, since time.Time) (done func()) {
	if since.IsZero() {
		since = d.opts.Now()
	}
	s := &step{name: name, log: logPath, start: since, done: make(chan struct{})}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return func() {}
	}
	d.steps = append(d.steps, s)
	if d.opts.Mode == Live {
		line := decor.Any(func(decor.Statistics) string {
			return Line(s.name, d.opts.Now().Sub(s.start), LastLine(s.log), d.width()-1)
		})
		s.bar = d.live.New(0, mpb.NopStyle(), mpb.PrependDecorators(line), mpb.BarFillerTrim(), mpb.BarRemoveOnComplete())
	}
	d.mu.Unlock()
	if d.opts.Mode == Lines {
		s.beat.Add(1)
		go d.heartbeat(s)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			close(s.done)
			s.beat.Wait() // no heartbeat for a step after it ended
			d.mu.Lock()
			for i, x := range d.steps {
				if x == s {
					d.steps = append(d.steps[:i], d.steps[i+1:]...)
					break
				}
			}
			d.mu.Unlock()
			if s.bar != nil {
				s.bar.Abort(true) // its line goes
			}
		})
	}
}

// heartbeat logs a line for s every interval while it runs.
func (d *Display) heartbeat(s *step) {
	defer s.beat.Done()
	t := time.NewTicker(d.opts.Every)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-d.stop:
			return
		case <-t.C:
			el := d.opts.Now().Sub(s.start)
			d.opts.Log.Info("still running", "step", s.name, "seconds", Seconds(el), "last", LastLine(s.log), "log", s.log)
		}
	}
}

// Writer is an io.Writer for the log while the display runs: in Live mode the log goes
// above the live lines (mpb prints it there at its next redraw), so that log lines and
// live lines never mix; after Close, straight to Out.
func (d *Display) Writer() io.Writer { return displayWriter{d} }

type displayWriter struct{ d *Display }

func (w displayWriter) Write(b []byte) (int, error) {
	if w.d.live != nil {
		n, err := w.d.live.Write(b)
		if !errors.Is(err, mpb.ErrDone) {
			return n, err
		}
	}
	return w.d.opts.Out.Write(b)
}

// Close stops the display and erases its live lines.
func (d *Display) Close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	running := slices.Clone(d.steps)
	d.mu.Unlock()
	close(d.stop)
	for _, s := range running {
		s.beat.Wait()
		if s.bar != nil {
			s.bar.Abort(true)
		}
	}
	if d.live != nil {
		d.live.Wait()
	}
}

// Line is one live line: the step, its elapsed time and the last line of its log,
// clipped to width runes.
func Line(name string, elapsed time.Duration, last string, width int) string {
	s := fmt.Sprintf("  %s  %s", name, Elapsed(elapsed))
	if last != "" {
		s += "  " + last
	}
	if r := []rune(s); width > 1 && len(r) > width {
		s = string(r[:width-1]) + "…"
	}
	return s
}

// Elapsed formats a duration as 7s, 1m05s or 1h02m03s.
func Elapsed(d time.Duration) string {
	s := int(d.Seconds())
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	return fmt.Sprintf("%dh%02dm%02ds", s/3600, s/60%60, s%60)
}

// Seconds is a duration in seconds, to a tenth: a number in JSON logs.
func Seconds(d time.Duration) float64 {
	return float64(d.Round(100*time.Millisecond)) / float64(time.Second)
}

// tailBytes is how much of the end of a log LastLine reads.
const tailBytes = 4096

// LastLine is the last non-empty line of the file at path, with what a terminal would
// overwrite (text before a carriage return) and escape sequences removed; "" when there
// is none.
func LastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-tailBytes, 0)
	buf := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(buf, off)
	lines := strings.Split(string(buf[:n]), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := lines[i]
		if j := strings.LastIndex(strings.TrimRight(l, "\r"), "\r"); j >= 0 {
			l = l[j+1:]
		}
		if l = strings.TrimSpace(clean(l)); l != "" {
			return l
		}
	}
	return ""
}

// clean drops ANSI escape sequences and other control characters, which would move the
// cursor inside the live block.
func clean(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == 0x1b:
			// CSI: ESC [ params final; other escapes: ESC and one byte
			if i+1 < len(s) && s[i+1] == '[' {
				i += 2
				for i < len(s) && (s[i] < 0x40 || s[i] > 0x7e) {
					i++
				}
			} else {
				i++
			}
		case c == '\t':
			b.WriteByte(' ')
		case c < 0x20 || c == 0x7f:
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
