package compat

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
)

// Axis is one dimension of a CI matrix: a --set key and its values. "nvshmem=3.3.24,3.4.5"
// is the key nvshmem.version; a key with a dot ("toolchain.cuda=12.9,13.0") is used as is.
// On a component axis the value Bundled is the component as the Python environment ships
// it (torch's own NCCL), where the recipe takes it from there: nccl.source=python.
type Axis struct {
	Name   string   `json:"name"`
	Key    string   `json:"key"`
	Values []string `json:"values"`
}

// Bundled is the value of a component axis that keeps the component the recipe takes from
// the Python environment there (the NCCL torch ships) instead of building a release.
const Bundled = "bundled"

// Source kinds an axis value may name after its version (3.4.5:git): the catalogue's pin
// of that kind, as --set COMPONENT.source=KIND picks it. Without one a version keeps the
// recipe's kind: single-node's NVSHMEM is the Python environment's wheel, so its
// nvshmem=3.4.5 pins that wheel, and nvshmem=3.4.5:git builds NVIDIA's v3.4.5 from source.
var axisSources = []string{"git", "archive"}

// Sets are the --set overrides that give this axis the value v.
func (a Axis) Sets(v string) []string {
	if a.Key != a.Name+".version" {
		return []string{a.Key + "=" + v}
	}
	if v == Bundled {
		return []string{a.Name + ".source=python"}
	}
	if ver, kind, ok := strings.Cut(v, ":"); ok {
		return []string{a.Key + "=" + ver, a.Name + ".source=" + kind}
	}
	return []string{a.Key + "=" + v}
}

// ParseAxis reads NAME=V1,V2,...; a component name's values must be vendor versions,
// each with an optional source kind (3.4.5:git, 3.3.20:archive), or bundled.
func ParseAxis(s string) (Axis, error) {
	name, vals, ok := strings.Cut(s, "=")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return Axis{}, fmt.Errorf("axis %q: expected COMPONENT=V1,V2 (e.g. nvshmem=3.4.5,3.5.19-1)", s)
	}
	return NewAxis(name, strings.Split(vals, ","))
}

// NewAxis builds an axis from a name (a component, or a --set key with a dot) and values.
func NewAxis(name string, values []string) (Axis, error) {
	a := Axis{Name: name, Key: name}
	if !strings.Contains(name, ".") {
		if !compName.MatchString(name) {
			return Axis{}, fmt.Errorf("axis %q: not a component name", name)
		}
		a.Key = name + ".version"
	}
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if strings.HasSuffix(a.Key, ".version") && v != Bundled {
			ver, kind, hasKind := strings.Cut(v, ":")
			if _, err := ParseVersion(ver); err != nil {
				return Axis{}, fmt.Errorf("axis %s: %w (or %s: the one the Python environment ships)", name, err, Bundled)
			}
			if hasKind && !slices.Contains(axisSources, kind) {
				return Axis{}, fmt.Errorf("axis %s: value %s: source kind %q is not one of %s (3.4.5:git builds the release from source)",
					name, v, kind, strings.Join(axisSources, ", "))
			}
		}
		if slices.Contains(a.Values, v) {
			return Axis{}, fmt.Errorf("axis %s: value %s is listed twice", name, v)
		}
		a.Values = append(a.Values, v)
	}
	if len(a.Values) == 0 {
		return Axis{}, fmt.Errorf("axis %s: no values", name)
	}
	return a, nil
}

// Cell is one combination of axis values that the rules allow.
type Cell struct {
	Name   string            `json:"name"`
	Values map[string]string `json:"values"`
	// Sets are the --set overrides that make the cell (base sets first).
	Sets []string `json:"sets"`
	// Command builds the cell: epbuild recipe NAME --set ....
	Command string `json:"command"`
	// Env is what warn and advice findings add to the cell's runtime (NCCL_RUNTIME_CONNECT=0).
	Env map[string]string `json:"env,omitempty"`
	// Findings are the cell's warn and advice findings (errors exclude the cell).
	Findings []Finding `json:"findings,omitempty"`
}

// Excluded is a combination a rule forbids, with the rule ids and findings that forbid it;
// Undecided names the error-level rules that could not be decided for it (an exclusion
// unless undecided rules are allowed).
type Excluded struct {
	Name      string            `json:"name"`
	Values    map[string]string `json:"values"`
	Sets      []string          `json:"sets"`
	Rules     []string          `json:"rules"`
	Undecided []string          `json:"undecided,omitempty"`
	Findings  []Finding         `json:"findings"`
}

// Matrix is the cross product of the axes, split into the cells to run and the
// combinations excluded.
type Matrix struct {
	Recipe   string     `json:"recipe"`
	Axes     []Axis     `json:"axes"`
	Cells    []Cell     `json:"cells"`
	Excluded []Excluded `json:"excluded"`
}

// FactsFunc resolves the recipe with --set overrides into facts (the builder's resolver).
type FactsFunc func(sets []string) (Facts, error)

