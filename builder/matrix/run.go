package matrix

import (
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
	"time"

	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/builder/verify"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
)

// Options configure Run.
type Options struct {
	// Out holds a directory per cell: its artifact, its install (prefix/) and its test's
	// log and working directory.
	Out string
	// Test is a shell command (sh -c) run in each installed cell; "" runs none. It may use
	// {{prefix}} (the cell's install), {{C.prefix}} (component C's directory there) and
	// {{C.src}} (C's patched source tree: DeepEP's tests are in its tree, not the install).
	Test string
	// Metrics are regular expressions read from the test's output: each match's first
	// group (the whole match without one) is a number; a named group names the metric.
	Metrics []string
	// TestTimeout ends a test that runs longer (0: no limit).
	TestTimeout time.Duration
	// TestOutput receives the test's output as it runs (besides its log); nil: the log only.
	TestOutput io.Writer
	// Version is epbuild's (the install's receipt); Environ the base environment of the
	// test, under the install's env.sh and the cell's env; Getenv what verify's clean
	// environment is read from (nil: os.Getenv). Build gets them too.
	Version string
	Environ []string
	Getenv  func(string) string
	Log     *log.Logger
	// Matrix makes the matrix, once the options are checked: the cells to run and those
	// the rules exclude.
	Matrix func(ctx context.Context) (*compat.Matrix, error)
	// Build builds a cell: the recipe with the cell's sets, its artifact into dir. A
	// *RefusedError says a compatibility rule stops the cell.
	Build func(ctx context.Context, sets []string, dir string) (*stage.Result, error)
}

// RefusedError is a cell's build that a compatibility rule stopped (Rules: their ids),
// on the plan or on this build host.
type RefusedError struct {
	Rules []string
	Err   error
}

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Outcomes of a cell's steps.
const (
	StepOK       = "ok"
	StepPass     = "pass"
	StepFail     = "fail"
	StepRefused  = "refused"  // a compatibility rule stops the cell (plan or this build host)
	StepMissing  = "missing"  // the build host lacks something the cell needs (exit 3)
	StepExcluded = "excluded" // the matrix excludes the combination (plan-stage rule)
	StepSkipped  = "skipped"  // an earlier step failed
	StepNone     = "none"     // no test command
)

// Metric is what one --metric expression read from a test's output.
type Metric struct {
	Name    string    `json:"name"`
	Pattern string    `json:"pattern"`
	Values  []float64 `json:"values"`
}

// Cell is one cell of a matrix run.
type Cell struct {
	Name   string            `json:"name"`
	Dir    string            `json:"dir,omitempty"`
	Values map[string]string `json:"values"`
	Sets   []string          `json:"sets"`
	// Env is the cell's env from the rules (plan and build host), given to its test.
	Env map[string]string `json:"env,omitempty"`
	// Build: ok, fail, refused (Rules says which), missing, excluded.
	Build string   `json:"build"`
	Rules []string `json:"rules,omitempty"`
	// BuildFacts are what the cell's build read of what it built (Manifest.BuildFacts);
	// its rules were evaluated again with them after the build (a refusal then is one).
	BuildFacts map[string]string `json:"build_facts,omitempty"`
	Error      string            `json:"error,omitempty"`
	// BuildSeconds is the wall time of the cell's build (probe included); Built and Reused
	// name the stages ("build nccl") it ran and those it found in the store.
	BuildSeconds float64  `json:"build_seconds"`
	Built        []string `json:"built,omitempty"`
	Reused       []string `json:"reused,omitempty"`
	Artifact     string   `json:"artifact,omitempty"`
	Prefix       string   `json:"prefix,omitempty"`
	// Verify: pass or fail (Failed names the checks), or skipped; Counts by status.
	Verify string         `json:"verify"`
	Counts map[string]int `json:"verify_counts,omitempty"`
	Failed []string       `json:"verify_failed,omitempty"`
	// NCCL is the NCCL the cell's test runs: the library torch's communicator binds to
	// with the install's env (ProbeNCCL), not torch's compile-time header version.
	NCCL *toolchain.NCCLRuntime `json:"nccl,omitempty"`
	// NVSHMEM is the NVSHMEM DeepEP's host calls bind to in a process with the install's
	// env, as the install's verify read it (process.single-nvshmem): which file and
	// release, and whether it is the one the cell built against.
	NVSHMEM *BoundLibrary `json:"nvshmem,omitempty"`
	// Test: pass, fail, none or skipped; its exit status, log, seconds and metrics.
	Test        string   `json:"test"`
	TestExit    int      `json:"test_exit,omitempty"`
	TestLog     string   `json:"test_log,omitempty"`
	TestSeconds float64  `json:"test_seconds,omitempty"`
	Metrics     []Metric `json:"metrics,omitempty"`
}

