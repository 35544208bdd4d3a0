package compat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Finding is a rule (or one of its cases) that holds for the facts at a stage. A rule
// that could not be decided (a commit unknown to the ancestry source, a host fact not
// read, a recipe that allows versions on both sides of a boundary) is a finding too,
// with Unknown set and at most warn severity: it never silently passes.
type Finding struct {
	ID       string   `json:"id"`
	Case     string   `json:"case,omitempty"`
	Title    string   `json:"title"`
	Severity Severity `json:"severity"`
	Message  string   `json:"message"`
	Fix      *Fix     `json:"fix,omitempty"`
	Sources  []string `json:"sources"`
	Stage    Stage    `json:"stage"`
	Unknown  bool     `json:"unknown,omitempty"`
	// IfDecided is, for an undecided finding, the severity it has if its condition holds:
	// an undecided error stops a plan unless the user allows it (--allow-undecided).
	IfDecided Severity `json:"if_decided,omitempty"`
	// Because lists the facts that decided (or could not decide) the condition.
	Because []string `json:"because,omitempty"`
}

// Evaluate checks every rule that applies at stage against facts. Findings come most
// severe first, then in file order. Commit conditions ask anc (nil: every commit is
// unknown). An error is returned only when the ancestry source fails for another reason
// than not knowing a commit, or ctx ends.
func Evaluate(ctx context.Context, rules *Rules, facts Facts, stage Stage, anc Ancestry) ([]Finding, error) {
	ev := &evaluator{ctx: ctx, facts: &facts, anc: anc, memo: map[[3]string]ancAnswer{}}
	var out []Finding
	for _, r := range rules.rules {
		cases := r.Cases
		if len(cases) == 0 {
			cases = []Case{{}}
		}
		for _, c := range cases {
			stages := r.Stages
			if len(c.Stages) > 0 {
				stages = c.Stages
			}
			if !slices.Contains(stages, stage) {
				continue
			}
			res := yes
			var why []string
			for _, w := range []*Cond{r.When, c.When} {
				if w == nil {
					continue
				}
				t, ws := ev.eval(w)
				if ev.err != nil {
					return nil, ev.err
				}
				if t == no {
					res = no
					break
				}
				if t == unknown {
					res = unknown
				}
				for _, w := range ws {
					if !slices.Contains(why, w) {
						why = append(why, w)
					}
				}
			}
			if res == no {
				continue
			}
			f := Finding{
				ID: r.ID, Case: c.Name, Title: r.Title, Severity: r.Severity, Message: r.Message,
				Fix: r.Fix, Sources: r.Sources, Stage: stage, Because: why,
			}
			if c.Severity != "" {
				f.Severity = c.Severity
			}
			if c.Message != "" {
				f.Message = c.Message
			}
			if c.Fix != nil {
				f.Fix = c.Fix
			}
			if res == unknown {
				f.Unknown, f.IfDecided = true, f.Severity
				if f.Severity == SeverityError {
					f.Severity = SeverityWarn
				}
				f.Message = "unknown: could not decide (" + strings.Join(why, "; ") + "); if it holds: " + f.Message
			}
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Severity.rank() < out[j].Severity.rank() })
	return out, nil
}

// HasErrors reports whether any finding is an error.
func HasErrors(fs []Finding) bool {
	for _, f := range fs {
		if f.Severity == SeverityError {
			return true
		}
	}
	return false
}

// Undecided lists the findings that could not be decided and are errors if they hold.
func Undecided(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Unknown && f.IfDecided == SeverityError {
			out = append(out, f)
		}
	}
	return out
}

// Name is the finding's rule id with its case: "R3/qp-layout".
func (f Finding) Name() string {
	if f.Case != "" {
		return f.ID + "/" + f.Case
	}
	return f.ID
}

// IDs lists the distinct rule ids of findings, in order.
func IDs(fs []Finding) []string {
	var ids []string
	for _, f := range fs {
		if !slices.Contains(ids, f.ID) {
			ids = append(ids, f.ID)
		}
	}
	return ids
}

