package compat

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/recipes/strictyaml"
	"github.com/epbuild/epbuild/recipes/suggest"
)

//go:embed rules.yaml
var rulesYAML []byte

// Stage is when a rule is evaluated: plan (the resolved recipe, before any work),
// preflight (the probed build host, before the build) or host (a cluster node, by
// verify-install).
type Stage string

// The stages.
const (
	StagePlan      Stage = "plan"
	StagePreflight Stage = "preflight"
	StageHost      Stage = "host"
)

// Severity says what a finding means: error stops the job (exit 2 at plan), warn is
// printed, advice is a recommendation.
type Severity string

// The severities, most severe first.
const (
	SeverityError  Severity = "error"
	SeverityWarn   Severity = "warn"
	SeverityAdvice Severity = "advice"
)

func (s Severity) rank() int {
	switch s {
	case SeverityError:
		return 0
	case SeverityWarn:
		return 1
	}
	return 2
}

// Rule is one piece of field knowledge: when its condition holds at one of its stages,
// a Finding with its message and fix is reported. A rule with cases reports each case
// whose condition holds (ANDed with the rule's own When, if any) under the rule's id.
type Rule struct {
	ID       string   `json:"id"`
	Title    string   `json:"title"`
	Stages   []Stage  `json:"stages"`
	Severity Severity `json:"severity"`
	When     *Cond    `json:"when,omitempty"`
	Cases    []Case   `json:"cases,omitempty"`
	Message  string   `json:"message"`
	Fix      *Fix     `json:"fix,omitempty"`
	Sources  []string `json:"sources"`
	// Cites are the sources that quote upstream code, in a form `make rules-check` reads
	// again from a mirror: the rule stays true only while those lines still say it.
	Cites []Cite `json:"cites,omitempty"`
	line  int
}

// Cite is one upstream file:line a rule rests on: Says must appear in lines Lines of
// Path at Commit of Repo (whitespace runs compared as one space).
type Cite struct {
	Repo   string `json:"repo"`
	Commit string `json:"commit"`
	Path   string `json:"path"`
	Lines  string `json:"lines"`
	Says   string `json:"says"`
	line   int
}

// Line is the cite's line in the rules file.
func (c Cite) Line() int { return c.line }

// Range gives the first and last line of Lines ("79-96" or "341").
func (c Cite) Range() (first, last int, err error) {
	a, b, ok := strings.Cut(c.Lines, "-")
	if !ok {
		b = a
	}
	first, err1 := strconv.Atoi(a)
	last, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || first < 1 || last < first {
		return 0, 0, fmt.Errorf("lines %q: give N or N-M with 1 <= N <= M", c.Lines)
	}
	return first, last, nil
}

// String is repo@commit:path:lines, as a reader checks it.
func (c Cite) String() string {
	return fmt.Sprintf("%s@%s:%s:%s", strings.TrimPrefix(c.Repo, "https://"), c.Commit, c.Path, c.Lines)
}

// Case is one way a rule can be broken; unset fields are the rule's.
type Case struct {
	Name     string   `json:"name"`
	When     *Cond    `json:"when"`
	Stages   []Stage  `json:"stages,omitempty"`
	Severity Severity `json:"severity,omitempty"`
	Message  string   `json:"message,omitempty"`
	Fix      *Fix     `json:"fix,omitempty"`
}