// BuildMatrix evaluates every combination of the axes at plan stage: a combination with
// an error-level finding, or (unless allowUndecided) an error-level rule that could not
// be decided and that preflight does not ask again, is excluded with its rule ids; the others become cells carrying the env
// their warn and advice findings' fixes add. With no axes there is one cell, the recipe
// itself.
func BuildMatrix(ctx context.Context, recipe string, axes []Axis, base []string, rules *Rules, anc Ancestry, facts FactsFunc, allowUndecided bool) (*Matrix, error) {
	seen := map[string]bool{}
	for _, a := range axes {
		if seen[a.Key] {
			return nil, fmt.Errorf("matrix of %s: axis %s is given twice", recipe, a.Name)
		}
		seen[a.Key] = true
	}
	m := &Matrix{Recipe: recipe, Axes: axes, Cells: []Cell{}, Excluded: []Excluded{}}
	for _, combo := range cross(axes) {
		vals := map[string]string{}
		sets := slices.Clone(base)
		name := []string{recipe}
		for i, a := range axes {
			vals[a.Name] = combo[i]
			sets = append(sets, a.Sets(combo[i])...)
			name = append(name, a.Name+"="+combo[i])
		}
		f, err := facts(sets)
		if err != nil {
			return nil, fmt.Errorf("matrix cell %s: %w", strings.Join(name, " "), err)
		}
		fs, err := Evaluate(ctx, rules, f, StagePlan, anc)
		if err != nil {
			return nil, fmt.Errorf("matrix cell %s: %w", strings.Join(name, " "), err)
		}
		// a question the plan cannot answer but preflight asks again (the build host's
		// CUDA, say) does not exclude a cell: the cell's build decides it
		und := slices.DeleteFunc(Undecided(fs), func(x Finding) bool { return rules.RunsAt(x.ID, x.Case, StagePreflight) })
		if allowUndecided {
			und = nil
		}
		if HasErrors(fs) || len(und) > 0 {
			errs := []Finding{}
			for _, x := range fs {
				if x.Severity == SeverityError {
					errs = append(errs, x)
				}
			}
			rulesOf := IDs(errs)
			if rulesOf == nil {
				rulesOf = []string{}
			}
			m.Excluded = append(m.Excluded, Excluded{Name: strings.Join(name, " "), Values: vals, Sets: sets, Rules: rulesOf,
				Undecided: IDs(und), Findings: append(errs, und...)})
			continue
		}
		c := Cell{Name: strings.Join(name, " "), Values: vals, Sets: sets, Command: buildCommand(recipe, sets), Findings: fs}
		for _, x := range fs {
			if x.Fix == nil || x.Unknown {
				continue
			}
			for k, v := range x.Fix.Env {
				if c.Env == nil {
					c.Env = map[string]string{}
				}
				c.Env[k] = v
			}
		}
		m.Cells = append(m.Cells, c)
	}
	return m, nil
}

// cross is the cross product of the axes' values, the first axis varying slowest.
func cross(axes []Axis) [][]string {
	out := [][]string{{}}
	for _, a := range axes {
		var next [][]string
		for _, prefix := range out {
			for _, v := range a.Values {
				next = append(next, append(slices.Clone(prefix), v))
			}
		}
		out = next
	}
	return out
}

func buildCommand(recipe string, sets []string) string {
	parts := []string{"epbuild", "recipe", shellQuote(recipe)}
	for _, s := range sets {
		parts = append(parts, "--set", shellQuote(s))
	}
	return strings.Join(parts, " ")
}

// shellQuote quotes a word for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,=/:+@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// GitHub gives the matrix as a GitHub Actions strategy.matrix value: {"include": [...]},
// one entry per cell with its recipe, name, --set flags (one string), the build command
// and its env (an object; a step can write it to $GITHUB_ENV).
func (m *Matrix) GitHub() ([]byte, error) {
	type entry struct {
		Recipe  string            `json:"recipe"`
		Name    string            `json:"name"`
		Sets    string            `json:"sets"`
		Command string            `json:"command"`
		Env     map[string]string `json:"env"`
	}
	out := struct {
		Include []entry `json:"include"`
	}{Include: []entry{}}
	for _, c := range m.Cells {
		env := c.Env
		if env == nil {
			env = map[string]string{}
		}
		out.Include = append(out.Include, entry{Recipe: m.Recipe, Name: c.Name, Sets: setFlags(c.Sets), Command: c.Command, Env: env})
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode matrix of %s for GitHub: %w", m.Recipe, err)
	}
	return append(b, '\n'), nil
}

// GitLab gives the matrix as a GitLab CI `parallel: matrix:` block: one entry per cell
// (so that excluded combinations stay out), its variables EPBUILD_RECIPE, EPBUILD_CELL,
// EPBUILD_SETS and the env the rules add.
func (m *Matrix) GitLab() ([]byte, error) {
	var entries []yaml.MapSlice
	for _, c := range m.Cells {
		e := yaml.MapSlice{
			{Key: "EPBUILD_RECIPE", Value: m.Recipe},
			{Key: "EPBUILD_CELL", Value: c.Name},
			{Key: "EPBUILD_SETS", Value: setFlags(c.Sets)},
		}
		keys := make([]string, 0, len(c.Env))
		for k := range c.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			e = append(e, yaml.MapItem{Key: k, Value: c.Env[k]})
		}
		entries = append(entries, e)
	}
	doc := yaml.MapSlice{{Key: "parallel", Value: yaml.MapSlice{{Key: "matrix", Value: entries}}}}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf, yaml.UseLiteralStyleIfMultiline(true))
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("encode matrix of %s for GitLab: %w", m.Recipe, err)
	}
	return buf.Bytes(), nil
}

func setFlags(sets []string) string {
	parts := make([]string, 0, 2*len(sets))
	for _, s := range sets {
		parts = append(parts, "--set", shellQuote(s))
	}
	return strings.Join(parts, " ")
}
