package stage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// alive reports whether process pid still runs (a zombie has ended: this machine's init
// may never reap what it inherits).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// waitUntil polls cond; the deadline only ends a test that would hang.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	var pid int
	waitUntil(t, path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.HasSuffix(b, []byte("\n")) {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// spawner is a step that starts a long sleep in the background (a grandchild, as ninja
// is cmake's), records both pids, and then does what tail says.
func spawner(ctl, tail string) []string {
	return []string{"sh", "-c", `echo $$ > "$1/sh.pid"; sleep 300 & echo $! > "$1/sleep.pid"; ` + tail, "step", ctl}
}

// Cancelling a step's context stops the step and what it started, and says the step
// was stopped (not that it failed), naming its log, which is kept.
func TestStepStoppedWithItsGrandchildren(t *testing.T) {
	s := newTestStep(t, false)
	ctl := t.TempDir()
	ctx, cancel := context.WithCancelCause(context.Background())
	errc := make(chan error, 1)
	argv := spawner(ctl, `echo waiting; wait`)
	go func() { errc <- s.run(ctx, "00-command", s.src, s.env, argv[0], argv[1:]...) }()
	sh, sleep := readPid(t, filepath.Join(ctl, "sh.pid")), readPid(t, filepath.Join(ctl, "sleep.pid"))
	why := errors.New("interrupted by SIGINT")
	cancel(why)
	err := <-errc
	var be *BuildError
	if !errors.As(err, &be) || !be.Stopped || !errors.Is(err, why) {
		t.Fatalf("stopped step: %v", err)
	}
	if !strings.Contains(err.Error(), "stopped: interrupted by SIGINT; its log so far: "+be.Log) {
		t.Errorf("message: %v", err)
	}
	if b, _ := os.ReadFile(be.Log); !strings.Contains(string(b), "waiting") {
		t.Errorf("log %s: %q", be.Log, b)
	}
	waitUntil(t, "the step and its grandchild to end", func() bool { return !alive(sh) && !alive(sleep) })
}

// A step that ends leaving a process behind in its group: that process is killed.
func TestStepLeavesNothingRunning(t *testing.T) {
	s := newTestStep(t, false)
	ctl := t.TempDir()
	argv := spawner(ctl, `echo left it`)
	if err := s.run(context.Background(), "00-command", s.src, s.env, argv[0], argv[1:]...); err != nil {
		t.Fatal(err)
	}
	sleep := readPid(t, filepath.Join(ctl, "sleep.pid"))
	waitUntil(t, "the left-behind sleep to end", func() bool { return !alive(sleep) })
}

// A failed step's error names its whole log (kept), with the first error lines and the
// last 40 lines in the message; a program that is not there is named as such.
func TestStepFailureKeepsTheWholeLog(t *testing.T) {
	s := newTestStep(t, false)
	script := `i=0; while [ $i -lt 100 ]; do i=$((i+1)); echo "line $i"; [ $i = 7 ] && echo "x.c:1: error: early"; done; exit 3`
	err := s.run(context.Background(), "00-command", s.src, s.env, "sh", "-c", script)
	var be *BuildError
	if !errors.As(err, &be) || be.Stopped || be.ExitCode() != 1 {
		t.Fatalf("failed step: %v", err)
	}
	b, rerr := os.ReadFile(be.Log)
	if rerr != nil || !strings.Contains(string(b), "line 1\n") || !strings.Contains(string(b), "line 100\n") {
		t.Fatalf("the whole log is not at %s: %v", be.Log, rerr)
	}
	if !strings.Contains(be.Tail, "x.c:1: error: early") || !strings.Contains(be.Tail, "line 100") || strings.Contains(be.Tail, "line 50\n") {
		t.Errorf("tail:\n%s", be.Tail)
	}
	err = s.run(context.Background(), "01-command", s.src, s.env, "no-such-program-here")
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "no-such-program-here not found on PATH") {
		t.Errorf("missing program: %v", err)
	}
}

// The watcher sees each command of a step while it runs, each with the time the step's
// first command started (a cmake step runs three).
func TestStepWatched(t *testing.T) {
	s := newTestStep(t, false)
	w := &recordingWatcher{}
	s.watch = w
	for _, step := range []string{"00-cmake", "00-cmake", "01-command"} {
		if err := s.run(context.Background(), step, s.src, s.env, "true"); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"build fixture 00-cmake " + filepath.Join(s.logs, "00-cmake.log"), "build fixture 00-cmake " + filepath.Join(s.logs, "00-cmake.log"),
		"build fixture 01-command " + filepath.Join(s.logs, "01-command.log")}
	if fmt.Sprint(w.steps) != fmt.Sprint(want) || w.ended != 3 {
		t.Errorf("watched %v, ended %d", w.steps, w.ended)
	}
	if !w.since[0].Equal(w.since[1]) || !w.since[2].After(w.since[1]) {
		t.Errorf("since %v", w.since)
	}
}

type recordingWatcher struct {
	steps []string
	since []time.Time
	ended int
}

func (w *recordingWatcher) Step(name, log string, since time.Time) func() {
	w.steps = append(w.steps, name+" "+log)
	w.since = append(w.since, since)
	return func() { w.ended++ }
}
