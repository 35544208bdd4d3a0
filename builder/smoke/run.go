// Package smoke runs epbuild's NVSHMEM smoke test on this node and reads what its ranks
// printed. The test is the embedded tools/nvshmem-smoke program, which every DeepEP
// recipe builds against the NVSHMEM its DeepEP links and installs as
// bin/epbuild-nvshmem-smoke: one process per PE, rank 0 makes the unique ID and hands it
// to the others through a file, and each rank reports its steps (unique ID, init,
// version, symmetric malloc, device put, barrier, DeepEP's team split) as
//
//	STEP <rank> <name> <ok|fail|skip> <milliseconds> <detail>
//	DONE <rank> <failed steps>
//
// Run starts the ranks and owns their lifetime: each runs in a process group of its own
// that is killed at the deadline, a short while after another rank failed, or when the
// context ends, so no rank (nor anything it started) outlives the run. Results turns the
// ranks' lines into check results, one per step, each with its fix.
package smoke

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Binary is the program's file name under the component's bin/.
const Binary = "epbuild-nvshmem-smoke"

// DefaultTimeout bounds a whole run when the caller gives no deadline. NVSHMEM's
// unique-ID init took 0.8 s for one PE on one H100; a node of eight PEs whose bootstrap
// cannot connect waits in init until the deadline, so it must end in minutes, not hang.
const DefaultTimeout = 2 * time.Minute

// defaultGrace is how long the other ranks may go on after one failed: a rank whose
// peer is gone waits in the bootstrap or a barrier until the deadline otherwise.
const defaultGrace = 5 * time.Second

// Options say what to run.
type Options struct {
	// Binary is the smoke program.
	Binary string
	// PEs is the number of processes; 0 means one per CUDA device the program sees
	// (its --devices, under Env: CUDA_VISIBLE_DEVICES counts).
	PEs int
	// Timeout bounds the whole run (0: DefaultTimeout). The ranks get a slightly
	// shorter --timeout of their own, so that a stuck rank names its step itself.
	Timeout time.Duration
	// Env is every rank's whole environment.
	Env []string
	// Grace is how long the other ranks may go on after one failed (0: 5 s).
	Grace time.Duration
}

// How epbuild ended a rank (Rank.Stopped).
const (
	StopDeadline = "deadline"
	StopPeer     = "peer"
	StopCancel   = "cancelled"
)

// Rank is what one rank printed and how it ended.
type Rank struct {
	Rank  int    `json:"rank"`
	Steps []Step `json:"steps"`
	// Done is whether the rank printed its DONE line; Failed is that line's count.
	Done   bool `json:"done"`
	Failed int  `json:"failed"`
	// Exit is how the process ended ("exit status 1", "signal: killed"); ExitCode is
	// -1 for a signal.
	Exit     string `json:"exit"`
	ExitCode int    `json:"exit_code"`
	// Stopped says why epbuild killed it: StopDeadline, StopPeer (another rank had
	// failed) or StopCancel; "" when it ended by itself.
	Stopped string `json:"stopped,omitempty"`
	// Stderr is the end of what it wrote on stderr (NVSHMEM's messages).
	Stderr string `json:"stderr,omitempty"`
	// Other holds the last stdout lines that are neither STEP nor DONE.
	Other []string `json:"other,omitempty"`
}

// Report is one run of the smoke test.
type Report struct {
	Binary string `json:"binary"`
	PEs    int    `json:"pes"`
	// Devices is what --devices printed; -1 when the caller gave the number of PEs.
	Devices int           `json:"devices"`
	Timeout time.Duration `json:"timeout_ns"`
	Elapsed time.Duration `json:"elapsed_ns"`
	Ranks   []Rank        `json:"ranks"`
}

// StartError is a smoke test that could not run at all: no program, no GPU, a
// program the loader cannot start.
type StartError struct {
	What   string
	Err    error
	Stderr string
}

func (e *StartError) Error() string {
	s := e.What
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	if m := Message(e.Stderr); m != "" {
		s += "; stderr: " + m
	}
	return s
}

func (e *StartError) Unwrap() error { return e.Err }

// Run starts the ranks, waits for them within the deadline and returns what each
// printed. The error is a StartError (nothing ran) or the context's.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Grace <= 0 {
		o.Grace = defaultGrace
	}
	if st, err := os.Stat(o.Binary); err != nil {
		return nil, &StartError{What: "the smoke test " + o.Binary, Err: err}
	} else if st.IsDir() || st.Mode()&0o111 == 0 {
		return nil, &StartError{What: "the smoke test " + o.Binary, Err: errors.New("not an executable file")}
	}
	start := time.Now()
	deadline := start.Add(o.Timeout)
	rep := &Report{Binary: o.Binary, PEs: o.PEs, Devices: -1, Timeout: o.Timeout}
	if o.PEs <= 0 {
		n, err := Devices(ctx, o.Binary, o.Env, time.Until(deadline))
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, &StartError{What: o.Binary + " --devices sees no CUDA device",
				Err: errors.New("no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them")}
		}
		rep.PEs, rep.Devices = n, n
	}
	dir, err := os.MkdirTemp("", "epbuild-smoke-")
	if err != nil {
		return nil, &StartError{What: "a directory for the unique ID", Err: err}
	}
	defer os.RemoveAll(dir)
	rep.Ranks, err = runRanks(ctx, o, rep.PEs, filepath.Join(dir, "uid"), deadline)
	rep.Elapsed = time.Since(start)
	return rep, err
}

