package plan

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// deepep-v2's NCCL built from source takes the wheel route: packed as the package its
// python source named (after --set nccl.package), not preloaded, and R41 (a NCCL built
// from source that torch does not call) does not fire; single-node's keeps the preload.
func TestNCCLWheelRouteResolves(t *testing.T) {
	res, err := NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	rules, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	findings := func(p *Plan) []string {
		t.Helper()
		fs, err := compat.Evaluate(context.Background(), rules, FactsFromPlan(p), compat.StagePreflight, nil)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, f := range fs {
			ids = append(ids, f.ID)
		}
		return ids
	}
	resolve := func(name string, sets ...string) (*Plan, []string) {
		t.Helper()
		p, err := res.Resolve(name, sets)
		if err != nil {
			t.Fatal(err)
		}
		return p, findings(p)
	}
	p, ids := resolve("deepep-v2", "nccl.version=2.30.7-1", "toolchain.torch=2.11.0+cu130")
	c, _ := p.Component("nccl")
	if c.Source.Git == nil || c.Source.Git.Commit != "73cf112295c33aee2b895f329f592f2a9b4b0f97" || c.PythonWheel == nil || c.PythonWheel.Package != "nvidia-nccl-cu13" {
		t.Fatalf("deepep-v2's NCCL 2.30.7-1: %+v %+v", c.Source, c.PythonWheel)
	}
	if strings.Contains(p.Env["LD_PRELOAD"], "libnccl") {
		t.Errorf("the wheel route preloads NCCL: LD_PRELOAD=%s", p.Env["LD_PRELOAD"])
	}
	for _, id := range ids {
		if id == "R41" {
			t.Errorf("R41 fires on the wheel route")
		}
	}
	// the same plan without python-wheel: R41 decides on these facts, and fires
	for i := range p.Components {
		p.Components[i].PythonWheel = nil
	}
	if ids := findings(p); !slices.Contains(ids, "R41") {
		t.Errorf("R41 does not fire on a NCCL from source neither preloaded nor a wheel: %v", ids)
	}
	p, _ = resolve("deepep-v2", "nccl.package=nvidia-nccl-cu12", "nccl.version=2.30.7-1")
	if c, _ := p.Component("nccl"); c.PythonWheel.Package != "nvidia-nccl-cu12" {
		t.Errorf("--set nccl.package: the wheel replaces %s", c.PythonWheel.Package)
	}
	p, _ = resolve("single-node", "nccl.version=2.28.3-1")
	if !strings.Contains(p.Env["LD_PRELOAD"], "{{nccl.prefix}}/lib/libnccl.so.2") {
		t.Errorf("single-node's NCCL from source is preloaded: LD_PRELOAD=%q", p.Env["LD_PRELOAD"])
	}
}

// python-wheel beside preload, or without anything to build, is refused naming the field.
func TestPythonWheelValidation(t *testing.T) {
	lib := recipes.NewLibrary()
	doc, err := lib.Load("deepep-v2")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := doc.Recipe.Component("nccl")
	c.Preload = []string{"lib/libnccl.so.2"}
	c.PythonWheel.Files = append(c.PythonWheel.Files, "../escape")
	err = doc.Validate(nil)
	for _, want := range []string{"both preload and python-wheel", `file "../escape" is not a file or directory of the component's prefix`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}
