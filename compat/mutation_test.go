package compat

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// site is one value of a rule's conditions and how to change it.
type site struct {
	desc  string
	apply func()
}

// TestRuleValuesArePinned changes, one at a time, every value a rule compares against —
// each element of a list (source kinds, in:, arch, recipe), each alternative of a regular
// expression (and its (?i)), each equals, key, on/off, set/unset, package, patch set and
// the direction of each commit condition — and requires that some row of ruleTable sees
// the change. A value that no row notices could be edited, or deleted, without a test
// failing. Version constraints and commit ids are pinned by TestRuleConditionsGolden.
func TestRuleValuesArePinned(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	h, err := LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	rows := ruleTable()
	for _, r := range rules.All() {
		var mine []ruleCase
		for _, tc := range rows {
			if tc.id == r.ID {
				mine = append(mine, tc)
			}
		}
		base := outcomes(t, reparse(t, r), mine, h)
		n := len(sitesOf(ptr(reparse(t, r))))
		if n == 0 {
			continue
		}
		for i := range n {
			m := reparse(t, r)
			s := sitesOf(&m)[i]
			s.apply()
			mr, err := reparseErr(m)
			if err != nil {
				continue // the change made the rule invalid: the parser refuses it
			}
			if slices.Equal(outcomes(t, mr, mine, h), base) {
				t.Errorf("%s: %s: no row of ruleTable notices; add one that tells the two apart", r.ID, s.desc)
			}
		}
	}
}

func ptr(r Rule) *Rule { return &r }

// outcomes evaluates one rule on each row, at the row's stage.
func outcomes(t *testing.T, r Rule, rows []ruleCase, anc Ancestry) []string {
	t.Helper()
	rs := &Rules{File: "mutant", rules: []Rule{r}}
	var out []string
	for _, tc := range rows {
		f := baseFacts()
		if tc.change != nil {
			tc.change(&f)
		}
		fs, err := Evaluate(context.Background(), rs, f, tc.stage, anc)
		if err != nil {
			t.Fatalf("%s/%s: %v", tc.id, tc.name, err)
		}
		out = append(out, outcome(fs, r.ID))
	}
	return out
}

// reparse gives an independent, compiled copy of a rule by writing it back as YAML.
func reparse(t *testing.T, r Rule) Rule {
	t.Helper()
	c, err := reparseErr(r)
	if err != nil {
		t.Fatalf("%s does not read back: %v", r.ID, err)
	}
	return c
}

func reparseErr(r Rule) (Rule, error) {
	b, err := yaml.Marshal(struct {
		Rules []Rule `json:"rules"`
	}{[]Rule{r}})
	if err != nil {
		return Rule{}, err
	}
	rs, err := ParseRules("mutant.yaml", b)
	if err != nil {
		return Rule{}, err
	}
	return rs.rules[0], nil
}

// sitesOf lists the values of r's conditions, in a fixed order, as changes to r itself.
func sitesOf(r *Rule) []site {
	var out []site
	walkCond(r.When, "when", &out)
	for i := range r.Cases {
		walkCond(r.Cases[i].When, "case "+r.Cases[i].Name, &out)
	}
	return out
}

func walkCond(c *Cond, at string, out *[]site) {
	if c == nil {
		return
	}
	add := func(desc string, f func()) { *out = append(*out, site{at + ": " + desc, f}) }
	for i := range c.All {
		walkCond(&c.All[i], at, out)
	}
	for i := range c.Any {
		walkCond(&c.Any[i], at, out)
	}
	walkCond(c.Not, at, out)
	switch {
	case c.Commit != nil:
		cc := c.Commit
		add("commit "+cc.Before+cc.AtOrAfter+": before ↔ at-or-after", func() { cc.Before, cc.AtOrAfter = cc.AtOrAfter, cc.Before })
	case c.Source != nil:
		sc := c.Source
		listSites("source "+sc.Component+" kind", &sc.Kind, func(v string) string {
			return map[string]string{"git": "python", "python": "git", "archive": "python"}[v]
		}, add)
	case c.Package != nil:
		pc := c.Package
		regexSites("package "+pc.Component+" matches", &pc.Matches, add)
	case c.Patch != nil:
		pc := c.Patch
		add("patch "+pc.Set+" → another set", func() { pc.Set = "mutant-set" })
	case c.Option != nil:
		keySites("option", c.Option, add)
	case c.BuildVar != nil:
		keySites("build-var", c.BuildVar, add)
	case c.Env != nil:
		keySites("env", c.Env, add)
	case c.Host != nil:
		keySites("host", c.Host, add)
	case c.Command != nil:
		regexSites("command matches", &c.Command.Matches, add)
	case c.Requires != "":
		add("requires "+c.Requires+" → another name", func() { c.Requires = "mutant" })
	case c.Present != "":
		add("present "+c.Present+" → another name", func() { c.Present = "mutant" })
	case c.Arch != nil:
		mut := func(string) string { return "sm_1" }
		listSites("arch contains", &c.Arch.Contains, mut, add)
		listSites("arch only", &c.Arch.Only, mut, add)
	case c.Recipe != nil:
		listSites("recipe", &c.Recipe, func(string) string { return "mutant" }, add)
	case c.Runtime != nil:
		keySites("runtime", c.Runtime, add)
	case c.Build != nil:
		keySites("build", c.Build, add)
	case c.Release != "":
		add("release "+c.Release+" → another component", func() { c.Release = "mutant" })
	case c.Size != nil:
		sc := c.Size
		add("size "+sc.Env+": another variable", func() { sc.Env += "_MUTANT" })
		if sc.Default != "" {
			add("size "+sc.Env+" default "+sc.Default+" → twice as much", func() {
				n, _ := ParseSize(sc.Default)
				sc.Default = fmt.Sprint(2 * n)
			})
		}
		add("size "+sc.Env+": below ↔ invalid", func() {
			if sc.Invalid {
				sc.Invalid, sc.Below, sc.Default = false, RuntimeKeys[0], "1G"
			} else {
				sc.Invalid, sc.Below, sc.Default = true, "", ""
			}
		})
	}
}