type ancAnswer struct {
	ok  bool
	err error
}

type evaluator struct {
	ctx   context.Context
	facts *Facts
	anc   Ancestry
	memo  map[[3]string]ancAnswer
	cat   *Catalog
	// err is a failure that stops the evaluation (not an unknown commit).
	err error
}

// eval gives a condition's truth (Kleene logic) and the facts that decided it: for all
// that holds every part's, for any the first part that holds, for not the inner
// facts (they describe what is, so they stay true under negation).
func (ev *evaluator) eval(c *Cond) (tri, []string) {
	switch {
	case c.All != nil:
		return ev.combine(c.All, no, yes)
	case c.Any != nil:
		return ev.combine(c.Any, yes, no)
	case c.Not != nil:
		t, w := ev.eval(c.Not)
		switch t {
		case yes:
			return no, w
		case no:
			return yes, w
		}
		return unknown, w
	case c.Version != nil:
		comp, ok := ev.facts.Component(c.Version.Component)
		if !ok {
			return no, []string{"no component " + c.Version.Component}
		}
		return one(decideVersion(comp.Name, comp.Version, c.Version.c))
	case c.Commit != nil:
		return ev.commit(c.Commit)
	case c.Source != nil:
		comp, ok := ev.facts.Component(c.Source.Component)
		if !ok {
			return no, []string{"no component " + c.Source.Component}
		}
		desc := []string{fmt.Sprintf("the source of %s is %s", comp.Name, comp.Source)}
		return triOf(slices.Contains(c.Source.Kind, comp.Source)), desc
	case c.Package != nil:
		comp, ok := ev.facts.Component(c.Package.Component)
		if !ok {
			return no, []string{"no component " + c.Package.Component}
		}
		if comp.Package == "" {
			return no, []string{fmt.Sprintf("%s is not a package of the Python environment (a %s source)", comp.Name, comp.Source)}
		}
		return triOf(c.Package.re.MatchString(comp.Package)), []string{fmt.Sprintf("%s is the Python package %s", comp.Name, comp.Package)}
	case c.Patch != nil:
		comp, ok := ev.facts.Component(c.Patch.Component)
		if !ok {
			return no, []string{"no component " + c.Patch.Component}
		}
		has := c.Patch.Set == "*" && len(comp.Patches) > 0 || slices.Contains(comp.Patches, c.Patch.Set)
		switch {
		case len(comp.Patches) == 0:
			return triOf(has), []string{comp.Name + " has no patch set"}
		case has:
			return yes, []string{fmt.Sprintf("%s has patch sets %s", comp.Name, strings.Join(comp.Patches, ", "))}
		}
		return no, []string{fmt.Sprintf("%s has patch sets %s, not %s", comp.Name, strings.Join(comp.Patches, ", "), c.Patch.Set)}
	case c.Option != nil:
		comp, ok := ev.facts.Component(c.Option.Component)
		if !ok {
			return no, []string{"no component " + c.Option.Component}
		}
		return matchKey(comp.Name+" option", comp.Options, c.Option, false)
	case c.BuildVar != nil:
		comp, ok := ev.facts.Component(c.BuildVar.Component)
		if !ok {
			return no, []string{"no component " + c.BuildVar.Component}
		}
		return matchKey(comp.Name+" expected build variable", comp.BuildVars, c.BuildVar, false)
	case c.Env != nil:
		if c.Env.Component == "" {
			return matchKey("runtime env", ev.facts.Env, c.Env, false)
		}
		comp, ok := ev.facts.Component(c.Env.Component)
		if !ok {
			return no, []string{"no component " + c.Env.Component}
		}
		return matchKey(comp.Name+" build env", comp.BuildEnv, c.Env, false)
	case c.Host != nil:
		if ev.facts.Host == nil {
			return unknown, []string{"host fact " + c.Host.Key + " not read (no host probed)"}
		}
		return matchKey("host", ev.facts.Host, c.Host, true)
	case c.Runtime != nil:
		if _, ok := ev.facts.Runtime[c.Runtime.Key]; !ok && !c.Runtime.Set && !c.Runtime.Unset {
			return unknown, []string{"the recipe declares no runtime." + c.Runtime.Key}
		}
		if c.Runtime.InBuild != "" {
			return ev.inBuild(c.Runtime)
		}
		return matchKey("runtime", ev.facts.Runtime, c.Runtime, false)
	case c.Build != nil:
		if _, ok := ev.facts.Build[c.Build.Key]; !ok && !c.Build.Set && !c.Build.Unset {
			return unknown, []string{"build fact " + c.Build.Key + " is not recorded (it is read from the built tree; before the build, or for an install that did not record it, it is unknown)"}
		}
		return matchKey("build", ev.facts.Build, c.Build, false)
	case c.Release != "":
		return ev.release(c.Release)
	case c.Size != nil:
		return ev.size(c.Size)
	case c.Command != nil:
		for _, comp := range ev.facts.Components {
			if c.Command.Component != "" && comp.Name != c.Command.Component {
				continue
			}
			for _, argv := range comp.Commands {
				line := strings.Join(argv, " ")
				if c.Command.re.MatchString(line) {
					return yes, []string{fmt.Sprintf("%s runs %q", comp.Name, line)}
				}
			}
		}
		return no, []string{"no command step matches " + c.Command.Matches}
	case c.Toolchain != nil:
		return one(decideVersion(c.Toolchain.Tool, ev.facts.Toolchain.tool(c.Toolchain.Tool), c.Toolchain.c))
	case c.Requires != "":
		if slices.Contains(ev.facts.Toolchain.Require, c.Requires) {
			return yes, []string{"the recipe requires " + c.Requires}
		}
		return no, []string{"the recipe does not require " + c.Requires}
	case c.Present != "":
		if ev.facts.Toolchain.Present == nil {
			return unknown, []string{"whether the build host has " + c.Present + " is not probed yet"}
		}
		if slices.Contains(ev.facts.Toolchain.Present, c.Present) {
			return yes, []string{"the build host has " + c.Present}
		}
		return no, []string{"the build host lacks " + c.Present}
	case c.Arch != nil:
		arch := ev.facts.Toolchain.Arch
		desc := []string{"GPU architectures " + strings.Join(arch, ",")}
		if len(arch) == 0 {
			// no architecture demanded: DeepEP's and NVSHMEM's defaults, nothing newer
			desc = []string{"no GPU architecture named"}
		}
		if len(c.Arch.Contains) > 0 {
			for _, a := range arch {
				if slices.Contains(c.Arch.Contains, a) {
					return yes, desc
				}
			}
			return no, desc
		}
		for _, a := range arch {
			if !slices.Contains(c.Arch.Only, a) {
				return no, desc
			}
		}
		return yes, desc
	case c.Recipe != nil:
		desc := []string{"recipe " + ev.facts.Recipe}
		return triOf(slices.Contains(c.Recipe, ev.facts.Recipe)), desc
	}
	return unknown, []string{"empty condition"}
}

