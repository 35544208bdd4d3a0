package compat

import (
	"slices"
	"strings"
	"testing"
)

// hostConds lists every host condition of every rule, with where it is.
func hostConds(rules *Rules) map[string][]*KeyCond {
	out := map[string][]*KeyCond{}
	var walk func(at string, c *Cond)
	walk = func(at string, c *Cond) {
		if c == nil {
			return
		}
		for i := range c.All {
			walk(at, &c.All[i])
		}
		for i := range c.Any {
			walk(at, &c.Any[i])
		}
		walk(at, c.Not)
		if c.Host != nil {
			out[at] = append(out[at], c.Host)
		}
	}
	for _, r := range rules.All() {
		walk(r.ID, r.When)
		for i := range r.Cases {
			walk(r.ID+"/"+r.Cases[i].Name, r.Cases[i].When)
		}
	}
	return out
}

// Every host key a rule reads is a listed fact, compared only to values the fact can
// take; every listed fact is read by some rule.
func TestHostFactsCoverRules(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	facts, err := LoadHostFacts()
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]HostFact{}
	for _, f := range facts {
		byKey[f.Key] = f
	}
	used := map[string]bool{}
	for at, ks := range hostConds(rules) {
		for _, k := range ks {
			used[k.Key] = true
			f, ok := byKey[k.Key]
			if !ok {
				t.Errorf("%s reads host fact %q, which host-facts.yaml does not list", at, k.Key)
				continue
			}
			vals := k.In
			if k.Equals != nil {
				vals = append(vals, *k.Equals)
			}
			for _, v := range vals {
				if len(f.Values) > 0 && !slices.Contains(f.Values, v) {
					t.Errorf("%s compares host fact %s to %q; it takes %s", at, k.Key, v, strings.Join(f.Values, ", "))
				}
			}
		}
	}
	for _, f := range facts {
		if !used[f.Key] {
			t.Errorf("host fact %s is read by no rule", f.Key)
		}
	}
}

func TestParseHostFactsErrors(t *testing.T) {
	_, err := ParseHostFacts("host-facts.yaml", []byte("facts:\n  - key: a\n    read: x\n  - key: a\n    read: y\n  - key: b\n"))
	for _, want := range []string{"host-facts.yaml:4:", "listed twice", "host-facts.yaml:6:", "where it is read"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
	if _, err := ParseHostFacts("host-facts.yaml", []byte("facts:\n  - key: a\n    reads: x\n")); err == nil || !strings.Contains(err.Error(), "host-facts.yaml:3:") {
		t.Errorf("an unknown field: %v", err)
	}
}
