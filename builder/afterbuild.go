package builder

import (
	"context"
	"fmt"
	"io"
	"maps"
	"strings"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
)

// rulesAfterBuild evaluates the rules of the plan and preflight stages again with the
// build facts: a rule the version label left undecided (a git tree of NVSHMEM) is decided
// by the header the build read. The findings replace the run's; an error-level one stops
// the run before the package stage. tc nil: the plan stage only.
func (j *Job) rulesAfterBuild(ctx context.Context, tc *toolchain.Toolchain, build map[string]string) ([]compat.Finding, error) {
	rules, anc, err := j.rulesAndAncestry()
	if err != nil {
		return nil, err
	}
	var all []compat.Finding
	for _, stage := range []compat.Stage{compat.StagePlan, compat.StagePreflight} {
		if stage == compat.StagePreflight && tc == nil {
			break // no toolchain recorded: the preflight rules have nothing to read
		}
		facts := plan.FactsFromPlan(j.Plan)
		if stage == compat.StagePreflight {
			facts = toolchain.PreflightFacts(facts, j.Plan, tc)
		}
		facts.Build = maps.Clone(build)
		fs, err := compat.Evaluate(ctx, rules, facts, stage, anc)
		if err != nil {
			return nil, fmt.Errorf("check %s against the compatibility rules with what the build read: %w", j.Plan.Recipe, err)
		}
		all = append(all, fs...)
		if err := j.policy(fs, stage); err != nil {
			return all, &AfterBuildError{Facts: build, Err: err}
		}
	}
	return all, nil
}

// AfterBuildError is a rule that the facts the build read (Manifest.BuildFacts) decided
// against the plan.
type AfterBuildError struct {
	Facts map[string]string
	Err   error
}

func (e *AfterBuildError) Error() string {
	var kv []string
	for _, k := range compat.BuildKeys {
		if v, ok := e.Facts[k]; ok {
			kv = append(kv, k+"="+v)
		}
	}
	return fmt.Sprintf("after the build, with what it read of the headers and the tree it compiled (%s): %v", strings.Join(kv, ", "), e.Err)
}

func (e *AfterBuildError) Unwrap() error { return e.Err }

// CheckInstall evaluates the rules of the plan and preflight stages on the install at
// prefix: the plan, the build's toolchain and the build facts its manifest records (the
// rules a build evaluated before reading its headers, decided now by them). opts gives
// the policy and the ancestry sources (Library, Recipe and Sets are not used).
func CheckInstall(ctx context.Context, prefix string, opts Options) (*plan.Plan, []compat.Finding, error) {
	m, _, err := manifest.ReadInstalledManifest(prefix)
	if err != nil {
		return nil, nil, err
	}
	if m.Plan == nil {
		return nil, nil, fmt.Errorf("the manifest of %s records no plan", prefix)
	}
	if opts.Log == nil {
		opts.Log = log.New(io.Discard)
	}
	j := &Job{Plan: m.Plan, opts: opts}
	if err := j.checkIgnoreRules(); err != nil {
		return nil, nil, err
	}
	fs, err := j.rulesAfterBuild(ctx, m.Toolchain, m.BuildFacts)
	return m.Plan, fs, err
}