// BoundLibrary is one verify check of the library a process of the install runs.
type BoundLibrary struct {
	Check  string `json:"check"`
	Status string `json:"status"`
	Found  string `json:"found"`
}

// boundLibrary is the result of the check id in checks; nil when it did not run or was
// skipped (nothing of the install binds that library yet).
func boundLibrary(checks []verify.VerifyCheck, id string) *BoundLibrary {
	for _, c := range checks {
		if c.ID == id && c.Status != check.Skip {
			return &BoundLibrary{Check: c.ID, Status: string(c.Status), Found: c.Found}
		}
	}
	return nil
}

// OK reports whether the cell ran and passed, or was not to run here (excluded or
// refused by a rule, which the table shows with its rule ids).
func (c *Cell) OK() bool {
	switch c.Build {
	case StepExcluded, StepRefused:
		return true
	case StepOK:
		return c.Verify == StepPass && (c.Test == StepPass || c.Test == StepNone)
	}
	return false
}

// Report is a whole matrix run.
type Report struct {
	Recipe string        `json:"recipe"`
	Axes   []compat.Axis `json:"axes"`
	Test   string        `json:"test,omitempty"`
	Cells  []Cell        `json:"cells"`
}

// Failed reports whether a cell that ran failed.
func (r *Report) Failed() bool {
	return slices.ContainsFunc(r.Cells, func(c Cell) bool { return !c.OK() })
}

// Run makes the matrix (opts.Matrix) and runs its allowed cells one after another.
// The error is for what stops the whole run: bad options, a matrix that cannot be made, a
// cancelled context; a cell's failure is in its result.
func Run(ctx context.Context, opts Options) (*Report, error) {
	metrics, err := compileMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	if opts.Test != "" {
		if _, err := expandTest(opts.Test, func(string) (string, bool) { return "x", true }); err != nil {
			return nil, &plan.UsageError{Err: fmt.Errorf("--test: %w", err)}
		}
	}
	if opts.Out == "" {
		return nil, &plan.UsageError{Err: errors.New("matrix run: no output directory")}
	}
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	if opts.Log == nil {
		opts.Log = log.New(io.Discard)
	}
	m, err := opts.Matrix(ctx)
	if err != nil {
		return nil, err
	}
	run := &Report{Recipe: m.Recipe, Axes: m.Axes, Test: opts.Test}
	for i, c := range m.Cells {
		if err := ctx.Err(); err != nil {
			return run, err
		}
		cr := Cell{Name: c.Name, Values: c.Values, Sets: c.Sets, Env: maps.Clone(c.Env),
			Dir: filepath.Join(opts.Out, cellDir(i, m, c.Values)), Verify: StepSkipped, Test: StepSkipped}
		opts.Log.Info("matrix cell", "cell", c.Name, "of", fmt.Sprintf("%d/%d", i+1, len(m.Cells)))
		runCell(ctx, opts, metrics, &cr)
		run.Cells = append(run.Cells, cr)
	}
	for _, e := range m.Excluded {
		run.Cells = append(run.Cells, Cell{Name: e.Name, Values: e.Values, Sets: e.Sets, Build: StepExcluded,
			Rules: append(slices.Clone(e.Rules), suffixAll(e.Undecided, " undecided")...), Verify: StepSkipped, Test: StepSkipped})
	}
	return run, ctx.Err()
}

func suffixAll(l []string, s string) []string {
	out := make([]string, len(l))
	for i, x := range l {
		out[i] = x + s
	}
	return out
}

// cellDir names a cell's directory: its number and its values, as file-name characters.
func cellDir(i int, m *compat.Matrix, values map[string]string) string {
	var parts []string
	for _, a := range m.Axes {
		parts = append(parts, a.Name+"-"+values[a.Name])
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' {
			return r
		}
		return '-'
	}, strings.Join(parts, "_"))
	if name == "" {
		name = m.Recipe
	}
	return fmt.Sprintf("%02d-%s", i+1, name)
}

