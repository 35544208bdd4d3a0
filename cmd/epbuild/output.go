package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/builder/verify"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// schemaVersion is the version of the --json documents: every one is an object that
// starts with the envelope (schema_version, epbuild_version, hostname, ok, command; see
// docs/json.md and docs/schema/envelope.json), so that reports from many nodes and many
// epbuilds can be merged. Bump it when a field changes meaning or goes.
const schemaVersion = 1

// printJSON writes v, a JSON object, as the command's one JSON document on stdout, in
// the envelope. fail is why the command failed, its result printed all the same (a
// failed check, two builds that differ): nil makes ok true; else ok is false and
// "error" describes fail.
func (app *App) printJSON(fail error, v any) error {
	if fail == nil {
		return app.writeEnvelope(true, nil, v)
	}
	e := describeError(fail, exitCodeOf(fail))
	return app.writeEnvelope(false, &e, v)
}

// writeEnvelope writes v's fields after the envelope's, and "error" when e is not nil.
func (app *App) writeEnvelope(ok bool, e *errorJSON, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode the result as JSON: %w", err)
	}
	head := app.header(ok)
	if e != nil {
		head = append(head, [2]any{"error", e})
	}
	b, err = withHeader(b, head)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return fmt.Errorf("encode the result as JSON: %w", err)
	}
	out.WriteByte('\n')
	_, err = app.Out.Write(out.Bytes())
	return err
}

// header is what every JSON document starts with, in this order.
func (app *App) header(ok bool) [][2]any {
	return [][2]any{{"schema_version", schemaVersion}, {"epbuild_version", epbuildVersion()}, {"hostname", app.hostname()},
		{"ok", ok}, {"command", app.command}}
}

// commandName is how the envelope names cmd: its path without "epbuild", e.g. "cache ls".
func commandName(cmd *cobra.Command) string {
	if cmd == nil || !cmd.HasParent() {
		return ""
	}
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// hostname names this node in reports: $EPBUILD_HOSTNAME (a Kubernetes pod can pass its
// node's name), else the kernel's.
func (app *App) hostname() string {
	if h := app.Getenv("EPBUILD_HOSTNAME"); h != "" {
		return h
	}
	h, _ := os.Hostname()
	return h
}

// withHeader puts the fields of head at the start of the JSON object obj, in head's
// order, then obj's other fields in obj's order. A field obj has already keeps obj's
// value, at head's place.
func withHeader(obj []byte, head [][2]any) ([]byte, error) {
	obj = bytes.TrimSpace(obj)
	if len(obj) < 2 || obj[0] != '{' {
		return nil, fmt.Errorf("encode the result as JSON: a report must be an object, got %.20s", obj)
	}
	type field struct {
		key string
		val json.RawMessage
	}
	var fields []field
	have := map[string]json.RawMessage{}
	dec := json.NewDecoder(bytes.NewReader(obj))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("encode the result as JSON: %w", err)
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("encode the result as JSON: %w", err)
		}
		k, _ := t.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, fmt.Errorf("encode the result as JSON: %w", err)
		}
		if _, dup := have[k]; !dup {
			fields = append(fields, field{k, val})
		}
		have[k] = val
	}
	var b bytes.Buffer
	write := func(k string, v json.RawMessage) {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(v)
	}
	inHead := map[string]bool{}
	for _, kv := range head {
		k := kv[0].(string)
		inHead[k] = true
		if v, ok := have[k]; ok {
			write(k, v)
			continue
		}
		vb, err := json.Marshal(kv[1])
		if err != nil {
			return nil, fmt.Errorf("encode the result as JSON: %w", err)
		}
		write(k, vb)
	}
	for _, f := range fields {
		if !inHead[f.key] {
			write(f.key, have[f.key])
		}
	}
	return append(append([]byte{'{'}, b.Bytes()...), '}'), nil
}

// errorJSON is the error object of a failed command's JSON document.
type errorJSON struct {
	// Code is stable for machines: usage, bad_recipe, bad_input, rules, patch_failed,
	// build_failed, check_failed, missing_tool, no_space, environment, interrupted, failed.
	Code     string `json:"code"`
	ExitCode int    `json:"exit_code"`
	Message  string `json:"message"`
	// Details, by code: log, component and step (build_failed); errors, each with
	// file, line, col (bad_recipe); findings (rules); missing (missing_tool); path, need
	// and free (no_space).
	Log       string              `json:"log,omitempty"`
	Component string              `json:"component,omitempty"`
	Step      string              `json:"step,omitempty"`
	Kept      string              `json:"kept,omitempty"` // --keep-failed: the build directory
	Errors    []*recipes.Error    `json:"errors,omitempty"`
	Findings  []compat.Finding    `json:"findings,omitempty"`
	Missing   []toolchain.Missing `json:"missing,omitempty"`
	Path      string              `json:"path,omitempty"`
	Need      int64               `json:"need,omitempty"`
	Free      *int64              `json:"free,omitempty"`
}