func (ev *evaluator) commit(cc *CommitCond) (tri, []string) {
	comp, ok := ev.facts.Component(cc.Component)
	if !ok {
		return no, []string{"no component " + cc.Component}
	}
	mark, before := cc.AtOrAfter, false
	if cc.Before != "" {
		mark, before = cc.Before, true
	}
	if comp.Commit == "" || comp.Repo == "" {
		return unknown, []string{fmt.Sprintf("%s has no git commit (a %s source): whether it contains %s is unknown", comp.Name, comp.Source, short(mark))}
	}
	if ev.anc == nil {
		return unknown, []string{fmt.Sprintf("no ancestry source to tell whether %s %s contains %s", comp.Name, short(comp.Commit), short(mark))}
	}
	key := [3]string{RepoKey(comp.Repo), mark, comp.Commit}
	a, seen := ev.memo[key]
	if !seen {
		a.ok, a.err = ev.anc.IsAncestor(ev.ctx, comp.Repo, mark, comp.Commit)
		ev.memo[key] = a
	}
	if a.err != nil {
		if errors.Is(a.err, ErrUnknownCommit) {
			return unknown, []string{fmt.Sprintf("whether %s %s contains %s is unknown: %v", comp.Name, short(comp.Commit), short(mark), a.err)}
		}
		ev.err = fmt.Errorf("decide whether %s %s contains %s in %s: %w", comp.Name, comp.Commit, mark, comp.Repo, a.err)
		return unknown, nil
	}
	desc := fmt.Sprintf("%s %s contains %s", comp.Name, short(comp.Commit), short(mark))
	if !a.ok {
		desc = fmt.Sprintf("%s %s does not contain %s", comp.Name, short(comp.Commit), short(mark))
	}
	return triOf(a.ok != before), []string{desc}
}

