package compat

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/goccy/go-yaml"
)

// CondYAML writes a condition back as the block YAML of rules.yaml, for explain and docs.
func CondYAML(c *Cond) string {
	b, err := yaml.MarshalWithOptions(c, yaml.Flow(false))
	if err != nil {
		return fmt.Sprintf("%+v\n", *c)
	}
	return string(b)
}

// FixLines says a fix as lines: each --set override, each runtime env line, the text.
func FixLines(f *Fix) []string {
	if f == nil {
		return nil
	}
	var out []string
	for _, s := range f.Set {
		out = append(out, "--set "+s)
	}
	for _, k := range slices.Sorted(maps.Keys(f.Env)) {
		out = append(out, fmt.Sprintf("%s=%s (runtime env; --set env.%s=%s)", k, f.Env[k], k, f.Env[k]))
	}
	if t := strings.TrimSpace(f.Text); t != "" {
		out = append(out, t)
	}
	return out
}

// HostKeys lists the host facts a rule's conditions read, in order of first use.
func (r Rule) HostKeys() []string {
	var out []string
	r.eachCond(func(c *Cond) {
		if c.Host != nil && !slices.Contains(out, c.Host.Key) {
			out = append(out, c.Host.Key)
		}
	})
	return out
}

// RulesMarkdown is docs/rules.md: every rule with its stages, severity, why, conditions,
// cases, fix and sources, then the host facts the host conditions read.
func RulesMarkdown(rules *Rules, facts []HostFact) []byte {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# Compatibility rules\n\n")
	w("<!-- Generated from compat/rules.yaml and compat/host-facts.yaml by `make docs`. Do not edit. -->\n\n")
	w("What the field learned building DeepEP + NVSHMEM, as the rules epbuild checks. Each rule\n")
	w("has a condition over the recipe (component versions and commits, patch sets, options,\n")
	w("build and runtime env, toolchain) and, at the host stage, facts read on a node; a\n")
	w("severity; why it matters; a fix; and the sources a reader can check it against.\n\n")
	w("- **Stages**: `plan` is the resolved recipe, before any work (`epbuild compat check`,\n")
	w("  `epbuild recipe`); `preflight` is the probed build host; `host` is a cluster node\n")
	w("  (`epbuild verify-install --host`).\n")
	w("- **Severities**: `error` stops the job (exit 2 at plan; `--ignore-rule ID` overrides),\n")
	w("  `warn` is printed, `advice` recommends. A rule that cannot be decided (a commit no\n")
	w("  ancestry source knows, a host fact not read, a recipe constraint that allows versions on\n")
	w("  both sides) is reported as unknown, at most a warning: it is never silently passed.\n")
	w("- `epbuild compat explain ID` prints one rule; `epbuild compat list` lists them.\n\n")
	w("| rule | severity | stages | title |\n|---|---|---|---|\n")
	for _, r := range rules.All() {
		w("| [%s](#%s) | %s | %s | %s |\n", r.ID, strings.ToLower(r.ID), r.Severity, stageList(r.StagesOf()), mdCell(r.Title))
	}
	for _, r := range rules.All() {
		w("\n## %s\n\n**%s**\n\n", r.ID, mdText(r.Title))
		w("%s; stages %s.\n\n", r.Severity, stageList(r.Stages))
		w("%s\n", mdText(strings.TrimSpace(r.Message)))
		if r.When != nil {
			w("\nWhen:\n\n```yaml\n%s```\n", CondYAML(r.When))
		}
		for _, c := range r.Cases {
			sev, st := r.Severity, r.Stages
			if c.Severity != "" {
				sev = c.Severity
			}
			if len(c.Stages) > 0 {
				st = c.Stages
			}
			w("\n### %s/%s\n\n%s; stages %s.", r.ID, c.Name, sev, stageList(st))
			if c.Message != "" {
				w(" %s", mdText(strings.TrimSpace(c.Message)))
			}
			w("\n\n```yaml\n%s```\n", CondYAML(c.When))
			if lines := FixLines(c.Fix); len(lines) > 0 {
				w("\nFix:\n\n")
				for _, l := range lines {
					w("- %s\n", mdCode(l))
				}
			}
		}
		if keys := r.HostKeys(); len(keys) > 0 {
			w("\nHost facts read: `%s` (see [Host facts](#host-facts)).\n", strings.Join(keys, "`, `"))
		}
		if keys := r.BuildKeys(); len(keys) > 0 {
			w("\nBuild facts read: `%s` (see [Build facts](#build-facts)).\n", strings.Join(keys, "`, `"))
		}
		if keys := r.RuntimeKeys(); len(keys) > 0 {
			w("\nRuntime keys read: `%s` (see [Runtime keys](#runtime-keys)).\n", strings.Join(keys, "`, `"))
		}
		if lines := FixLines(r.Fix); len(lines) > 0 {
			w("\nFix:\n\n")
			for _, l := range lines {
				w("- %s\n", mdCode(l))
			}
		}
		w("\nSources:\n\n")
		for _, s := range r.Sources {
			w("- %s\n", mdText(s))
		}
		for _, c := range r.Cites {
			w("- `%s` says %s\n", c, mdCodeSpan(strings.Join(strings.Fields(c.Says), " ")))
		}
	}
	w("\n## Build facts\n\n")
	w("What a build records of what it built, for the `build:` conditions; before the build,\n")
	w("and for an install that did not record one, the fact is unknown.\n\n")
	factTable(w, "fact", BuildFactSources())
	w("\n## Runtime keys\n\n")
	w("What a job of the recipe is, for the `runtime:` and `size:` conditions; a key the recipe\n")
	w("does not declare leaves its rules undecided.\n\n")
	factTable(w, "key", RuntimeFactSources())
	w("\n## Host facts\n\n")
	w("What a node's probe reads for the host conditions. A fact that was not read leaves its\n")
	w("rules undecided.\n\n")
	w("| fact | values | read |\n|---|---|---|\n")
	for _, f := range facts {
		vals := "—"
		if len(f.Values) > 0 {
			vals = "`" + strings.Join(f.Values, "`, `") + "`"
		}
		w("| `%s` | %s | %s |\n", f.Key, vals, mdCell(strings.Join(strings.Fields(f.Read), " ")))
	}
	return b.Bytes()
}

func factTable(w func(string, ...any), what string, fs []FactSource) {
	w("| %s | values | read |\n|---|---|---|\n", what)
	for _, f := range fs {
		vals := "—"
		if len(f.Values) > 0 {
			vals = "`" + strings.Join(f.Values, "`, `") + "`"
		}
		w("| `%s` | %s | %s |\n", f.Key, vals, mdCell(f.Read))
	}
}

func stageList(ss []Stage) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

// mdText keeps <placeholders> visible: Markdown would read them as HTML.
func mdText(s string) string { return strings.NewReplacer("<", "&lt;", ">", "&gt;").Replace(s) }

func mdCell(s string) string { return strings.ReplaceAll(mdText(s), "|", `\|`) }

// mdCode puts a --set line in code; text stays text.
func mdCode(l string) string {
	if strings.HasPrefix(l, "--set ") {
		return "`" + l + "`"
	}
	return mdText(l)
}

// mdCodeSpan puts s in a code span whose fence is longer than any backtick run in s.
func mdCodeSpan(s string) string {
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || len(fence) > 1 {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}