// describeError is what a failed command says about err to machines.
func describeError(err error, code int) errorJSON {
	e := errorJSON{ExitCode: code, Message: err.Error()}
	var (
		intr *interrupted
		be   *stage.BuildError
		re   *builder.RulesError
		pe   *toolchain.PreflightError
		ns   *disk.NoSpaceError
		pa   *stage.PatchError
		cf   *verify.ChecksFailed
		rs   recipes.Errors
		r1   *recipes.Error
		ue   usageError
		bue  *plan.UsageError
	)
	switch {
	case errors.As(err, &intr):
		e.Code = "interrupted"
		if errors.As(err, &be) {
			e.Log, e.Component, e.Step = be.Log, be.Component, be.Step
		}
	case errors.As(err, &ns):
		e.Code, e.Path, e.Need = "no_space", ns.Path, ns.Need
		if ns.Free >= 0 {
			e.Free = &ns.Free
		}
	case errors.As(err, &be):
		e.Code, e.Log, e.Component, e.Step, e.Kept = "build_failed", be.Log, be.Component, be.Step, be.Kept
	case errors.As(err, &re):
		e.Code, e.Findings = "rules", re.Findings
	case errors.As(err, &pe):
		e.Code, e.Missing = "missing_tool", pe.Missing
	case errors.As(err, &pa):
		e.Code, e.Component = "patch_failed", pa.Component
		if code == exitBadInput {
			e.Code = "bad_input"
		}
	case errors.As(err, &cf):
		e.Code = "check_failed"
	case errors.As(err, &rs):
		e.Code, e.Errors = "bad_recipe", rs
	case errors.As(err, &r1):
		e.Code, e.Errors = "bad_recipe", []*recipes.Error{r1}
	case errors.As(err, &ue), errors.As(err, &bue), isCobraUsage(err) && code == exitBadInput:
		e.Code = "usage"
	case code == exitBadInput:
		e.Code = "bad_input"
	case code == exitEnv:
		e.Code = "environment"
	default:
		e.Code = "failed"
	}
	return e
}

// environmentError reports whether err, which carries no exit code of its own, is the
// environment lacking something: a program not on PATH, no permission on a file or
// directory (a read-only or another user's output directory), a full file system, a
// host that cannot be reached. The error's text names the program, path or host.
func environmentError(err error) bool {
	var dns *net.DNSError
	var op *net.OpError
	return errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) ||
		errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial" ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH)
}

// interrupted is the cause of a run stopped by a signal: exit 130, as shells report a
// command ended by SIGINT.
type interrupted struct{ sig os.Signal }

func (e *interrupted) Error() string {
	name := "SIGINT"
	if e.sig == syscall.SIGTERM {
		name = "SIGTERM"
	}
	return "interrupted by " + name
}

func (e *interrupted) ExitCode() int { return exitInterrupted }

// countingWriter knows whether anything was written through it (so that a failed
// command's JSON error document is never a second document on stdout).
type countingWriter struct {
	w io.Writer
	n int64
	// width is the terminal's that w is (0: not a terminal), for tables to fit.
	width int
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// childOutput is where a program epbuild runs for the user writes (stderr, so that
// stdout stays the report): as it is, or with --log-format json one log record per line
// of it, so that stderr stays JSON lines. Close writes a last line without a newline.
func (app *App) childOutput(program string) io.WriteCloser {
	if app.logFormat != "json" {
		return nopCloser{app.Err}
	}
	return &lineLogger{log: func(line string) { app.Log.Info(line, "program", program) }}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// lineLogger logs each whole line written to it.
type lineLogger struct {
	mu  sync.Mutex
	buf []byte
	log func(string)
}

func (l *lineLogger) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, b...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.log(strings.TrimRight(string(l.buf[:i]), "\r"))
		l.buf = l.buf[i+1:]
	}
	return len(b), nil
}

func (l *lineLogger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.buf) > 0 {
		l.log(string(l.buf))
		l.buf = nil
	}
	return nil
}
