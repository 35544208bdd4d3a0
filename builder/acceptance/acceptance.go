// Package acceptance runs the tests a recipe declares and the artifact carries
// (`epbuild test`), the acceptance test a cluster admin runs after an install: each test
// is a program started in its component's tests/ directory with the install's runtime
// env, in a process group of its own that is killed at its deadline (builder/procgroup),
// so nothing it started outlives it. It passes when it exits 0 in time. Its output is
// read line by line, never held whole: the recipe's bandwidth patterns are matched on
// each line, and the last lines are kept to say why a test failed.
package acceptance

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/epbuild/epbuild/builder/procgroup"
	"github.com/epbuild/epbuild/recipes"
)

// Status of a test.
const (
	Pass   = "pass"
	Fail   = "fail"
	NotRun = "not-run"
)

// Pattern is a named bandwidth pattern: a regular expression with a group named gbps,
// matched on every line, or, with Label, only on the line right after one Label matches
// (recipes.BandwidthPattern).
type Pattern struct {
	Name  string
	Re    *regexp.Regexp
	Label *regexp.Regexp
}

// Patterns compiles a test's bandwidths as the recipe declares them, in name order; the
// error names the bandwidth whose pattern does not compile.
func Patterns(bw map[string]recipes.BandwidthPattern) ([]Pattern, error) {
	out := make([]Pattern, 0, len(bw))
	for _, name := range slices.Sorted(maps.Keys(bw)) {
		label, re, err := bw[name].Compile()
		if err != nil {
			return nil, fmt.Errorf("bandwidth %s: %w", name, err)
		}
		out = append(out, Pattern{Name: name, Re: re, Label: label})
	}
	return out, nil
}

// Test is one declared test, ready to run.
type Test struct {
	Component string
	Name      string
	// Dir is where it runs: the component's tests/ in the install.
	Dir string
	// Argv is the program and its arguments, {{procs}} not yet expanded.
	Argv []string
	// Nodes is how many nodes it needs (at least 1).
	Nodes int
	// Needs names what the node must have (recipes.TestRun.Needs: rdma).
	Needs []string
	// Env is added to Options.Env for this test ("KEY=VALUE"; it wins over the same key).
	Env       []string
	Timeout   time.Duration
	Bandwidth []Pattern
}

// Options say how to run the tests.
type Options struct {
	// Procs is the number of processes each test starts on this node ({{procs}}).
	Procs int
	// Nodes is how many nodes the job spans; a test that needs more is not run.
	Nodes int
	// Env is each test's whole environment (the install's runtime env).
	Env []string
	// Timeout, when above 0, replaces each test's own.
	Timeout time.Duration
	// TailLines is how many last lines of a test's output are kept (0: 20).
	TailLines int
	// Lacks says why this node cannot give a test what it needs ("" when it can); nil
	// when nothing is known of the node, and then every test runs.
	Lacks func(need string) string
}

// Result is how one test went.
type Result struct {
	Component string   `json:"component"`
	Name      string   `json:"name"`
	Status    string   `json:"status"`
	Argv      []string `json:"argv"`
	Procs     int      `json:"procs"`
	Seconds   float64  `json:"seconds"`
	// ExitCode is the program's exit status; -1 when it was killed or did not start.
	ExitCode int  `json:"exit_code"`
	TimedOut bool `json:"timed_out,omitempty"`
	// Missing names the program when it is not on the runtime env's PATH (the node
	// lacks it: exit 3, not a failed test).
	Missing string `json:"missing,omitempty"`
	// Reason says why it failed or did not run.
	Reason string `json:"reason,omitempty"`
	// Tail is the last lines of its output (stdout and stderr), for a failure.
	Tail       []string    `json:"tail,omitempty"`
	Bandwidths []Bandwidth `json:"bandwidths,omitempty"`
}

// Bandwidth is what one pattern read: the mean of the values matched (one per rank or
// per repetition, as the test prints them), their lowest, and how many there were.
type Bandwidth struct {
	Name    string  `json:"name"`
	GBps    float64 `json:"gbps"`
	MinGBps float64 `json:"min_gbps"`
	Samples int     `json:"samples"`
}

// DefaultTimeout bounds a test that declares none (a recipe always does; a hand-made
// Test may not).
const DefaultTimeout = 30 * time.Minute