// release decides whether a component is a published release, so that its version
// number says what the release notes say of it: an archive, a prebuilt archive or a wheel is; a git tree is
// only at a commit the catalogue pins for that version (a branch's own version line can
// name a release whose contents it does not have).
func (ev *evaluator) release(name string) (tri, []string) {
	comp, ok := ev.facts.Component(name)
	if !ok {
		return no, []string{"no component " + name}
	}
	switch comp.Source {
	case "archive", "python", "prebuilt":
		return yes, []string{fmt.Sprintf("%s %s is a release (a %s source)", comp.Name, comp.Version, comp.Source)}
	case "git":
		if ev.cat == nil {
			cat, err := LoadCatalog()
			if err != nil {
				ev.err = fmt.Errorf("load the release catalogue: %w", err)
				return unknown, nil
			}
			ev.cat = cat
		}
		if r, ok := ev.cat.ReleaseAt(comp.Name, comp.Repo, comp.Commit); ok && sameVersion(r.Version, comp.Version) {
			if r.Devel {
				return no, []string{fmt.Sprintf("%s %s is the devel tree %s the catalogue pins, no release", comp.Name, short(comp.Commit), r.Version)}
			}
			return yes, []string{fmt.Sprintf("%s %s is release %s", comp.Name, short(comp.Commit), r.Version)}
		}
		return no, []string{fmt.Sprintf("%s %s (version %s) is not a commit the catalogue pins for a release", comp.Name, short(comp.Commit), comp.Version)}
	}
	return no, []string{fmt.Sprintf("%s is a %s source", comp.Name, comp.Source)}
}

// size decides a size condition: the runtime env variable read as NVSHMEM reads a size.
func (ev *evaluator) size(sc *SizeCond) (tri, []string) {
	v, set := ev.facts.Env[sc.Env]
	n, err := ParseSize(v)
	desc := fmt.Sprintf("runtime env %s=%s", sc.Env, v)
	if set && err == nil {
		desc += " (" + FormatSize(n) + " bytes)"
	}
	if sc.Invalid {
		if !set {
			return no, []string{"runtime env " + sc.Env + " is unset"}
		}
		if err != nil {
			return yes, []string{desc + ": " + err.Error()}
		}
		return no, []string{desc}
	}
	switch {
	case set && err != nil:
		return unknown, []string{desc + ": " + err.Error()}
	case !set:
		n, _ = ParseSize(sc.Default) // checked when the rules were loaded
		desc = fmt.Sprintf("runtime env %s is unset: %s bytes, NVSHMEM's default", sc.Env, FormatSize(n))
	}
	lim, ok := ev.facts.Runtime[sc.Below]
	if !ok {
		return unknown, []string{desc, "the recipe declares no runtime." + sc.Below}
	}
	l, err := strconv.ParseUint(lim, 10, 64)
	if err != nil {
		return unknown, []string{desc, fmt.Sprintf("runtime %s=%q is not a byte count", sc.Below, lim)}
	}
	return triOf(n < l), []string{desc, fmt.Sprintf("runtime %s=%s", sc.Below, FormatSize(l))}
}