// runCell builds, installs (verifying) and tests one cell, recording each step.
func runCell(ctx context.Context, opts Options, metrics []*regexp.Regexp, cr *Cell) {
	start := time.Now()
	res, err := opts.Build(ctx, cr.Sets, cr.Dir)
	cr.BuildSeconds = time.Since(start).Seconds()
	if res != nil {
		for _, s := range res.Stages {
			what := strings.TrimSpace(s.Stage + " " + s.Component)
			if s.Cached {
				cr.Reused = append(cr.Reused, what)
			} else {
				cr.Built = append(cr.Built, what)
			}
		}
	}
	var re *RefusedError
	var pe *toolchain.PreflightError
	switch {
	case errors.As(err, &re):
		cr.Build, cr.Error = StepRefused, err.Error()
		for _, id := range re.Rules {
			if !slices.Contains(cr.Rules, id) {
				cr.Rules = append(cr.Rules, id)
			}
		}
		return
	case errors.As(err, &pe):
		cr.Build, cr.Error = StepMissing, err.Error()
		return
	case err != nil:
		cr.Build, cr.Error = StepFail, err.Error()
		return
	}
	cr.Build, cr.Artifact = StepOK, res.Artifact
	cr.Prefix = filepath.Join(cr.Dir, "prefix")
	ir, err := install.Install(ctx, install.InstallOptions{Artifact: res.Artifact, Prefix: cr.Prefix, Version: opts.Version,
		Verify: verify.VerifyOptions{Environ: verify.CleanEnviron(opts.Getenv)}, Log: opts.Log})
	if ir != nil && ir.Report != nil {
		cr.Counts = ir.Report.Counts()
		for _, c := range ir.Report.Checks {
			if c.Status == "fail" {
				cr.Failed = append(cr.Failed, c.ID)
			}
		}
		cr.NVSHMEM = boundLibrary(ir.Report.Checks, "process.single-nvshmem")
	}
	if _, ok := res.Plan.Component("nccl"); ok && ir != nil {
		cr.NCCL = installedNCCL(ctx, cr.Prefix, verify.CleanEnviron(opts.Getenv))
	}
	if err != nil {
		cr.Verify, cr.Error = StepFail, err.Error()
		return
	}
	cr.Verify = StepPass
	// the rules' env from the build host too (R18 on torch's NCCL is decided at preflight)
	m, _, err := manifest.ReadInstalledManifest(cr.Prefix)
	if err != nil {
		cr.Test, cr.Error = StepFail, err.Error()
		return
	}
	cr.BuildFacts = m.BuildFacts
	for _, f := range m.Findings {
		if f.Fix != nil && !f.Unknown && f.Severity != compat.SeverityError {
			if cr.Env == nil {
				cr.Env = map[string]string{}
			}
			maps.Copy(cr.Env, f.Fix.Env)
		}
	}
	if opts.Test == "" {
		cr.Test = StepNone
		return
	}
	runTest(ctx, opts, metrics, cr, res)
}

// installedNCCL is the NCCL a process with the install's runtime env (env.sh's
// LD_PRELOAD and the rest, over base) runs; nil when that cannot be read.
func installedNCCL(ctx context.Context, prefix string, base []string) *toolchain.NCCLRuntime {
	env, err := envsh.InstallEnv(prefix, base)
	if err != nil {
		return nil
	}
	if n := toolchain.ProbeNCCL(ctx, "", env, nil); n.Version != "" {
		return &n
	}
	return nil
}