// Run runs the tests one after the other and says how each went. When ctx ends, the
// running test is stopped and the rest are not run.
func Run(ctx context.Context, tests []Test, o Options) []Result {
	o.Procs, o.Nodes = max(o.Procs, 1), max(o.Nodes, 1)
	if o.TailLines <= 0 {
		o.TailLines = 20
	}
	out := make([]Result, 0, len(tests))
	for _, t := range tests {
		r := Result{Component: t.Component, Name: t.Name, Argv: Expand(t.Argv, o.Procs), Procs: o.Procs, ExitCode: -1}
		switch {
		case ctx.Err() != nil:
			r.Status, r.Reason = NotRun, "interrupted before it started"
		case max(t.Nodes, 1) > o.Nodes:
			r.Status = NotRun
			r.Reason = fmt.Sprintf("needs %d nodes (this run: %d; start epbuild test --nodes %d on each node of a job that spans them)", t.Nodes, o.Nodes, t.Nodes)
		case lacks(t, o) != "":
			r.Status, r.Reason = NotRun, lacks(t, o)
		default:
			run(ctx, t, o, &r)
		}
		out = append(out, r)
	}
	return out
}

// lacks is why the node cannot run t ("" when it can).
func lacks(t Test, o Options) string {
	if o.Lacks == nil {
		return ""
	}
	for _, n := range t.Needs {
		if why := o.Lacks(n); why != "" {
			return why
		}
	}
	return ""
}

var procsRe = regexp.MustCompile(`\{\{\s*procs\s*\}\}`)

// Expand replaces {{procs}} in argv with n.
func Expand(argv []string, n int) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = procsRe.ReplaceAllLiteralString(a, strconv.Itoa(n))
	}
	return out
}

func run(ctx context.Context, t Test, o Options, r *Result) {
	timeout := t.Timeout
	if o.Timeout > 0 {
		timeout = o.Timeout
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if len(r.Argv) == 0 {
		r.Status, r.Reason = Fail, "no program to run"
		return
	}
	prog, err := LookPath(r.Argv[0], t.Dir, o.Env)
	if err != nil {
		r.Status, r.Missing = Fail, r.Argv[0]
		r.Reason = err.Error()
		return
	}
	sink := newSink(t.Bandwidth, o.TailLines)
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// the output goes through a pipe of our own, not exec's copying: a process the test
	// leaves behind holds it open until the group is killed, which procgroup.Run does
	// only once the test itself has exited, so exec would wait on it (or call a passed
	// test failed)
	pr, pw, err := os.Pipe()
	if err != nil {
		r.Status, r.Reason = Fail, "a pipe for its output: "+err.Error()
		return
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(sink, pr)
	}()
	cmd := exec.Command(prog, r.Argv[1:]...)
	cmd.Args[0] = r.Argv[0]
	// exec keeps the last of duplicate keys: the test's own win
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = t.Dir, append(slices.Clip(o.Env), t.Env...), pw, pw
	start := time.Now()
	err = procgroup.Run(tctx, cmd)
	r.Seconds = time.Since(start).Seconds()
	pw.Close()
	// a process that left the group may still hold the pipe: stop reading once a whole
	// drainWait passes with nothing read, never while output still arrives (a reader
	// starved on a loaded machine would otherwise lose the last lines)
	for read := sink.bytes(); ; {
		select {
		case <-copied:
		case <-time.After(drainWait):
			if now := sink.bytes(); now != read {
				read = now
				continue
			}
		}
		break
	}
	pr.Close()
	<-copied
	sink.flush()
	r.Tail, r.Bandwidths = sink.tail(), sink.bandwidths()
	var ee *exec.ExitError
	switch {
	case tctx.Err() == context.DeadlineExceeded && ctx.Err() == nil:
		r.Status, r.TimedOut = Fail, true
		r.Reason = fmt.Sprintf("ran past its timeout of %s: its processes were killed", timeout)
	case ctx.Err() != nil:
		r.Status, r.Reason = Fail, "interrupted: its processes were killed"
	case err == nil:
		r.Status, r.ExitCode = Pass, 0
	case errors.As(err, &ee):
		r.Status, r.ExitCode = Fail, ee.ExitCode()
		r.Reason = "exited " + strconv.Itoa(ee.ExitCode())
		if ee.ExitCode() < 0 {
			r.Reason = ee.String()
		}
	default:
		r.Status, r.Reason = Fail, "run "+r.Argv[0]+": "+err.Error()
	}
	if r.Status == Pass {
		r.Tail = nil // the tail says why a test failed; a passed one keeps its bandwidths
	}
}

// LookPath finds a program as a job with env would: a name with a slash relative to
// dir, any other on env's PATH (not epbuild's own).
func LookPath(name, dir string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if executable(p) {
			return p, nil
		}
		return "", fmt.Errorf("%s is not an executable file", p)
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, name)
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if executable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on the install's PATH (%s): install it on this node, or put it on PATH", name, path)
}

func executable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}

// drainWait is how long the rest of a test's output is read once its group is gone.
const drainWait = 2 * time.Second

