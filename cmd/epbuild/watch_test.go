package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
)

// epbuildProcess is epbuild as a process of its own (the test binary, see TestMain),
// with env on top of this test's environment.
func epbuildProcess(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	c := exec.Command(os.Args[0], args...)
	c.Env = append(append(os.Environ(), "EPBUILD_TEST_MAIN=1", "GORACE=atexit_sleep_ms=0", "TMPDIR="+t.TempDir()), env...)
	return c
}

// slowRecipe writes a recipe whose build step runs until the file ctl/go appears,
// printing a tick a line (tick 0 before the pids are all written, so that a test that
// waits for them finds output in the log), with a grandchild (a long sleep) in the background; both
// record their pids in ctl. variant makes a recipe with another build key.
func slowRecipe(t *testing.T, dir, ctl, variant string) {
	t.Helper()
	script := `echo $$ > "$CTL/sh.pid.tmp" && mv "$CTL/sh.pid.tmp" "$CTL/sh.pid"; ` +
		`echo "tick 0"; sleep 300 & echo $! > "$CTL/sleep.pid.tmp" && mv "$CTL/sleep.pid.tmp" "$CTL/sleep.pid"; ` +
		`i=0; while [ ! -e "$CTL/go" ]; do i=$((i+1)); echo "tick $i"; sleep 0.05; done; kill $!; echo finished`
	body := fmt.Sprintf(`name: slow-%[1]s
cluster: test
description: a build step that runs until it is told to stop
components:
  - name: libdemo
    version: 1.0.0
    source:
      git:
        url: https://epbuild.invalid/demo/libdemo
        commit: ab8d30a0c03d891912863703b1244059af07daf9
        ref: v1.0.0
    build:
      - cmake:
          options:
            CMAKE_C_FLAGS: "-O0"
      - command:
          env:
            CTL: %[2]q
            VARIANT: %[1]s
          run: [sh, -c, %[3]q]
`, variant, ctl, script)
	if err := os.WriteFile(filepath.Join(dir, "slow-"+variant+".yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// alive reports whether process pid still runs (a zombie has ended: the init of a
// container may never reap what it inherits).
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
	for end := time.Now().Add(90 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
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
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// syncBuffer collects a process's output while the test reads it.
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

// slowBuild starts epbuild recipe slow-<variant> with its cache in cacheDir and waits
// until its build step runs; it returns the process, its stderr and the step's pids.
func slowBuild(t *testing.T, cacheDir, variant string, extra ...string) (*exec.Cmd, *syncBuffer, int, int) {
	b := startSlow(t, cacheDir, variant, extra...)
	return b.cmd, b.stderr, b.sh, b.sleep
}

type slow struct {
	cmd       *exec.Cmd
	stderr    *syncBuffer
	ctl       string
	sh, sleep int
}

func startSlow(t *testing.T, cacheDir, variant string, extra ...string) slow {
	t.Helper()
	rdir, ctl := t.TempDir(), t.TempDir()
	slowRecipe(t, rdir, ctl, variant)
	args := append([]string{"--recipe-dir", rdir, "recipe", "slow-" + variant, "-o", t.TempDir()}, extra...)
	c := epbuildProcess(t, []string{"EPBUILD_CACHE=" + cacheDir, "CI=1"}, args...)
	var errb syncBuffer
	c.Stdout, c.Stderr = io.Discard, &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.WriteFile(filepath.Join(ctl, "go"), nil, 0o644)
		if c.ProcessState == nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	})
	return slow{c, &errb, ctl, readPid(t, filepath.Join(ctl, "sh.pid")), readPid(t, filepath.Join(ctl, "sleep.pid"))}
}

var logPathRe = regexp.MustCompile(`its log so far: (\S+\.log)`)

// Ctrl-C stops the build: the step and its grandchild end, the stage's temporary
// directories go, the step's log stays where the message says, and the exit code is
// 130, not a failed step's 1.
func TestInterruptStopsTheBuild(t *testing.T) {
	cacheDir := t.TempDir()
	c, errb, sh, sleep := slowBuild(t, cacheDir, "int")
	if err := c.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := c.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after SIGINT: %v, want exit 130\n%s", err, errb.String())
	}
	stderr := errb.String()
	m := logPathRe.FindStringSubmatch(stderr)
	if !strings.Contains(stderr, "step 01-command stopped: interrupted by SIGINT") || m == nil || strings.Contains(stderr, "signal: killed") {
		t.Fatalf("stderr:\n%s", stderr)
	}
	if b, err := os.ReadFile(m[1]); err != nil || !strings.Contains(string(b), "tick 0\n") {
		t.Errorf("the step's log %s: %v %q", m[1], err, b)
	}
	if !strings.HasPrefix(m[1], filepath.Join(cacheDir, "logs")+"/") {
		t.Errorf("the log is not kept under the cache: %s", m[1])
	}
	for _, pid := range []int{sh, sleep} {
		if alive(pid) {
			t.Errorf("process %d outlived epbuild", pid)
		}
	}
	if des, _ := os.ReadDir(filepath.Join(cacheDir, "tmp")); len(des) != 0 {
		t.Errorf("temporary directories left: %v", des)
	}
}

// epbuild killed by SIGKILL cleans nothing up, but nothing it started lives on: the
// step (the kernel's parent-death signal) and its grandchild (the group's watcher).
func TestKilledEpbuildLeavesNoChild(t *testing.T) {
	c, errb, sh, sleep := slowBuild(t, t.TempDir(), "kill")
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = c.Wait()
	waitUntil(t, fmt.Sprintf("the step (%d) and its grandchild (%d) to end after epbuild was killed\n%s", sh, sleep, errb.String()),
		func() bool { return !alive(sh) && !alive(sleep) })
}

// In CI (no terminal) a log line per running step every --heartbeat, with the step, its
// elapsed seconds and its log's last line; with --log-format json every stderr line is
// one JSON object with an RFC 3339 time and numbers as numbers, the final error too.
func TestHeartbeatInCI(t *testing.T) {
	cacheDir := t.TempDir()
	c, errb, _, _ := slowBuild(t, cacheDir, "beat", "--heartbeat", "50ms")
	waitUntil(t, "two heartbeats of the waiting step", func() bool { return strings.Count(errb.String(), `01-command"`) >= 2 })
	_ = c.Process.Signal(syscall.SIGTERM)
	_ = c.Wait()
	if c.ProcessState.ExitCode() != 130 {
		t.Errorf("after SIGTERM: exit %d", c.ProcessState.ExitCode())
	}
	if !regexp.MustCompile(`INFO still running step="build libdemo 01-command" seconds=[0-9.]+ last="tick [0-9]+" log=`).MatchString(errb.String()) {
		t.Errorf("no heartbeat line:\n%s", errb.String())
	}

	c, errb, _, _ = slowBuild(t, cacheDir, "beat", "--heartbeat", "50ms", "--log-format", "json")
	waitUntil(t, "two heartbeats of the waiting step", func() bool { return strings.Count(errb.String(), `01-command"`) >= 2 })
	_ = c.Process.Signal(syscall.SIGINT)
	_ = c.Wait()
	lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
	beats := 0
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("stderr line is not JSON: %q\n%s", l, errb.String())
		}
		ts, _ := rec["time"].(string)
		if _, err := time.Parse(time.RFC3339, ts); err != nil {
			t.Errorf("time %q is not RFC 3339: %s", ts, l)
		}
		if s, ok := rec["seconds"]; ok {
			if _, num := s.(float64); !num {
				t.Errorf("seconds is not a number: %s", l)
			}
		}
		if rec["msg"] == "still running" && rec["step"] == "build libdemo 01-command" {
			beats++
		}
	}
	last := map[string]any{}
	_ = json.Unmarshal([]byte(lines[len(lines)-1]), &last)
	if beats < 2 || last["level"] != "error" || last["code"] != "interrupted" || last["exit_code"] != float64(130) {
		t.Errorf("%d heartbeats; the last record %v", beats, last)
	}
}

