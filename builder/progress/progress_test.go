package progress

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/charmbracelet/log"
	"github.com/creack/pty"
)

// syncBuffer is a bytes.Buffer safe for the display's goroutines and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls until cond holds; the deadline only ends a test that would hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func writeLog(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

func TestLastLine(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, log, want string }{
		{"plain", "a\nb\nlast one\n", "last one"},
		{"no newline", "a\nbuilding x", "building x"},
		{"blank lines after", "a\n[3/5] Building C object demo.o\n\n  \n", "[3/5] Building C object demo.o"},
		{"carriage returns", "a\n[1/9] cc a.c\r[2/9] cc b.c\r[3/9] cc c.c\n", "[3/9] cc c.c"},
		{"escapes", "\x1b[1m\x1b[32m[ 50%] Built target demo\x1b[0m\n", "[ 50%] Built target demo"},
		{"tabs and bell", "x\tyz\a\n", "x yz"},
		{"empty", "", ""},
		{"long log: only its end is read", strings.Repeat("early line\n", 2000) + "the end\n", "the end"},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := LastLine(p); got != tc.want {
			t.Errorf("%s: LastLine = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := LastLine(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("a missing log: %q", got)
	}
}

func TestLineAndElapsed(t *testing.T) {
	for d, want := range map[time.Duration]string{7 * time.Second: "7s", 65 * time.Second: "1m05s", 3723 * time.Second: "1h02m03s"} {
		if got := Elapsed(d); got != want {
			t.Errorf("Elapsed(%s) = %q, want %q", d, got, want)
		}
	}
	l := Line("build nvshmem 00-cmake", 65*time.Second, "[12/177] Building CUDA object src/x.cu.o", 40)
	if l != "  build nvshmem 00-cmake  1m05s  [12/17…" || len([]rune(l)) != 40 {
		t.Errorf("Line clipped to 40: %q (%d runes)", l, len([]rune(l)))
	}
	if s := Seconds(1234 * time.Millisecond); s != 1.2 {
		t.Errorf("Seconds = %v", s)
	}
}

// Lines mode: a heartbeat log line per running step, with its elapsed seconds (a JSON
// number), the last line of its log and the log's path; none after the step ended.
func TestHeartbeatLines(t *testing.T) {
	var logs syncBuffer
	l := log.NewWithOptions(&logs, log.Options{Formatter: log.JSONFormatter})
	d := New(Options{Mode: Lines, Log: l, Every: 10 * time.Millisecond})
	defer d.Close()
	lp := filepath.Join(t.TempDir(), "00-cmake.log")
	writeLog(t, lp, "$ cmake --build\n[1/3] Building C object a.o\n")
	done := d.Step("build libdemo 00-cmake", lp, time.Time{})
	waitFor(t, "a heartbeat", func() bool { return strings.Contains(logs.String(), "[1/3]") })
	writeLog(t, lp, "[2/3] Building C object b.o\n")
	waitFor(t, "a heartbeat with the new last line", func() bool { return strings.Contains(logs.String(), "[2/3]") })
	done()
	after := logs.String()
	for _, line := range strings.Split(strings.TrimSpace(after), "\n") {
		var rec struct {
			Msg     string  `json:"msg"`
			Step    string  `json:"step"`
			Seconds float64 `json:"seconds"`
			Last    string  `json:"last"`
			Log     string  `json:"log"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON record with a numeric seconds: %v: %s", err, line)
		}
		if rec.Msg != "still running" || rec.Step != "build libdemo 00-cmake" || rec.Log != lp || !strings.HasPrefix(rec.Last, "[") {
			t.Errorf("heartbeat %+v", rec)
		}
	}
	time.Sleep(50 * time.Millisecond) // five intervals
	if logs.String() != after {
		t.Errorf("heartbeats after the step ended:\n%s", strings.TrimPrefix(logs.String(), after))
	}
}

// Live mode: a line per running step below the log; a log line written meanwhile goes
// above the live lines, which are drawn again under it; Close erases them and nothing
// is drawn after it.
func TestLiveLines(t *testing.T) {
	var out syncBuffer
	d := New(Options{Mode: Live, Out: &out})
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	writeLog(t, a, "compiling a\n")
	writeLog(t, b, "linking b\n")
	doneA := d.Step("build a 00-cmake", a, time.Time{})
	doneB := d.Step("build b 00-command", b, time.Now().Add(-65*time.Second))
	lineA, lineB := "  build a 00-cmake  0s  compiling a\n", "  build b 00-command  1m05s  linking b\n"
	waitFor(t, "both live lines", func() bool {
		s := out.String()
		return strings.Contains(s, lineA+lineB)
	})
	if _, err := d.Writer().Write([]byte("INFO done stage=patch\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the log line above the live lines", func() bool {
		s := out.String()
		i := strings.Index(s, "INFO done stage=patch\n")
		return i >= 0 && strings.Contains(s[i:], lineA) && strings.Contains(s[i:], lineB)
	})
	got := out.String()
	if i := strings.Index(got, "INFO done stage=patch\n"); !strings.Contains(got[:i], "\x1b[J") {
		t.Errorf("the live lines were not erased before the log line: %q", got[:i])
	}
	doneA()
	doneB()
	d.Close()
	end := out.String()
	if !strings.HasSuffix(end, "A\x1b[J") {
		t.Errorf("the live lines are not erased at the end: %q", end[max(0, len(end)-40):])
	}
	n := len(end)
	time.Sleep(3 * redrawEvery)
	if len(out.String()) != n {
		t.Errorf("the display drew after Close")
	}
	// the log goes straight to Out once the display is closed
	if _, err := d.Writer().Write([]byte("after\n")); err != nil || !strings.HasSuffix(out.String(), "after\n") {
		t.Errorf("a write after Close: %v, %q", err, out.String()[n:])
	}
}

// Detect: live lines on a terminal with a width (a real pseudo-terminal), never in CI,
// on a dumb terminal, on a terminal of no width, or without a terminal.
func TestDetect(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	file, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for _, tc := range []struct {
		name string
		w    io.Writer
		env  func(string) string
		want Mode
	}{
		{"terminal", tty, env("TERM", "xterm"), Live},
		{"terminal in CI", tty, env("CI", "true"), Lines},
		{"dumb terminal", tty, env("TERM", "dumb"), Lines},
		{"file", file, env(), Lines},
		{"buffer", &bytes.Buffer{}, env(), Lines},
	} {
		if got := Detect(tc.w, tc.env); got != tc.want {
			t.Errorf("%s: Detect = %v, want %v", tc.name, got, tc.want)
		}
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 0}); err != nil {
		t.Fatal(err)
	}
	if got := Detect(tty, env()); got != Lines {
		t.Errorf("a terminal of no width: Detect = %v, want Lines", got)
	}
}
