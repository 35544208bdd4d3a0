// Package check is epbuild's one check engine. Every check (a patch set's effect on a
// tree, an ELF fact or CUDA arch of a staged or installed file, a manifest entry, an env
// script line, a process's mapped libraries, a host fact, a compatibility rule on a node)
// is a Kind in a Registry and yields a Result. The build's check stage, verify-install
// and host check all call Registry.Run, each with its target and subject.
//
// The engine sits below the builder and the host checks: it owns the result type and its
// status, and knows nothing of what a subject holds (a Registry is generic in it), so
// kinds live with their data and are registered where the data meets.
package check

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Status is a check's outcome.
type Status string

// The statuses, as reports print them.
const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Result is one check's outcome: a stable ID that reports and fleets compare, what was
// read, what was expected and found, why it matters, how to fix it, and the
// compatibility rule it enforces, if any. A check never panics or returns an error: what
// it cannot read is a failed (or skipped) result that says so.
type Result struct {
	ID       string `json:"id"`
	Status   Status `json:"status"`
	Read     string `json:"read"`
	Expected string `json:"expected"`
	Found    string `json:"found"`
	Why      string `json:"why"`
	Fix      string `json:"fix"`
	// Rule names the compatibility rule (and case) the check enforces: "R16/peer-memory".
	Rule string `json:"rule,omitempty"`
}

// OK reports whether the result does not fail the job.
func (r Result) OK() bool { return r.Status != Fail }

// Failed reports whether any result failed.
func Failed(rs []Result) bool {
	return slices.ContainsFunc(rs, func(r Result) bool { return r.Status == Fail })
}

// Find returns the result with that ID.
func Find(rs []Result, id string) (Result, bool) {
	for _, r := range rs {
		if r.ID == id {
			return r, true
		}
	}
	return Result{}, false
}

// Target is what a kind checks.
type Target string

// The targets.
const (
	// Tree is a component's patched source tree (the patch stage).
	Tree Target = "tree"
	// Staged is a component's staged prefix (the build's check stage).
	Staged Target = "staged"
	// Installed is a component's prefix inside an install (verify-install).
	Installed Target = "installed"
	// Files is an install's files against its manifest and receipt.
	Files Target = "files"
	// Env is an install's env script.
	Env Target = "env"
	// Process is a Python process that imports the install.
	Process Target = "process"
	// Host is the node a job runs on.
	Host Target = "host"
)

// Kind is one sort of check: its name, what it applies to, why it exists, and how it runs.
// A kind with Run checks a subject once; a declared kind (made by Declared) runs once for
// each check a recipe declares of that name, with the declaration.
type Kind[S any] struct {
	Name    string
	Targets []Target
	// Explain says what the kind checks and why (the commands' help lists it).
	Explain string
	Run     func(ctx context.Context, s S) []Result

	runSpec func(ctx context.Context, s S, spec any) []Result
}

// Declared makes the kind of a recipe check: run gets each declaration (a C, such as
// *recipes.NeededCheck) of that name the subject's component lists.
func Declared[S, C any](name string, targets []Target, explain string, run func(ctx context.Context, s S, spec C) []Result) Kind[S] {
	return Kind[S]{Name: name, Targets: targets, Explain: explain, runSpec: func(ctx context.Context, s S, spec any) []Result {
		c, ok := spec.(C)
		if !ok {
			return []Result{{ID: name, Status: Fail, Found: fmt.Sprintf("a %T declaration", spec),
				Why: fmt.Sprintf("check kind %s reads %T declarations: a bug in the registry", name, *new(C))}}
		}
		return run(ctx, s, c)
	}}
}

// IsDeclared reports whether recipes declare checks of this kind.
func (k Kind[S]) IsDeclared() bool { return k.runSpec != nil }

// Applies reports whether the kind checks target t.
func (k Kind[S]) Applies(t Target) bool { return slices.Contains(k.Targets, t) }