// maxLine bounds one line of a test's output; a longer one is cut there.
const maxLine = 64 << 10

// sink reads a test's output line by line: it matches the bandwidth patterns on each and
// keeps the last lines. stdout and stderr share it.
type sink struct {
	mu      sync.Mutex
	partial []byte
	cut     bool // the line now read went past maxLine: the rest is dropped
	last    []string
	keep    int
	meter   *Meter
	total   int64 // bytes written so far
}

// bytes is how much has been written so far.
func (s *sink) bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

func newSink(p []Pattern, keep int) *sink { return &sink{meter: NewMeter(p), keep: keep} }

func (s *sink) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(b)
	s.total += int64(n)
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		chunk := b
		if i >= 0 {
			chunk = b[:i]
		}
		if room := maxLine - len(s.partial); !s.cut && room > 0 {
			s.partial = append(s.partial, chunk[:min(room, len(chunk))]...)
			s.cut = len(chunk) > room
		} else if len(chunk) > 0 {
			s.cut = true
		}
		if i < 0 {
			break
		}
		s.line()
		b = b[i+1:]
	}
	return n, nil
}

func (s *sink) line() {
	l := strings.TrimRight(string(s.partial), "\r")
	s.partial, s.cut = s.partial[:0], false
	s.meter.Line(l)
	if s.keep > 0 {
		if len(s.last) == s.keep {
			s.last = append(s.last[:0], s.last[1:]...)
		}
		s.last = append(s.last, l)
	}
}

func (s *sink) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.partial) > 0 {
		s.line()
	}
}

func (s *sink) tail() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.last...)
}

func (s *sink) bandwidths() []Bandwidth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.meter.Bandwidths()
}

// Meter reads bandwidths out of a test's output, a line at a time.
type Meter struct {
	patterns []Pattern
	sum      []float64
	low      []float64
	n        []int
	// after[i]: the line before this one matched pattern i's Label
	after []bool
}

// NewMeter reads the values of these patterns.
func NewMeter(p []Pattern) *Meter {
	return &Meter{patterns: p, sum: make([]float64, len(p)), low: make([]float64, len(p)), n: make([]int, len(p)), after: make([]bool, len(p))}
}

// Line reads one line: each pattern that matches adds its gbps value (a pattern may
// match a line more than once, as DeepEP's low-latency test prints two bandwidths a line).
// A pattern with a Label reads one value, from the line right after its label's only.
func (m *Meter) Line(l string) {
	for i, p := range m.patterns {
		g := p.Re.SubexpIndex("gbps")
		if g < 0 {
			continue
		}
		matches := -1
		if p.Label != nil {
			matches = 0
			if m.after[i] {
				matches = 1
			}
			m.after[i] = p.Label.MatchString(l)
		}
		for _, sm := range p.Re.FindAllStringSubmatch(l, matches) {
			v, err := strconv.ParseFloat(sm[g], 64)
			if err != nil || v < 0 || v != v {
				continue
			}
			if m.n[i] == 0 || v < m.low[i] {
				m.low[i] = v
			}
			m.sum[i] += v
			m.n[i]++
		}
	}
}

// Bandwidths are the values read so far, in pattern order; a pattern that matched
// nothing is left out.
func (m *Meter) Bandwidths() []Bandwidth {
	var out []Bandwidth
	for i, p := range m.patterns {
		if m.n[i] > 0 {
			out = append(out, Bandwidth{Name: p.Name, GBps: round2(m.sum[i] / float64(m.n[i])), MinGBps: m.low[i], Samples: m.n[i]})
		}
	}
	return out
}

func round2(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 2, 64), 64)
	return f
}

// GPUs counts the GPUs a test started with env would use on this node, and says how it
// counted: CUDA_VISIBLE_DEVICES where env sets it, else `nvidia-smi -L` (found on env's
// PATH); 1 where neither tells (a node without a GPU runs one process).
func GPUs(ctx context.Context, env []string) (int, string) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "CUDA_VISIBLE_DEVICES="); ok {
			n := 0
			for _, d := range strings.Split(v, ",") {
				if d = strings.TrimSpace(d); d != "" && !strings.HasPrefix(d, "-") {
					n++
				}
			}
			return max(n, 1), "CUDA_VISIBLE_DEVICES"
		}
	}
	smi, err := LookPath("nvidia-smi", "/", env)
	if err != nil {
		return 1, "no nvidia-smi: one process"
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, smi, "-L")
	cmd.Env = env
	b, err := cmd.Output()
	if err != nil {
		return 1, "nvidia-smi -L failed: one process"
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "GPU ") {
			n++
		}
	}
	if n == 0 {
		return 1, "nvidia-smi -L lists no GPU: one process"
	}
	return n, "nvidia-smi -L"
}