// On a terminal (a real pseudo-terminal) a live line per running step: the step, its
// elapsed time and the last line of its log, redrawn in place; no heartbeat lines.
func TestLiveLinesOnATerminal(t *testing.T) {
	rdir, ctl := t.TempDir(), t.TempDir()
	slowRecipe(t, rdir, ctl, "tty")
	c := epbuildProcess(t, []string{"EPBUILD_CACHE=" + t.TempDir(), "CI=", "TERM=xterm", "NO_COLOR=1"},
		"--recipe-dir", rdir, "recipe", "slow-tty", "-o", t.TempDir(), "--heartbeat", "50ms")
	ptmx, err := pty.StartWithSize(c, &pty.Winsize{Rows: 40, Cols: 120})
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	defer ptmx.Close()
	var out syncBuffer
	copied := make(chan struct{})
	go func() {
		_, _ = io.Copy(&out, bufio.NewReader(ptmx)) // ends with EIO when the process exits
		close(copied)
	}()
	// mpb redraws the block: cursor up over the last one, erase, the lines again
	live := regexp.MustCompile(`(^|\n|\x1b\[J)  build libdemo 01-command  [0-9]+s  tick [0-9]+\r?\n`)
	waitUntil(t, "a live line on the terminal", func() bool { return len(live.FindAllString(out.String(), -1)) >= 2 })
	if err := os.WriteFile(filepath.Join(ctl, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("epbuild on a terminal: %v\n%q", err, out.String())
	}
	<-copied
	s := out.String()
	if strings.Contains(s, "still running") {
		t.Errorf("heartbeat lines on a terminal")
	}
	if !strings.Contains(s, "artifact ") || !strings.Contains(s, "\x1b[J") {
		t.Errorf("terminal output:\n%q", s)
	}
}

func names(t *testing.T, dir string) map[string]bool {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range des {
		out[d.Name()] = true
	}
	return out
}

// What killed runs left (their temporary build directories, their logs) goes with cache
// gc --older-than 0s, while a build running at the same time keeps its temporary
// directories, its log and the stage outputs it uses, and then completes; once it has,
// gc --older-than 0s leaves no stage output, temporary directory or log.
func TestCacheGCAfterKilledRuns(t *testing.T) {
	cacheDir := t.TempDir()
	env := nodeEnv("EPBUILD_CACHE", cacheDir)
	for range 2 {
		c, _, _, _ := slowBuild(t, cacheDir, "killed")
		_ = c.Process.Signal(syscall.SIGKILL)
		_ = c.Wait()
	}
	// the second run removed what the first left (its lock was free) and left its own
	killedTmp, killedLogs := names(t, filepath.Join(cacheDir, "tmp")), names(t, filepath.Join(cacheDir, "logs"))
	if len(killedTmp) != 1 || len(killedLogs) < 1 {
		t.Fatalf("the killed runs left %v and logs %v", killedTmp, killedLogs)
	}
	running := startSlow(t, cacheDir, "running")
	runTmp, runLogs := names(t, filepath.Join(cacheDir, "tmp")), names(t, filepath.Join(cacheDir, "logs"))
	for n := range killedTmp {
		delete(runTmp, n)
	}
	for n := range killedLogs {
		delete(runLogs, n)
	}
	// the stage's temporary directory (its build directory is in the build root, /tmp)
	if len(runTmp) != 1 || len(runLogs) != 1 {
		t.Fatalf("the running build has %v, logs %v", runTmp, runLogs)
	}

	code, out, errs := run(t, env, "cache", "gc", "--older-than", "0s", "--json")
	var rep struct {
		Removed []struct{ Kind, Name string }      `json:"removed"`
		Kept    []struct{ Kind, Name, Why string } `json:"kept"`
		Freed   int64                              `json:"freed"`
	}
	if err := json.Unmarshal([]byte(out), &rep); code != 0 || err != nil {
		t.Fatalf("cache gc: exit %d %v\n%s\n%s", code, err, out, errs)
	}
	tmpNow, logsNow := names(t, filepath.Join(cacheDir, "tmp")), names(t, filepath.Join(cacheDir, "logs"))
	if fmt.Sprint(tmpNow) != fmt.Sprint(runTmp) || fmt.Sprint(logsNow) != fmt.Sprint(runLogs) {
		t.Errorf("after gc: tmp %v (the running build's: %v), logs %v (%v)\n%s", tmpNow, runTmp, logsNow, runLogs, out)
	}
	keptPatch := false
	for _, k := range rep.Kept {
		keptPatch = keptPatch || k.Kind == "stages" && strings.HasPrefix(k.Name, "patch/") && k.Why == "in use by a run in progress"
	}
	if !keptPatch || rep.Freed <= 0 {
		t.Errorf("gc report: %s", out)
	}

	if err := os.WriteFile(filepath.Join(running.ctl, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := running.cmd.Wait(); err != nil {
		t.Fatalf("the build that ran during gc: %v\n%s", err, running.stderr.String())
	}
	if code, out, errs := run(t, env, "cache", "gc", "--older-than", "0s"); code != 0 || !strings.Contains(out, "removed stages build/") {
		t.Fatalf("cache gc: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = run(t, env, "cache", "du", "--json")
	var du struct {
		Kinds []struct {
			Kind    string `json:"kind"`
			Entries int    `json:"entries"`
		} `json:"kinds"`
	}
	if err := json.Unmarshal([]byte(out), &du); code != 0 || err != nil || len(du.Kinds) != 5 {
		t.Fatalf("cache du: exit %d %v\n%s", code, err, out)
	}
	for _, k := range du.Kinds {
		if k.Entries != 0 {
			t.Errorf("after the last gc: %s has %d entries", k.Kind, k.Entries)
		}
	}
}
