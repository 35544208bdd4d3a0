package compat

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/rules.golden from rules.yaml")

// TestRuleConditionsGolden pins every rule's stages, severities and conditions — versions,
// commits, keys and values — to testdata/rules.golden, one line per rule and case: a
// change to rules.yaml shows as a change of that file, made on purpose
// (go test ./compat -run Golden -update) and reviewed with the rule.
func TestRuleConditionsGolden(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	got := goldenText(rules)
	file := filepath.Join("testdata", "rules.golden")
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (write it with go test ./compat -run Golden -update)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			g, w := at(gl, i), at(wl, i)
			if g != w {
				t.Fatalf("rules.yaml and testdata/rules.golden differ at line %d:\n rules.yaml: %s\n golden:     %s\n(if the rule change is meant, rewrite the golden: go test ./compat -run Golden -update)", i+1, g, w)
			}
		}
	}
}

func at(l []string, i int) string {
	if i < len(l) {
		return l[i]
	}
	return "(end)"
}

func goldenText(rules *Rules) string {
	var b strings.Builder
	for _, r := range rules.All() {
		fmt.Fprintf(&b, "%s [%s %s]", r.ID, joinStages(r.Stages), r.Severity)
		if r.When != nil {
			fmt.Fprintf(&b, " %s", condText(r.When))
		}
		b.WriteString("\n")
		for _, c := range r.Cases {
			st, sev := r.Stages, r.Severity
			if len(c.Stages) > 0 {
				st = c.Stages
			}
			if c.Severity != "" {
				sev = c.Severity
			}
			fmt.Fprintf(&b, "%s/%s [%s %s] %s\n", r.ID, c.Name, joinStages(st), sev, condText(c.When))
		}
	}
	return b.String()
}

func joinStages(ss []Stage) string {
	var out []string
	for _, s := range ss {
		out = append(out, string(s))
	}
	return strings.Join(out, ",")
}

// condText writes a condition on one line, in a form independent of YAML layout.
func condText(c *Cond) string {
	list := func(name string, cs []Cond) string {
		var parts []string
		for i := range cs {
			parts = append(parts, condText(&cs[i]))
		}
		return name + "(" + strings.Join(parts, ", ") + ")"
	}
	switch {
	case c.All != nil:
		return list("all", c.All)
	case c.Any != nil:
		return list("any", c.Any)
	case c.Not != nil:
		return "not(" + condText(c.Not) + ")"
	case c.Version != nil:
		return fmt.Sprintf("version(%s %s)", c.Version.Component, c.Version.Satisfies)
	case c.Commit != nil:
		if c.Commit.Before != "" {
			return fmt.Sprintf("commit(%s before %s)", c.Commit.Component, c.Commit.Before)
		}
		return fmt.Sprintf("commit(%s at-or-after %s)", c.Commit.Component, c.Commit.AtOrAfter)
	case c.Source != nil:
		return fmt.Sprintf("source(%s %s)", c.Source.Component, strings.Join(c.Source.Kind, "|"))
	case c.Package != nil:
		return fmt.Sprintf("package(%s ~ %s)", c.Package.Component, c.Package.Matches)
	case c.Patch != nil:
		return fmt.Sprintf("patch(%s %s)", c.Patch.Component, c.Patch.Set)
	case c.Option != nil:
		return "option(" + keyText(c.Option) + ")"
	case c.BuildVar != nil:
		return "build-var(" + keyText(c.BuildVar) + ")"
	case c.Env != nil:
		return "env(" + keyText(c.Env) + ")"
	case c.Host != nil:
		return "host(" + keyText(c.Host) + ")"
	case c.Command != nil:
		return fmt.Sprintf("command(%s ~ %s)", c.Command.Component, c.Command.Matches)
	case c.Toolchain != nil:
		return fmt.Sprintf("toolchain(%s %s)", c.Toolchain.Tool, c.Toolchain.Satisfies)
	case c.Requires != "":
		return "requires(" + c.Requires + ")"
	case c.Present != "":
		return "present(" + c.Present + ")"
	case c.Arch != nil:
		if c.Arch.Contains != nil {
			return "arch(contains " + strings.Join(c.Arch.Contains, "|") + ")"
		}
		return "arch(only " + strings.Join(c.Arch.Only, "|") + ")"
	case c.Recipe != nil:
		return "recipe(" + strings.Join(c.Recipe, "|") + ")"
	case c.Runtime != nil:
		return "runtime(" + keyText(c.Runtime) + ")"
	case c.Build != nil:
		return "build(" + keyText(c.Build) + ")"
	case c.Release != "":
		return "release(" + c.Release + ")"
	case c.Size != nil:
		if c.Size.Invalid {
			return "size(" + c.Size.Env + " invalid)"
		}
		return fmt.Sprintf("size(%s default %s below %s)", c.Size.Env, c.Size.Default, c.Size.Below)
	}
	return "?"
}

func keyText(k *KeyCond) string {
	s := k.Key
	if k.Component != "" {
		s = k.Component + " " + s
	}
	switch {
	case k.Equals != nil:
		return fmt.Sprintf("%s = %q", s, *k.Equals)
	case k.In != nil:
		return fmt.Sprintf("%s in %s", s, strings.Join(slices.Clone(k.In), "|"))
	case k.Set:
		return s + " set"
	case k.Unset:
		return s + " unset"
	case k.Is != "":
		return s + " is " + k.Is
	case k.Matches != "":
		return s + " ~ " + k.Matches
	case k.Version != "":
		return s + " version " + k.Version
	case k.InBuild != "":
		return s + " in build " + k.InBuild
	}
	return s + " ?"
}