// Lift makes kinds written for a subject T (builder/host's *host.Node) run on a subject
// S that holds one: each runs on to(s), and not at all when to gives ok false.
func Lift[S, T any](kinds []Kind[T], to func(S) (T, bool)) []Kind[S] {
	out := make([]Kind[S], 0, len(kinds))
	for _, k := range kinds {
		l := Kind[S]{Name: k.Name, Targets: k.Targets, Explain: k.Explain}
		if k.Run != nil {
			run := k.Run
			l.Run = func(ctx context.Context, s S) []Result {
				if t, ok := to(s); ok {
					return run(ctx, t)
				}
				return nil
			}
		}
		if k.runSpec != nil {
			run := k.runSpec
			l.runSpec = func(ctx context.Context, s S, spec any) []Result {
				if t, ok := to(s); ok {
					return run(ctx, t, spec)
				}
				return nil
			}
		}
		out = append(out, l)
	}
	return out
}

// Spec is one check a recipe declares: its kind's name and the declaration.
type Spec struct {
	Kind  string
	Value any
}

// Registry holds the kinds, in the order they run.
type Registry[S any] struct {
	kinds []Kind[S]
}

// NewRegistry checks the kinds (a name, a target, an explanation and a run function each;
// names unique) and keeps them in order.
func NewRegistry[S any](kinds ...Kind[S]) (*Registry[S], error) {
	seen := map[string]bool{}
	var errs []error
	for i, k := range kinds {
		switch {
		case k.Name == "":
			errs = append(errs, fmt.Errorf("check kind %d has no name", i))
		case seen[k.Name]:
			errs = append(errs, fmt.Errorf("check kind %s is registered twice", k.Name))
		case len(k.Targets) == 0:
			errs = append(errs, fmt.Errorf("check kind %s names no target", k.Name))
		case strings.TrimSpace(k.Explain) == "":
			errs = append(errs, fmt.Errorf("check kind %s has no explanation", k.Name))
		case (k.Run == nil) == (k.runSpec == nil):
			errs = append(errs, fmt.Errorf("check kind %s needs exactly one run function", k.Name))
		}
		seen[k.Name] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Registry[S]{kinds: slices.Clone(kinds)}, nil
}

// Kinds lists the kinds in order.
func (r *Registry[S]) Kinds() []Kind[S] { return slices.Clone(r.kinds) }

// Kind finds a kind by name.
func (r *Registry[S]) Kind(name string) (Kind[S], bool) {
	for _, k := range r.kinds {
		if k.Name == name {
			return k, true
		}
	}
	return Kind[S]{}, false
}

// Run is the engine's one entry point: it checks subject s as target t, first each
// declared check in the order given (the recipe's), then every kind that runs on its
// own, in registry order. A declaration of a kind that does not apply to t is passed
// over; one of an unknown kind fails. A cancelled context ends the run with a skipped
// <target>.cancelled result.
func (r *Registry[S]) Run(ctx context.Context, t Target, s S, declared []Spec) []Result {
	var out []Result
	cancelled := func() bool {
		if err := ctx.Err(); err != nil {
			out = append(out, Result{ID: string(t) + ".cancelled", Status: Skip, Read: err.Error(),
				Why: "the checks were cancelled before they finished"})
			return true
		}
		return false
	}
	for _, d := range declared {
		if cancelled() {
			return out
		}
		k, ok := r.Kind(d.Kind)
		switch {
		case !ok || !k.IsDeclared():
			out = append(out, Result{ID: "check." + d.Kind, Status: Fail, Found: "no declared check kind " + d.Kind,
				Why: "the recipe declares a check this epbuild cannot run", Fix: "use a newer epbuild, or remove the check"})
		case k.Applies(t):
			out = append(out, k.runSpec(ctx, s, d.Value)...)
		}
	}
	for _, k := range r.kinds {
		if k.IsDeclared() || !k.Applies(t) {
			continue
		}
		if cancelled() {
			return out
		}
		out = append(out, k.Run(ctx, s)...)
	}
	return out
}