// Fix says how to get past a finding: --set overrides for the recipe, runtime
// environment lines, and text for what neither can say.
type Fix struct {
	Set  []string          `json:"set,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	Text string            `json:"text,omitempty"`
}

// String gives the fix on one line: "--set K=V; NAME=V in the job's environment; text".
// A nil fix is "".
func (f *Fix) String() string {
	if f == nil {
		return ""
	}
	var parts []string
	for _, s := range f.Set {
		parts = append(parts, "--set "+s)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Env)) {
		parts = append(parts, k+"="+f.Env[k]+" in the job's environment (--set env."+k+"="+f.Env[k]+")")
	}
	if t := strings.Join(strings.Fields(f.Text), " "); t != "" {
		parts = append(parts, t)
	}
	return strings.Join(parts, "; ")
}

// Cond is one condition of the rule language; exactly one field is set. See the head
// of rules.yaml for the language.
type Cond struct {
	All []Cond `json:"all,omitempty"`
	Any []Cond `json:"any,omitempty"`
	Not *Cond  `json:"not,omitempty"`

	Version   *VersionCond   `json:"version,omitempty"`
	Commit    *CommitCond    `json:"commit,omitempty"`
	Source    *SourceCond    `json:"source,omitempty"`
	Package   *PackageCond   `json:"package,omitempty"`
	Patch     *PatchCond     `json:"patch,omitempty"`
	Option    *KeyCond       `json:"option,omitempty"`
	BuildVar  *KeyCond       `json:"build-var,omitempty"`
	Env       *KeyCond       `json:"env,omitempty"`
	Command   *CommandCond   `json:"command,omitempty"`
	Toolchain *ToolchainCond `json:"toolchain,omitempty"`
	Requires  string         `json:"requires,omitempty"`
	Present   string         `json:"present,omitempty"`
	Arch      *ArchCond      `json:"arch,omitempty"`
	Recipe    []string       `json:"recipe,omitempty"`
	Host      *KeyCond       `json:"host,omitempty"`
	Runtime   *KeyCond       `json:"runtime,omitempty"`
	Size      *SizeCond      `json:"size,omitempty"`
	Build     *KeyCond       `json:"build,omitempty"`
	Release   string         `json:"release,omitempty"`
}

// BuildKeys are the facts a build records about what it built (the install's manifest),
// which a build condition may name. Before the build, and for an install that did not
// record one, the fact is unknown.
var BuildKeys = []string{"nvshmem.rc-layout", "nvshmem.header-version", "deepep.hidden-sizes"}

// RuntimeKeys are the recipe's runtime settings a runtime condition may name: the bytes
// DeepEP's buffer asks of each GPU, the GPUs a node gives a job, the ranks of the job,
// the model's hidden size, and whether the job uses low-latency mode (1 or 0).
var RuntimeKeys = []string{"buffer-bytes", "gpus-per-node", "ranks", "hidden", "low-latency"}

// SizeCond reads a variable of the runtime env as NVSHMEM reads a size (ParseSize), or
// Default when the variable is unset. Below names a runtime key (buffer-bytes): the
// condition holds when the size is smaller, and is unknown when the recipe does not
// declare that key or the variable is not a size. Invalid holds when the variable is set
// and is not a size.
type SizeCond struct {
	Env     string `json:"env"`
	Default string `json:"default,omitempty"`
	Below   string `json:"below,omitempty"`
	Invalid bool   `json:"invalid,omitempty"`
}

// VersionCond: the component's version satisfies a constraint.
type VersionCond struct {
	Component string `json:"component"`
	Satisfies string `json:"satisfies"`
	c         Constraint
}

// CommitCond: the component's commit does not contain (Before) or contains
// (AtOrAfter) a commit, decided by git ancestry.
type CommitCond struct {
	Component string `json:"component"`
	Before    string `json:"before,omitempty"`
	AtOrAfter string `json:"at-or-after,omitempty"`
}

// SourceCond: the component comes from one of these source kinds (git, archive, python,
// prebuilt: a vendor's built library copied, not built).
type SourceCond struct {
	Component string   `json:"component"`
	Kind      []string `json:"kind"`
}

// PackageCond: the component is a package of the Python environment whose name matches
// (the NVSHMEM wheel's name carries the CUDA major it was built for: -cu12, -cu13): taken
// from there, or built here and installed there as that package (python-wheel).
type PackageCond struct {
	Component string `json:"component"`
	Matches   string `json:"matches"`
	re        *regexp.Regexp
}

// PatchCond: the component has the patch set ("*": any patch set).
type PatchCond struct {
	Component string `json:"component"`
	Set       string `json:"set"`
}

// KeyCond matches one key of a map of facts: a component's CMake options (option), the
// NVSHMEM build variables its checks expect (build-var), the runtime env or, with a
// component, that component's build env (env), or a host fact (host). Exactly one
// matcher is set.
type KeyCond struct {
	Component string   `json:"component,omitempty"`
	Key       string   `json:"key"`
	Equals    *string  `json:"equals,omitempty"`
	In        []string `json:"in,omitempty"`
	Set       bool     `json:"set,omitempty"`
	Unset     bool     `json:"unset,omitempty"`
	// Is is on or off in CMake's sense (1/ON/TRUE/YES/Y, 0/OFF/FALSE/NO/N/""); an
	// absent key is neither.
	Is      string `json:"is,omitempty"`
	Matches string `json:"matches,omitempty"`
	// Version (host facts only) is a constraint on the fact read as a version.
	Version string `json:"version,omitempty"`
	// InBuild (runtime keys only) names a build fact that lists values, comma-separated:
	// the runtime value is one of them (deepep.hidden-sizes: what the tree compiles in).
	InBuild string `json:"in-build,omitempty"`
	re      *regexp.Regexp
	ver     Constraint
}

// CommandCond: a command build step (of Component, or of any component) matches.
type CommandCond struct {
	Component string `json:"component,omitempty"`
	Matches   string `json:"matches"`
	re        *regexp.Regexp
}

// ToolchainCond: a toolchain version (cuda, torch, python, gcc, cmake) satisfies a
// constraint.
type ToolchainCond struct {
	Tool      string `json:"tool"`
	Satisfies string `json:"satisfies"`
	c         Constraint
}

// ArchCond: the GPU architectures contain one of Contains, or are all within Only.
type ArchCond struct {
	Contains []string `json:"contains,omitempty"`
	Only     []string `json:"only,omitempty"`
}

// Rules is the loaded knowledge base, in file order.
type Rules struct {
	File  string
	rules []Rule
}

// All returns the rules in file order.
func (rs *Rules) All() []Rule { return slices.Clone(rs.rules) }

// Get returns the rule with that id.
func (rs *Rules) Get(id string) (Rule, bool) {
	for _, r := range rs.rules {
		if strings.EqualFold(r.ID, id) {
			return r, true
		}
	}
	return Rule{}, false
}

// RunsAt reports whether the rule id (its case name, "" for a rule without cases) is
// evaluated at stage: a question left open at plan time that preflight asks again, with
// the probed toolchain, can wait for it.
func (rs *Rules) RunsAt(id, caseName string, stage Stage) bool {
	r, ok := rs.Get(id)
	if !ok {
		return false
	}
	stages := r.Stages
	for _, c := range r.Cases {
		if c.Name == caseName && len(c.Stages) > 0 {
			stages = c.Stages
		}
	}
	return slices.Contains(stages, stage)
}

// IDs lists the rule ids in file order.
func (rs *Rules) IDs() []string {
	ids := make([]string, len(rs.rules))
	for i, r := range rs.rules {
		ids[i] = r.ID
	}
	return ids
}

// LoadRules reads the rules built into the binary.
func LoadRules() (*Rules, error) { return ParseRules("compat/rules.yaml", rulesYAML) }

// FileError is a problem in a data file of this package, located by line and column:
// the one error type of the YAML loader.
type FileError = strictyaml.Error

// yamlDoc is a data file being loaded: its syntax tree, so that errors found after
// decoding still point at a line, and the errors found so far.
type yamlDoc struct {
	y    *strictyaml.Doc
	errs []error
}

// decodeStrict decodes data into v with epbuild's YAML loader: strict, and within its
// limits on size, nesting and aliases.
func decodeStrict(file string, data []byte, v any) (*yamlDoc, error) {
	y, err := strictyaml.Decode(file, data, v)
	if err != nil {
		return nil, err
	}
	return &yamlDoc{y: y}, nil
}

// at records an error at a YAML path ($.rules[2].when.all[0].version.satisfies); a path
// with no node (a missing field) falls back to its nearest existing parent.
func (d *yamlDoc) at(path, format string, args ...any) {
	d.errs = append(d.errs, d.y.ErrorAt(path, path+": "+fmt.Sprintf(format, args...)))
}

func (d *yamlDoc) line(path string) int {
	l, _ := d.y.Pos(path)
	return l
}

func (d *yamlDoc) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	return errors.Join(d.errs...)
}

var (
	ruleIDRe = regexp.MustCompile(`^[A-Z][A-Z0-9-]*$`)
	caseRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`)
	envKeyRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	full40   = regexp.MustCompile(`^[0-9a-f]{40}$`)
	compName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	ghRepo   = regexp.MustCompile(`^https://github\.com/[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	gitRev   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
)

// ParseRules decodes a rules file strictly and checks every rule: ids unique, stages and
// severities known, conditions well formed (constraints parse, commits are full 40-hex
// ids, regular expressions compile), fixes well formed. Every problem is reported with
// file:line:col.
func ParseRules(file string, data []byte) (*Rules, error) {
	var raw struct {
		Rules []Rule `json:"rules"`
	}
	d, err := decodeStrict(file, data, &raw)
	if err != nil {
		return nil, err
	}
	if len(raw.Rules) == 0 {
		d.at("$", "no rules under rules:")
	}
	seen := map[string]int{}
	for i := range raw.Rules {
		r := &raw.Rules[i]
		p := fmt.Sprintf("$.rules[%d]", i)
		r.line = d.line(p)
		switch {
		case !ruleIDRe.MatchString(r.ID):
			d.at(p+".id", "rule id %q must be upper-case letters, digits and '-' (R1)", r.ID)
		case seen[r.ID] > 0:
			d.at(p+".id", "rule id %s is used twice", r.ID)
		}
		seen[r.ID]++
		if strings.TrimSpace(r.Title) == "" {
			d.at(p, "rule %s: missing title", r.ID)
		}
		if strings.TrimSpace(r.Message) == "" {
			d.at(p, "rule %s: missing message", r.ID)
		}
		if len(r.Sources) == 0 {
			d.at(p, "rule %s: name at least one source under sources: (an issue, a commit, a release note)", r.ID)
		}
		for j := range r.Cites {
			d.checkCite(fmt.Sprintf("%s.cites[%d]", p, j), &r.Cites[j])
		}
		d.checkStages(p+".stages", r.Stages, true)
		d.checkSeverity(p+".severity", r.Severity, true)
		d.checkFix(p+".fix", r.Fix)
		if r.When != nil {
			d.checkCond(p+".when", r.When)
		}
		if r.When == nil && len(r.Cases) == 0 {
			d.at(p, "rule %s: needs when: or cases:", r.ID)
		}
		names := map[string]bool{}
		for j := range r.Cases {
			c := &r.Cases[j]
			cp := fmt.Sprintf("%s.cases[%d]", p, j)
			if !caseRe.MatchString(c.Name) {
				d.at(cp+".name", "case name %q must be lower-case letters, digits, '.' and '-'", c.Name)
			} else if names[c.Name] {
				d.at(cp+".name", "case %s is used twice in rule %s", c.Name, r.ID)
			}
			names[c.Name] = true
			if c.When == nil {
				d.at(cp, "case %s: missing when:", c.Name)
			} else {
				d.checkCond(cp+".when", c.When)
			}
			d.checkStages(cp+".stages", c.Stages, false)
			d.checkSeverity(cp+".severity", c.Severity, false)
			d.checkFix(cp+".fix", c.Fix)
		}
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return &Rules{File: file, rules: raw.Rules}, nil
}

func (d *yamlDoc) checkCite(p string, c *Cite) {
	c.line = d.line(p)
	if !ghRepo.MatchString(c.Repo) || strings.HasSuffix(c.Repo, ".git") {
		d.at(p+".repo", "repo %q: give https://github.com/OWNER/REPO", c.Repo)
	}
	if !gitRev.MatchString(c.Commit) || strings.Contains(c.Commit, "..") {
		d.at(p+".commit", "commit %q: a full 40-hex commit or a tag", c.Commit)
	}
	if c.Path == "" || strings.HasPrefix(c.Path, "/") || slices.Contains(strings.Split(c.Path, "/"), "..") {
		d.at(p+".path", "path %q: a file's path inside the repository", c.Path)
	}
	if _, _, err := c.Range(); err != nil {
		d.at(p+".lines", "%v", err)
	}
	if strings.TrimSpace(c.Says) == "" {
		d.at(p+".says", "says: the text those lines must contain, copied from them")
	}
}

func (d *yamlDoc) checkStages(p string, ss []Stage, required bool) {
	if len(ss) == 0 && required {
		d.at(p, "name the stages where the rule applies: plan, preflight, host")
	}
	for i, s := range ss {
		switch s {
		case StagePlan, StagePreflight, StageHost:
		default:
			d.at(fmt.Sprintf("%s[%d]", p, i), "unknown stage %q (plan, preflight, host)", s)
		}
	}
}

func (d *yamlDoc) checkSeverity(p string, s Severity, required bool) {
	switch {
	case s == "" && !required:
	case s == SeverityError, s == SeverityWarn, s == SeverityAdvice:
	default:
		d.at(p, "severity %q: use error, warn or advice", s)
	}
}

func (d *yamlDoc) checkFix(p string, f *Fix) {
	if f == nil {
		return
	}
	if len(f.Set) == 0 && len(f.Env) == 0 && strings.TrimSpace(f.Text) == "" {
		d.at(p, "a fix needs set:, env: or text:")
	}
	for i, s := range f.Set {
		k, _, ok := strings.Cut(s, "=")
		if !ok || !strings.Contains(k, ".") {
			d.at(fmt.Sprintf("%s.set[%d]", p, i), "%q is not a --set override (KEY=VALUE, e.g. nvshmem.version=3.4.5)", s)
		}
	}
	for k := range f.Env {
		if !envKeyRe.MatchString(k) {
			d.at(p+".env", "%q is not an environment variable name", k)
		}
	}
}

// checkCond validates one condition and compiles what it needs (constraints, regexps).
func (d *yamlDoc) checkCond(p string, c *Cond) {
	n := 0
	for _, set := range []bool{c.All != nil, c.Any != nil, c.Not != nil, c.Version != nil, c.Commit != nil,
		c.Source != nil, c.Package != nil, c.Patch != nil, c.Option != nil, c.BuildVar != nil, c.Env != nil, c.Command != nil,
		c.Toolchain != nil, c.Requires != "", c.Present != "", c.Arch != nil, c.Recipe != nil, c.Host != nil, c.Runtime != nil, c.Size != nil,
		c.Build != nil, c.Release != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		d.at(p, "a condition has exactly one key (all, any, not, version, commit, source, package, patch, option, build-var, env, command, toolchain, requires, present, arch, recipe, host, runtime, size, build, release); found %d", n)
		return
	}
	comp := func(q, name string) {
		if !compName.MatchString(name) {
			d.at(q+".component", "component %q: a component name such as nvshmem, deepep, nccl", name)
		}
	}
	switch {
	case c.All != nil || c.Any != nil:
		list, key := c.All, "all"
		if c.Any != nil {
			list, key = c.Any, "any"
		}
		if len(list) == 0 {
			d.at(p+"."+key, "%s: needs at least one condition", key)
		}
		for i := range list {
			d.checkCond(fmt.Sprintf("%s.%s[%d]", p, key, i), &list[i])
		}
	case c.Not != nil:
		d.checkCond(p+".not", c.Not)
	case c.Version != nil:
		comp(p+".version", c.Version.Component)
		cons, err := ParseConstraint(c.Version.Satisfies)
		if err != nil {
			d.at(p+".version.satisfies", "%v", err)
		}
		c.Version.c = cons
	case c.Commit != nil:
		cc := c.Commit
		comp(p+".commit", cc.Component)
		if (cc.Before == "") == (cc.AtOrAfter == "") {
			d.at(p+".commit", "give exactly one of before: and at-or-after:")
		}
		for k, v := range map[string]string{"before": cc.Before, "at-or-after": cc.AtOrAfter} {
			if v != "" && !full40.MatchString(v) {
				d.at(p+".commit."+k, "%q is not a full 40-hex commit id (nothing floats: short ids are ambiguous)", v)
			}
		}
	case c.Source != nil:
		comp(p+".source", c.Source.Component)
		if len(c.Source.Kind) == 0 {
			d.at(p+".source", "kind: needs at least one of git, archive, python, prebuilt")
		}
		for i, k := range c.Source.Kind {
			if k != "git" && k != "archive" && k != "python" && k != "prebuilt" {
				d.at(fmt.Sprintf("%s.source.kind[%d]", p, i), "source kind %q: git, archive, python or prebuilt", k)
			}
		}
	case c.Package != nil:
		comp(p+".package", c.Package.Component)
		re, err := regexp.Compile(c.Package.Matches)
		if err != nil || c.Package.Matches == "" {
			d.at(p+".package.matches", "matches: needs a regular expression: %v", err)
		}
		c.Package.re = re
	case c.Patch != nil:
		comp(p+".patch", c.Patch.Component)
		if c.Patch.Set == "" {
			d.at(p+".patch", "set: names a patch set, or \"*\" for any")
		}
	case c.Option != nil:
		comp(p+".option", c.Option.Component)
		d.checkKey(p+".option", c.Option, false)
	case c.BuildVar != nil:
		comp(p+".build-var", c.BuildVar.Component)
		d.checkKey(p+".build-var", c.BuildVar, false)
	case c.Env != nil:
		if c.Env.Component != "" {
			comp(p+".env", c.Env.Component)
		}
		d.checkKey(p+".env", c.Env, false)
	case c.Host != nil:
		if c.Host.Component != "" {
			d.at(p+".host.component", "host facts belong to no component")
		}
		d.checkKey(p+".host", c.Host, true)
	case c.Build != nil:
		if c.Build.Component != "" {
			d.at(p+".build.component", "build facts are named by their key (nvshmem.rc-layout), not by component:")
		}
		if !slices.Contains(BuildKeys, c.Build.Key) {
			d.at(p+".build.key", "build fact %q: one of %s", c.Build.Key, strings.Join(BuildKeys, ", "))
		}
		d.checkKey(p+".build", c.Build, false)
	case c.Release != "":
		comp(p+".release", c.Release)
	case c.Runtime != nil:
		if c.Runtime.Component != "" {
			d.at(p+".runtime.component", "runtime settings belong to no component")
		}
		if !slices.Contains(RuntimeKeys, c.Runtime.Key) {
			d.at(p+".runtime.key", "runtime key %q: one of %s", c.Runtime.Key, strings.Join(RuntimeKeys, ", "))
		}
		d.checkKey(p+".runtime", c.Runtime, false)
		if c.Runtime.InBuild != "" && !slices.Contains(BuildKeys, c.Runtime.InBuild) {
			d.at(p+".runtime.in-build", "in-build: names a build fact (%s), not %q", strings.Join(BuildKeys, ", "), c.Runtime.InBuild)
		}
	case c.Size != nil:
		sc := c.Size
		if !envKeyRe.MatchString(sc.Env) {
			d.at(p+".size.env", "%q is not an environment variable name", sc.Env)
		}
		if (sc.Below == "") == !sc.Invalid {
			d.at(p+".size", "give exactly one of below: and invalid: true")
		}
		if sc.Below != "" && !slices.Contains(RuntimeKeys, sc.Below) {
			d.at(p+".size.below", "below: names a runtime key (%s), not %q", strings.Join(RuntimeKeys, ", "), sc.Below)
		}
		if sc.Default != "" {
			if _, err := ParseSize(sc.Default); err != nil {
				d.at(p+".size.default", "%v", err)
			}
		}
		if sc.Invalid && sc.Default != "" {
			d.at(p+".size.default", "default: is for below:, not invalid:")
		}
		if sc.Below != "" && sc.Default == "" {
			d.at(p+".size", "below: needs default: (the size NVSHMEM uses when %s is unset)", sc.Env)
		}
	case c.Command != nil:
		if c.Command.Component != "" {
			comp(p+".command", c.Command.Component)
		}
		re, err := regexp.Compile(c.Command.Matches)
		if err != nil || c.Command.Matches == "" {
			d.at(p+".command.matches", "matches: needs a regular expression: %v", err)
		}
		c.Command.re = re
	case c.Toolchain != nil:
		switch c.Toolchain.Tool {
		case "cuda", "torch", "python", "gcc", "cmake":
		default:
			d.at(p+".toolchain.tool", "tool %q: cuda, torch, python, gcc or cmake", c.Toolchain.Tool)
		}
		cons, err := ParseConstraint(c.Toolchain.Satisfies)
		if err != nil {
			d.at(p+".toolchain.satisfies", "%v", err)
		}
		c.Toolchain.c = cons
	case c.Arch != nil:
		if (len(c.Arch.Contains) == 0) == (len(c.Arch.Only) == 0) {
			d.at(p+".arch", "give exactly one of contains: and only:")
		}
	case c.Recipe != nil:
		if len(c.Recipe) == 0 {
			d.at(p+".recipe", "recipe: needs at least one recipe name")
		}
	}
}

func (d *yamlDoc) checkKey(p string, k *KeyCond, host bool) {
	if k.Key == "" {
		d.at(p, "missing key:")
	}
	n := 0
	for _, set := range []bool{k.Equals != nil, k.In != nil, k.Set, k.Unset, k.Is != "", k.Matches != "", k.Version != "", k.InBuild != ""} {
		if set {
			n++
		}
	}
	if n != 1 {
		d.at(p, "give exactly one of equals, in, set, unset, is, matches%s (found %d)", map[bool]string{true: ", version"}[host], n)
	}
	if k.Is != "" && k.Is != "on" && k.Is != "off" {
		d.at(p+".is", "is: on or off (CMake truthiness), not %q", k.Is)
	}
	if k.Matches != "" {
		re, err := regexp.Compile(k.Matches)
		if err != nil {
			d.at(p+".matches", "%v", err)
		}
		k.re = re
	}
	if k.InBuild != "" && !strings.HasSuffix(p, ".runtime") {
		d.at(p+".in-build", "in-build: is for runtime keys")
	}
	if k.Version != "" {
		if !host {
			d.at(p+".version", "version: is for host facts; use the version condition for components")
		}
		cons, err := ParseConstraint(k.Version)
		if err != nil {
			d.at(p+".version", "%v", err)
		}
		k.ver = cons
	}
}

// Commits lists every commit a rule's conditions name, for checks that the ancestry
// sources know them.
func (r Rule) Commits() []string {
	var out []string
	r.eachCond(func(c *Cond) {
		if c.Commit != nil {
			out = append(out, c.Commit.Before+c.Commit.AtOrAfter)
		}
	})
	return out
}

// eachCond calls f on every condition of the rule and its cases, each node after those
// below it.
func (r Rule) eachCond(f func(*Cond)) {
	var walk func(c *Cond)
	walk = func(c *Cond) {
		if c == nil {
			return
		}
		for i := range c.All {
			walk(&c.All[i])
		}
		for i := range c.Any {
			walk(&c.Any[i])
		}
		walk(c.Not)
		f(c)
	}
	walk(r.When)
	for i := range r.Cases {
		walk(r.Cases[i].When)
	}
}

// Line is the rule's line in its file, for editors and explain.
func (r Rule) Line() int { return r.line }

// StagesOf lists the stages where the rule, or any of its cases, applies.
func (r Rule) StagesOf() []Stage {
	out := slices.Clone(r.Stages)
	for _, c := range r.Cases {
		for _, s := range c.Stages {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// DataDigest identifies the embedded rules and history: findings evaluated with the same
// data on the same facts are the same, so a caller may keep them.
func DataDigest() string {
	h := sha256.New()
	h.Write(rulesYAML)
	h.Write([]byte{0})
	h.Write(historyYAML)
	return hex.EncodeToString(h.Sum(nil))
}

// Closest lists up to n rule ids nearest to id (by edit distance, case ignored),
// nearest first: what a mistyped id most likely meant.
func (rs *Rules) Closest(id string, n int) []string {
	ids := make([]string, 0, len(rs.rules))
	for _, r := range rs.rules {
		ids = append(ids, r.ID)
	}
	return suggest.Closest(id, ids, n)
}