// matchKey applies a KeyCond's matcher to m[k.Key]. For host facts a missing key is
// unknown (the probe did not read it); elsewhere a missing key is simply unset.
func matchKey(what string, m map[string]string, k *KeyCond, host bool) (tri, []string) {
	v, ok := m[k.Key]
	desc := fmt.Sprintf("%s %s=%s", what, k.Key, v)
	if !ok {
		desc = fmt.Sprintf("%s %s is unset", what, k.Key)
	}
	switch {
	case k.Set:
		return triOf(ok), []string{desc}
	case k.Unset:
		return triOf(!ok), []string{desc}
	}
	if !ok {
		if host {
			return unknown, []string{"host fact " + k.Key + " was not read"}
		}
		return no, []string{desc}
	}
	switch {
	case k.Equals != nil:
		return triOf(v == *k.Equals), []string{desc}
	case k.In != nil:
		return triOf(slices.Contains(k.In, v)), []string{desc}
	case k.Is != "":
		on, off := cmakeBool(v)
		if k.Is == "on" {
			return triOf(on), []string{desc}
		}
		return triOf(off), []string{desc}
	case k.re != nil:
		return triOf(k.re.MatchString(v)), []string{desc}
	case k.Version != "" && v == "none":
		// read, and not installed: no version of it satisfies anything
		return no, []string{fmt.Sprintf("host %s is not installed", k.Key)}
	case k.Version != "":
		return one(decideVersion("host "+k.Key, v, k.ver))
	}
	return unknown, []string{desc}
}

// inBuild decides whether a runtime value is one of a build fact's comma-separated
// values; unknown before the build has recorded the fact.
func (ev *evaluator) inBuild(k *KeyCond) (tri, []string) {
	v := ev.facts.Runtime[k.Key]
	list, ok := ev.facts.Build[k.InBuild]
	if !ok {
		return unknown, []string{"runtime " + k.Key + "=" + v, "build fact " + k.InBuild + " is not recorded (it is read from the built tree)"}
	}
	vals := strings.Split(list, ",")
	for i := range vals {
		vals[i] = strings.TrimSpace(vals[i])
	}
	return triOf(slices.Contains(vals, v)), []string{"runtime " + k.Key + "=" + v, "build " + k.InBuild + "=" + list}
}

// cmakeBool reads a value as CMake's if() does for the usual spellings.
func cmakeBool(v string) (on, off bool) {
	switch strings.ToUpper(strings.TrimSpace(v)) {
	case "1", "ON", "TRUE", "YES", "Y":
		return true, false
	case "0", "OFF", "FALSE", "NO", "N", "":
		return false, true
	}
	return false, false
}

func one(t tri, why string) (tri, []string) { return t, []string{why} }

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// combine is all (stop on no) and any (stop on yes) in three-valued logic: the first
// condition with the stop value decides with its reasons; otherwise any unknown makes
// the whole unknown, else the result is other with every reason.
func (ev *evaluator) combine(cs []Cond, stop, other tri) (tri, []string) {
	var why, unk []string
	sawUnknown := false
	for i := range cs {
		t, w := ev.eval(&cs[i])
		switch t {
		case stop:
			return stop, w
		case unknown:
			sawUnknown = true
			unk = append(unk, w...)
		default:
			why = append(why, w...)
		}
	}
	if sawUnknown {
		return unknown, unk
	}
	return other, why
}

// sameVersion reports whether a and b are the same vendor version ("3.5.19-1").
func sameVersion(a, b string) bool {
	va, err1 := ParseVersion(a)
	vb, err2 := ParseVersion(b)
	return err1 == nil && err2 == nil && va.Equal(vb)
}