// listSites drops each element of a list of two or more, or replaces a single one.
func listSites(what string, l *[]string, other func(string) string, add func(string, func())) {
	switch {
	case len(*l) == 1:
		v := (*l)[0]
		add(fmt.Sprintf("%s [%s] → [%s]", what, v, other(v)), func() { *l = []string{other(v)} })
	case len(*l) > 1:
		for i, v := range *l {
			add(fmt.Sprintf("%s: drop %s", what, v), func() { *l = slices.Delete(slices.Clone(*l), i, i+1) })
		}
	}
}

func keySites(what string, k *KeyCond, add func(string, func())) {
	at := what + " " + k.Key
	add(at+": another key", func() { k.Key += "_MUTANT" })
	switch {
	case k.Equals != nil:
		v := *k.Equals
		add(fmt.Sprintf("%s equals %q → another value", at, v), func() { w := v + "-mutant"; k.Equals = &w })
	case k.In != nil:
		listSites(at+" in", &k.In, func(v string) string { return v + "-mutant" }, add)
	case k.Set:
		add(at+" set → unset", func() { k.Set, k.Unset = false, true })
	case k.Unset:
		add(at+" unset → set", func() { k.Set, k.Unset = true, false })
	case k.Is != "":
		add(at+" is "+k.Is+" → the other", func() { k.Is = map[string]string{"on": "off", "off": "on"}[k.Is] })
	case k.Matches != "":
		regexSites(at+" matches", &k.Matches, add)
	}
}

// regexSites drops each alternative of each alternation in re (and a (?i) flag); a
// regular expression without alternatives is replaced by one that matches nothing seen.
func regexSites(what string, re *string, add func(string, func())) {
	orig := *re
	variants := regexVariants(orig)
	if len(variants) == 0 {
		add(fmt.Sprintf("%s %q → another expression", what, orig), func() { *re = "^MUTANT$" })
		return
	}
	for _, v := range variants {
		add(fmt.Sprintf("%s %q → %q", what, orig, v), func() { *re = v })
	}
}

// regexVariants gives re with one alternative removed, for every alternation (top level
// or in a group), and without a leading (?i).
func regexVariants(re string) []string {
	var out []string
	if rest, ok := strings.CutPrefix(re, "(?i)"); ok {
		out = append(out, rest)
	}
	// spans of groups: [open+1, close) for each (...), and the whole expression
	type span struct{ lo, hi int }
	spans := []span{{0, len(re)}}
	var stack []int
	for i := 0; i < len(re); i++ {
		switch re[i] {
		case '\\':
			i++
		case '[':
			for i++; i < len(re) && re[i] != ']'; i++ {
				if re[i] == '\\' {
					i++
				}
			}
		case '(':
			stack = append(stack, i)
		case ')':
			if len(stack) > 0 {
				o := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				spans = append(spans, span{o + 1, i})
			}
		}
	}
	for _, sp := range spans {
		// top-level | inside this span
		var bars []int
		depth := 0
		for i := sp.lo; i < sp.hi; i++ {
			switch re[i] {
			case '\\':
				i++
			case '[':
				for i++; i < sp.hi && re[i] != ']'; i++ {
					if re[i] == '\\' {
						i++
					}
				}
			case '(':
				depth++
			case ')':
				depth--
			case '|':
				if depth == 0 {
					bars = append(bars, i)
				}
			}
		}
		if len(bars) == 0 {
			continue
		}
		bounds := append(append([]int{sp.lo - 1}, bars...), sp.hi)
		var alts []string
		for j := 0; j+1 < len(bounds); j++ {
			alts = append(alts, re[bounds[j]+1:bounds[j+1]])
		}
		for j := range alts {
			rest := slices.Delete(slices.Clone(alts), j, j+1)
			out = append(out, re[:sp.lo]+strings.Join(rest, "|")+re[sp.hi:])
		}
	}
	return out
}

func TestRegexVariants(t *testing.T) {
	got := regexVariants(`(?i)^(ibrc|ucx|none)$`)
	want := []string{`^(ibrc|ucx|none)$`, `(?i)^(ucx|none)$`, `(?i)^(ibrc|none)$`, `(?i)^(ibrc|ucx)$`}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := regexVariants(`(^|[\s;&|(])(a|b)`); !slices.Equal(got, []string{`([\s;&|(])(a|b)`, `(^)(a|b)`, `(^|[\s;&|(])(b)`, `(^|[\s;&|(])(a)`}) {
		t.Errorf("character classes and groups: %q", got)
	}
	if got := regexVariants(`^[^0NnFf]`); len(got) != 0 {
		t.Errorf("no alternation: %q", got)
	}
}
