package envsh

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
)

// RuntimeEnv is the environment a recipe runs with, given where each component is
// installed: the recipe's env expanded, plus PYTHONPATH and LD_LIBRARY_PATH for the
// components that have python/ and lib/, in front of base's (and LD_PRELOAD in front of
// base's, as env.sh does).
func RuntimeEnv(p *plan.Plan, prefixes map[string]string, base []string) ([]string, error) {
	env, py, ld, err := RuntimeParts(p, prefixes)
	if err != nil {
		return nil, err
	}
	get := func(k string) string {
		for _, kv := range base {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
	join := func(list []string, old string) string {
		if old != "" {
			list = append(list, old)
		}
		return strings.Join(list, ":")
	}
	if len(py) > 0 {
		env["PYTHONPATH"] = join(py, get("PYTHONPATH"))
	}
	if len(ld) > 0 {
		env["LD_LIBRARY_PATH"] = join(ld, get("LD_LIBRARY_PATH"))
	}
	// as env.sh does: a site's own preload stays, after the install's
	if pre := env["LD_PRELOAD"]; pre != "" {
		env["LD_PRELOAD"] = join([]string{pre}, get("LD_PRELOAD"))
	}
	return WithEnv(base, env), nil
}

// runtimeParts are the pieces of the runtime env: the recipe's env expanded, and the
// python/ and lib/ directories of the components, in plan order (searched first first).
func RuntimeParts(p *plan.Plan, prefixes map[string]string) (env map[string]string, py, ld []string, err error) {
	vars := map[string]string{}
	for name, pre := range prefixes {
		vars[name+".prefix"] = pre
	}
	if env, err = ExpandMap(p.Env, vars); err != nil {
		return nil, nil, nil, fmt.Errorf("runtime env of %s: %w", p.Recipe, err)
	}
	for _, c := range p.Components {
		pre, ok := prefixes[c.Name]
		if !ok || c.Source.Python != nil {
			continue
		}
		if disk.DirExists(filepath.Join(pre, "python")) {
			py = append(py, filepath.Join(pre, "python"))
		}
		if disk.DirExists(filepath.Join(pre, "lib")) {
			ld = append(ld, filepath.Join(pre, "lib"))
		}
	}
	return env, py, ld, nil
}

// InstallEnv is the environment env.sh gives a job in the install at prefix: base with
// the runtime env of the install's plan and EPBUILD_PREFIX.
func InstallEnv(prefix string, base []string) ([]string, error) {
	abs, err := filepath.Abs(prefix)
	if err != nil {
		return nil, fmt.Errorf("environment of %s: %w", prefix, err)
	}
	m, _, err := manifest.ReadInstalledManifest(abs)
	if err != nil {
		return nil, err
	}
	env, err := RuntimeEnv(m.Plan, manifest.InstalledPrefixes(m, abs), base)
	if err != nil {
		return nil, err
	}
	return WithEnv(env, map[string]string{"EPBUILD_PREFIX": abs}), nil
}

var templRe = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// expand replaces {{...}} references from vars; an unknown one is an error (validation
// catches them earlier, so this is a bug guard).
func Expand(s string, vars map[string]string) (string, error) {
	var bad string
	out := templRe.ReplaceAllStringFunc(s, func(m string) string {
		k := templRe.FindStringSubmatch(m)[1]
		v, ok := vars[k]
		if !ok {
			bad = k
		}
		return v
	})
	if bad != "" {
		return "", fmt.Errorf("template {{%s}} has no value here", bad)
	}
	return out, nil
}

func ExpandMap(m map[string]string, vars map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(m))
	for k, v := range m {
		e, err := Expand(v, vars)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out[k] = e
	}
	return out, nil
}

// withEnv returns base with the pairs of m set (replacing existing names).
func WithEnv(base []string, m map[string]string) []string {
	if len(m) == 0 {
		return base
	}
	out := make([]string, 0, len(base)+len(m))
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if _, over := m[k]; !over {
			out = append(out, kv)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// splitPaths splits a variable's value into the paths it lists (LD_PRELOAD also takes
// spaces).
func SplitPaths(k, v string) []string {
	sep := func(r rune) bool { return r == ':' || (k == "LD_PRELOAD" && r == ' ') }
	return strings.FieldsFunc(v, sep)
}

// Lookup gives the value of name in env (KEY=VALUE pairs), the last one where it is set
// twice, as exec does; "" when it is not set.
func Lookup(env []string, name string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == name {
			v = val
		}
	}
	return v
}
