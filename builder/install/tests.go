package install

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/acceptance"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/recipes"
)

// InstallTests are the tests an install carries (the recipe's tests: of each component),
// with the environment they run in: what `epbuild test` runs.
type InstallTests struct {
	Prefix  string
	Recipe  string
	PlanKey string
	// Env is env.sh's environment over the caller's (InstallEnv).
	Env   []string
	Tests []acceptance.Test
	// NVCC is the recipe's runtime.nvcc, where a test that needs nvcc looks (nil: none).
	NVCC *recipes.NVCC
}

// LoadInstallTests reads the tests of the install at prefix from its manifest's plan.
// only, when not empty, keeps the tests of those names (or COMPONENT/NAME); a name that
// matches none is bad input. A prefix that is no install is bad input too.
func LoadInstallTests(prefix string, base []string, only []string) (*InstallTests, error) {
	abs, err := filepath.Abs(prefix)
	if err != nil {
		return nil, &plan.UsageError{Err: fmt.Errorf("test %s: %w", prefix, err)}
	}
	m, _, err := manifest.ReadInstalledManifest(abs)
	if err != nil {
		return nil, &plan.UsageError{Err: fmt.Errorf("%w (give the --prefix of epbuild install)", err)}
	}
	env, err := envsh.InstallEnv(abs, base)
	if err != nil {
		return nil, err
	}
	// a test must not change the install it tests (verify-install reads its bytecode)
	env = envsh.WithEnv(env, map[string]string{"PYTHONDONTWRITEBYTECODE": "1"})
	it := &InstallTests{Prefix: abs, Recipe: m.Plan.Recipe, PlanKey: m.PlanKey, Env: env, NVCC: m.Plan.Runtime.NVCC}
	prefixes := manifest.InstalledPrefixes(m, abs)
	want := map[string]bool{}
	for _, o := range only {
		want[o] = true
	}
	matched := map[string]bool{}
	var all []string
	for _, c := range m.Plan.Components {
		if c.Tests == nil {
			continue
		}
		pre, ok := prefixes[c.Name]
		if !ok {
			continue
		}
		for _, r := range c.Tests.Run {
			full := c.Name + "/" + r.Name
			all = append(all, quote.Term(full))
			if len(want) > 0 && !want[r.Name] && !want[full] {
				continue
			}
			matched[r.Name], matched[full] = true, true
			t := acceptance.Test{Component: c.Name, Name: r.Name, Dir: filepath.Join(pre, manifest.TestsDir), Argv: r.Argv, Nodes: r.MinNodes(), Needs: r.Needs}
			for _, k := range slices.Sorted(maps.Keys(r.Env)) {
				t.Env = append(t.Env, k+"="+r.Env[k])
			}
			// the manifest's plan was validated when built; a hand-edited one is refused here
			if t.Timeout, err = time.ParseDuration(r.Timeout); err != nil || t.Timeout <= 0 {
				return nil, &plan.UsageError{Err: fmt.Errorf("%s: test %s: timeout %q is not a duration: the manifest was not written by epbuild", filepath.Join(abs, manifest.ManifestName), full, r.Timeout)}
			}
			if t.Bandwidth, err = acceptance.Patterns(r.Bandwidth); err != nil {
				return nil, &plan.UsageError{Err: fmt.Errorf("%s: test %s: %w", filepath.Join(abs, manifest.ManifestName), full, err)}
			}
			it.Tests = append(it.Tests, t)
		}
	}
	var unknown []string
	for _, o := range only {
		if !matched[o] {
			unknown = append(unknown, quote.Term(o))
		}
	}
	if len(unknown) > 0 {
		carries := "none"
		if len(all) > 0 {
			carries = strings.Join(all, ", ")
		}
		return nil, &plan.UsageError{Err: fmt.Errorf("--only %s: the install at %s carries no such test; it carries: %s (name one as NAME or COMPONENT/NAME)", strings.Join(unknown, ", "), quote.Term(abs), carries)}
	}
	return it, nil
}