// programTimeout is the ranks' own --timeout, in whole seconds: a little under the
// run's, so that a rank stuck in a step reports it before it is killed.
func programTimeout(d time.Duration) int {
	n := int((d - min(10*time.Second, d/5)).Seconds())
	return max(n, 1)
}

type proc struct {
	cmd    *exec.Cmd
	out    lineSink
	errs   tailBuffer
	waited error
}

func runRanks(ctx context.Context, o Options, n int, uidFile string, deadline time.Time) ([]Rank, error) {
	procs := make([]*proc, n)
	done := make(chan int, n)
	running := 0
	stopped := make([]string, n)
	finished := make([]bool, n)
	stop := func(why string) {
		for i, p := range procs {
			if p != nil && !finished[i] && stopped[i] == "" {
				stopped[i] = why
				killGroup(p.cmd)
			}
		}
	}
	for i := range n {
		p := &proc{}
		p.cmd = exec.Command(o.Binary, "--rank", strconv.Itoa(i), "--npes", strconv.Itoa(n), "--local-pes", strconv.Itoa(n),
			"--uid-file", uidFile, "--timeout", strconv.Itoa(programTimeout(time.Until(deadline))))
		p.cmd.Env, p.cmd.Dir = o.Env, filepath.Dir(uidFile)
		p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.errs
		// a rank whose descendants keep its pipes open must not hold Wait forever
		p.cmd.WaitDelay = 2 * time.Second
		ownGroup(p.cmd)
		if err := p.cmd.Start(); err != nil {
			stop(StopCancel)
			for range running {
				<-done
			}
			return nil, &StartError{What: fmt.Sprintf("start rank %d of %s", i, o.Binary), Err: err}
		}
		procs[i] = p
		running++
		go func() {
			p.waited = p.cmd.Wait()
			// what the rank started goes with it
			killGroup(p.cmd)
			done <- i
		}()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var grace <-chan time.Time
	cancelled := ctx.Done()
	for running > 0 {
		select {
		case i := <-done:
			running--
			finished[i] = true
			if grace == nil && rankFailed(procs[i]) {
				grace = time.After(o.Grace)
			}
		case <-grace:
			stop(StopPeer)
		case <-timer.C:
			stop(StopDeadline)
		case <-cancelled:
			stop(StopCancel)
			cancelled = nil
		}
	}
	ranks := make([]Rank, n)
	for i, p := range procs {
		r := Rank{Rank: i, Stopped: stopped[i], Stderr: p.errs.String()}
		r.Steps, r.Done, r.Failed, r.Other = p.out.parse(i)
		r.Exit, r.ExitCode = exitOf(p.cmd, p.waited)
		ranks[i] = r
	}
	return ranks, ctx.Err()
}

// rankFailed reports whether a finished rank failed: a non-zero exit, a failed step,
// or no DONE line.
func rankFailed(p *proc) bool {
	if p.waited != nil {
		return true
	}
	_, done, failed, _ := p.out.parse(-1)
	return !done || failed > 0
}

func exitOf(cmd *exec.Cmd, waited error) (string, int) {
	if ps := cmd.ProcessState; ps != nil {
		return ps.String(), ps.ExitCode()
	}
	if waited != nil {
		return waited.Error(), -1
	}
	return "unknown", -1
}

// Devices runs the program's --devices with env, within timeout, and returns the
// number of CUDA devices it sees.
func Devices(ctx context.Context, binary string, env []string, timeout time.Duration) (int, error) {
	cmd := exec.Command(binary, "--devices")
	var out bytes.Buffer
	var errs tailBuffer
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &errs
	cmd.WaitDelay = 2 * time.Second
	ownGroup(cmd)
	if err := cmd.Start(); err != nil {
		return 0, &StartError{What: "start " + binary + " --devices", Err: err}
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait(); killGroup(cmd) }()
	timer := time.NewTimer(max(timeout, time.Second))
	defer timer.Stop()
	var err error
	select {
	case err = <-waited:
	case <-timer.C:
		killGroup(cmd)
		<-waited
		return 0, &StartError{What: binary + " --devices", Err: errors.New("did not answer before the deadline"), Stderr: errs.String()}
	case <-ctx.Done():
		killGroup(cmd)
		<-waited
		return 0, ctx.Err()
	}
	if err != nil {
		return 0, &StartError{What: binary + " --devices", Err: err, Stderr: errs.String()}
	}
	lines := strings.Fields(out.String())
	if len(lines) == 0 {
		return 0, &StartError{What: binary + " --devices", Err: errors.New("printed nothing"), Stderr: errs.String()}
	}
	n, perr := strconv.Atoi(lines[len(lines)-1])
	if perr != nil || n < 0 {
		return 0, &StartError{What: binary + " --devices", Err: fmt.Errorf("printed %q, not a number of devices", lines[len(lines)-1])}
	}
	return n, nil
}

// The limits on what is kept of a rank's output: its STEP and DONE lines (a few dozen),
// the last other stdout lines (NVSHMEM_DEBUG can print thousands), its stderr's end.
const (
	maxProtocolLines = 256
	maxOtherLines    = 20
	maxLine          = 4096
	maxStderr        = 16 << 10
)

// lineSink keeps a rank's protocol lines and the last of its other stdout lines.
type lineSink struct {
	mu      sync.Mutex
	partial []byte
	proto   []string
	other   []string
}

func (s *lineSink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(b)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if len(s.partial) < maxLine {
				s.partial = append(s.partial, b[:min(len(b), maxLine-len(s.partial))]...)
			}
			break
		}
		line := append(s.partial, b[:min(i, maxLine)]...)
		s.partial = nil
		s.add(string(line))
		b = b[i+1:]
	}
	return n, nil
}

