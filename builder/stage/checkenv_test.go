package stage

import (
	"slices"
	"testing"

	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/recipes"
)

// The build host's checks of DeepEP see the NCCL built from source, which its wheel is
// not installed yet to provide: preloaded for them (never in env.sh), with the recipe's
// check-env; a recipe taking torch's NCCL preloads nothing.
func TestStagedCheckEnv(t *testing.T) {
	open := func(sets ...string) *plan.Plan {
		res, err := plan.NewResolver(recipes.NewLibrary())
		if err != nil {
			t.Fatal(err)
		}
		p, err := res.Resolve("deepep-v2", sets)
		if err != nil {
			t.Fatalf("plan: %v", err)
		}
		return p
	}
	p := open("nccl.version=2.30.7-1")
	deepep, _ := p.Component("deepep")
	nccl, _ := p.Component("nccl")
	prefixes := map[string]string{"nccl": "/st/nccl", "deepep": "/st/deepep", "fmt": "/st/fmt"}
	env := []string{"PATH=/usr/bin", "LD_PRELOAD=/opt/x.so"}
	got := stagedCheckEnv(p, deepep, env, prefixes)
	if v := envsh.Lookup(got, "LD_PRELOAD"); v != "/opt/x.so:/st/nccl/lib/libnccl.so.2" {
		t.Errorf("deepep's checks preload %q", v)
	}
	if v := envsh.Lookup(got, "EP_SUPPRESS_NCCL_CHECK"); v != "1" {
		t.Errorf("deepep's check-env: %q", v)
	}
	if got := stagedCheckEnv(p, nccl, env, prefixes); !slices.Equal(got, env) {
		t.Errorf("nccl's own checks: %v", got)
	}
	torchs := open()
	d2, _ := torchs.Component("deepep")
	if v := envsh.Lookup(stagedCheckEnv(torchs, d2, env, prefixes), "LD_PRELOAD"); v != "/opt/x.so" {
		t.Errorf("torch's NCCL: preload %q", v)
	}
}