// runTest runs the cell's test command with env.sh's env and the cell's, in a fresh
// directory of the cell, its output to a log (and opts.TestOutput), and reads the metrics.
func runTest(ctx context.Context, opts Options, metrics []*regexp.Regexp, cr *Cell, res *stage.Result) {
	trees := map[string]string{}
	for _, c := range res.Components {
		trees[c.Name] = c.Tree
	}
	cmdline, err := expandTest(opts.Test, func(ref string) (string, bool) {
		if ref == "prefix" {
			return cr.Prefix, true
		}
		comp, field, _ := strings.Cut(ref, ".")
		switch pc, ok := res.Plan.Component(comp); {
		case !ok:
			return "", false
		case field == "src" && trees[comp] != "":
			return trees[comp], true
		case field == "prefix" && pc.Source.Python == nil:
			return filepath.Join(cr.Prefix, comp), true
		}
		return "", false
	})
	if err != nil {
		cr.Test, cr.Error = StepFail, "--test: "+err.Error()
		return
	}
	env, err := envsh.InstallEnv(cr.Prefix, opts.Environ)
	if err != nil {
		cr.Test, cr.Error = StepFail, err.Error()
		return
	}
	env = envsh.WithEnv(env, cr.Env)
	// a test run from a source tree in the store must not write into it
	env = envsh.WithEnv(env, map[string]string{"EPBUILD_CELL": cr.Name, "PYTHONDONTWRITEBYTECODE": "1"})
	dir := filepath.Join(cr.Dir, "test")
	cr.TestLog = filepath.Join(cr.Dir, "test.log")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		cr.Test, cr.Error = StepFail, err.Error()
		return
	}
	logf, err := os.Create(cr.TestLog)
	if err != nil {
		cr.Test, cr.Error = StepFail, err.Error()
		return
	}
	defer logf.Close()
	fmt.Fprintf(logf, "$ %s\n", cmdline)
	tctx := ctx
	if opts.TestTimeout > 0 {
		var cancel context.CancelFunc
		tctx, cancel = context.WithTimeout(ctx, opts.TestTimeout)
		defer cancel()
	}
	var out bytes.Buffer
	w := io.MultiWriter(logf, &out)
	if opts.TestOutput != nil {
		w = io.MultiWriter(logf, &out, opts.TestOutput)
	}
	cmd := exec.CommandContext(tctx, "sh", "-c", cmdline)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, w, w
	cmd.WaitDelay = 10 * time.Second // a child that keeps the output open does not hold the run
	start := time.Now()
	err = cmd.Run()
	cr.TestSeconds = time.Since(start).Seconds()
	cr.Metrics = readMetrics(metrics, out.Bytes())
	var ee *exec.ExitError
	switch {
	case err == nil:
		cr.Test = StepPass
	case tctx.Err() == context.DeadlineExceeded:
		cr.Test, cr.TestExit, cr.Error = StepFail, -1, fmt.Sprintf("the test ran past %s and was stopped (log %s)", opts.TestTimeout, cr.TestLog)
	case errors.As(err, &ee):
		cr.Test, cr.TestExit = StepFail, ee.ExitCode()
		cr.Error = fmt.Sprintf("the test exited %d (log %s)", ee.ExitCode(), cr.TestLog)
	default:
		cr.Test, cr.Error = StepFail, "run the test: "+err.Error()
	}
}

var testTemplate = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// expandTest replaces {{prefix}}, {{C.prefix}} and {{C.src}} in a test command with their
// values, quoted for sh; a reference lookup cannot answer is an error.
func expandTest(cmd string, lookup func(ref string) (string, bool)) (string, error) {
	var bad []string
	out := testTemplate.ReplaceAllStringFunc(cmd, func(m string) string {
		ref := testTemplate.FindStringSubmatch(m)[1]
		_, field, _ := strings.Cut(ref, ".")
		v, ok := lookup(ref)
		if !ok || ref != "prefix" && field != "prefix" && field != "src" {
			bad = append(bad, m)
			return m
		}
		return quote.ShellAlways(v)
	})
	if len(bad) > 0 {
		return "", fmt.Errorf("%s: a test command may use {{prefix}}, {{COMPONENT.prefix}} of a component the install carries and {{COMPONENT.src}} of one built from source", strings.Join(bad, ", "))
	}
	return out, nil
}

// compileMetrics compiles the --metric expressions.
func compileMetrics(exprs []string) ([]*regexp.Regexp, error) {
	var out []*regexp.Regexp
	for _, e := range exprs {
		re, err := regexp.Compile(e)
		if err != nil {
			return nil, &plan.UsageError{Err: fmt.Errorf("--metric %q: %w", e, err)}
		}
		out = append(out, re)
	}
	return out, nil
}

// readMetrics reads every match of each expression as a number: its first group, or the
// whole match.
func readMetrics(res []*regexp.Regexp, out []byte) []Metric {
	var ms []Metric
	for i, re := range res {
		m := Metric{Name: fmt.Sprintf("m%d", i+1), Pattern: re.String(), Values: []float64{}}
		for j, n := range re.SubexpNames() {
			if j > 0 && n != "" {
				m.Name = n
				break
			}
		}
		for _, sub := range re.FindAllSubmatch(out, -1) {
			s := sub[0]
			if len(sub) > 1 {
				s = sub[1]
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(string(s)), 64); err == nil {
				m.Values = append(m.Values, f)
			}
		}
		ms = append(ms, m)
	}
	return ms
}