func (s *lineSink) add(line string) {
	line = strings.TrimRight(line, "\r")
	if (strings.HasPrefix(line, "STEP ") || strings.HasPrefix(line, "DONE ")) && len(s.proto) < maxProtocolLines {
		s.proto = append(s.proto, line)
		return
	}
	if strings.TrimSpace(line) == "" {
		return
	}
	s.other = append(s.other, line)
	if len(s.other) > maxOtherLines {
		s.other = s.other[len(s.other)-maxOtherLines:]
	}
}

// parse reads the kept lines as rank's (any rank for -1); an unfinished last line
// counts, since a rank killed mid-line leaves one.
func (s *lineSink) parse(rank int) (steps []Step, done bool, failed int, other []string) {
	s.mu.Lock()
	lines := append([]string(nil), s.proto...)
	other = append([]string(nil), s.other...)
	if len(s.partial) > 0 {
		lines = append(lines, string(s.partial))
	}
	s.mu.Unlock()
	var buf strings.Builder
	for _, l := range lines {
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	out := Parse(strings.NewReader(buf.String()), rank)
	return out.Steps, out.Done, out.Failed, append(other, out.Other...)
}

// tailBuffer keeps the last maxStderr bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > maxStderr {
		t.buf = append([]byte(nil), t.buf[len(t.buf)-maxStderr:]...)
	}
	return len(b), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// Output is what Parse read from one rank's stdout.
type Output struct {
	Steps  []Step
	Done   bool
	Failed int
	// Other holds lines that are not the rank's STEP or DONE lines.
	Other []string
}

// Step is one STEP line.
type Step struct {
	Name   string  `json:"name"`
	Status string  `json:"status"`
	MS     float64 `json:"ms"`
	Detail string  `json:"detail,omitempty"`
}

// Parse reads one rank's stdout: its STEP lines in order and its DONE line. Lines of
// another rank (rank >= 0), malformed ones and anything else are kept in Other.
func Parse(r io.Reader, rank int) Output {
	var out Output
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if st, ok := parseStep(line, rank); ok {
			out.Steps = append(out.Steps, st)
			continue
		}
		if failed, ok := parseDone(line, rank); ok {
			out.Done, out.Failed = true, failed
			continue
		}
		if strings.TrimSpace(line) != "" {
			out.Other = append(out.Other, line)
		}
	}
	return out
}

// parseStep reads "STEP <rank> <name> <ok|fail|skip> <ms> <detail>" (the detail may be
// empty, its separator too).
func parseStep(line string, rank int) (Step, bool) {
	f := strings.SplitN(line, " ", 6)
	if len(f) < 5 || f[0] != "STEP" {
		return Step{}, false
	}
	r, err := strconv.Atoi(f[1])
	if err != nil || rank >= 0 && r != rank {
		return Step{}, false
	}
	switch f[3] {
	case "ok", "fail", "skip":
	default:
		return Step{}, false
	}
	ms, err := strconv.ParseFloat(f[4], 64)
	if err != nil || f[2] == "" {
		return Step{}, false
	}
	st := Step{Name: f[2], Status: f[3], MS: ms}
	if len(f) == 6 {
		st.Detail = strings.TrimSpace(f[5])
	}
	return st, true
}

// parseDone reads "DONE <rank> <failed>".
func parseDone(line string, rank int) (int, bool) {
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != "DONE" {
		return 0, false
	}
	r, err := strconv.Atoi(f[1])
	if err != nil || rank >= 0 && r != rank {
		return 0, false
	}
	n, err := strconv.Atoi(f[2])
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// Message is the end of a rank's stderr, as one line: the last few non-empty lines,
// where NVSHMEM says why it exited ("[team.cu:64] Called NVSHMEM API not supported with
// limited MPG ...").
func Message(stderr string) string {
	var lines []string
	for _, l := range strings.Split(stderr, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return clip(strings.Join(lines, " | "), 400)
}

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
