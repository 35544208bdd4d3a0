package builder

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/patches"
	"github.com/epbuild/epbuild/recipes"
)

// TestUpstreamRecipes fetches every source of every shipped recipe from a mirror of
// real upstream snapshots, and patches every tree it can lay out, proving the sets'
// effects. Sources the snapshots cannot serve must fail with a clear message.
func TestUpstreamRecipes(t *testing.T) {
	mirror := os.Getenv("EPBUILD_TEST_MIRROR")
	if mirror == "" {
		t.Skip("EPBUILD_TEST_MIRROR is unset: point it at a mirror of DeepEP, NVIDIA/nvshmem, valgur/NVSHMEM-archive and Infrawaves/DeepEP_ibrc_dual-ports_multiQP to run the recipes against upstream")
	}
	ctx := context.Background()
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	src, err := stage.NewSources(c, mirror, log.New(io.Discard), source.ProgressLines)
	if err != nil {
		t.Fatal(err)
	}
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	// what the snapshots lack, and the words the error must use
	absent := map[string]string{
		"919760f413fb834e76382d129ba9c3314ce722be":                         "not in the mirror", // NVSHMEM v3.5.19-1
		"eb2c8fb3b7084c2db86bd9fd905387909f1dfd483e7b45f7b3c3d5fcf5374b5a": "no mirror entry",   // the 3.2.5-1 tarball
	}
	for _, run := range []struct {
		name string
		sets []string
	}{
		{name: "gcp-b200"}, {name: "efa-aws"}, {name: "ibrc-dualport"}, {name: "single-node"}, {name: "deepep-v2"}, {name: "gcp-a3-tcpx"},
		// the same NVSHMEM release from the archive repository's git tree: the patch set
		// must apply there too
		{name: "ibrc-dualport", sets: []string{"nvshmem.source=git"}},
	} {
		name := run.name
		plan, err := res.Resolve(name, run.sets)
		if err != nil {
			t.Fatal(err)
		}
		for _, pc := range plan.Components {
			pc := pc
			if pc.Source.Python != nil {
				continue
			}
			pin := pc.Source.Pin()
			tree := filepath.Join(t.TempDir(), pc.Name)
			err := stage.Materialize(ctx, src, &pc, tree)
			if want, ok := absent[strings.TrimPrefix(pin, "sha256:")]; ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("%s %s (%s): want an error saying %q, got %v", name, pc.Name, pin, want, err)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s %s: fetch %s: %v", name, pc.Name, pin, err)
				continue
			}
			sets, effects, err := stage.ApplySets(ctx, src, &pc, tree, patches.Options{})
			if err != nil {
				t.Errorf("%s %s: %v", name, pc.Name, err)
				continue
			}
			for _, e := range effects {
				if e.Status == "fail" {
					t.Errorf("%s %s: effect %s failed: %s", name, pc.Name, e.Expected, e.Found)
				}
			}
			t.Logf("%s %s @ %s: %d sets applied, %d effects proven", name, pc.Name, pin[:12], len(sets), len(effects))
		}
	}
}

// TestUpstreamEPv2Submodule: the deepep-v2 recipe pins fmt where DeepEP's tree at the
// recipe's commit points its submodule third-party/fmt, from the URL .gitmodules names.
func TestUpstreamEPv2Submodule(t *testing.T) {
	mirror := os.Getenv("EPBUILD_TEST_MIRROR")
	if mirror == "" {
		t.Skip("EPBUILD_TEST_MIRROR is unset")
	}
	p := fixture.PlanOf(t, "deepep-v2")
	dp, _ := p.Component("deepep")
	fmtc, ok := p.Component("fmt")
	if !ok || dp.Source.Git == nil || fmtc.Source.Git == nil {
		t.Fatal("deepep-v2 lacks a git deepep or fmt")
	}
	repo, err := source.OpenRepository(filepath.Join(mirror, "github.com", "deepseek-ai", "DeepEP.git"))
	if err != nil {
		t.Fatal(err)
	}
	defer repo.Close()
	rd := repo.Reader()
	c, err := rd.Commit(dp.Source.Git.Commit)
	if err != nil {
		t.Fatal(err)
	}
	e, err := rd.Lookup(c.Tree, "third-party/fmt")
	if err != nil || e.Kind != source.EntrySubmodule || e.ID != fmtc.Source.Git.Commit {
		t.Errorf("third-party/fmt at %.12s is %+v (%v), the recipe pins %s", c.ID, e, err, fmtc.Source.Git.Commit)
	}
	gm, err := rd.Lookup(c.Tree, ".gitmodules")
	if err != nil {
		t.Fatal(err)
	}
	b, err := rd.Blob(gm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "url = "+fmtc.Source.Git.URL) {
		t.Errorf(".gitmodules does not name %s:\n%s", fmtc.Source.Git.URL, b)
	}
}
