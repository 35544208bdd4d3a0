package plan

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// planOf builds a plan from a recipe document the way Resolve does, without expanding
// patch sets (the facts need only their names).
func planOf(t *testing.T, name string, sets ...string) *Plan {
	t.Helper()
	doc, err := recipes.NewLibrary().Load(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Apply(sets); err != nil {
		t.Fatal(err)
	}
	rc := doc.Recipe
	p := &Plan{Recipe: rc.Name, Cluster: rc.Cluster, Toolchain: rc.Toolchain, Env: rc.Env, Runtime: rc.Runtime}
	for _, n := range rc.Order() {
		c, _ := rc.Component(n)
		p.Components = append(p.Components, PlanComponent{Component: *c})
	}
	return p
}

func TestFactsFromPlan(t *testing.T) {
	gp := planOf(t, "gcp-b200")
	for i := range gp.Components {
		c := &gp.Components[i]
		switch c.Name {
		case "nvshmem":
			c.Checks = append(c.Checks, recipes.Check{NVSHMEMBuildVars: map[string]string{"NVSHMEM_GDRCOPY_SUPPORT": "ON"}})
		case "deepep":
			c.Build = append(c.Build, recipes.Step{Command: &recipes.CommandStep{Run: []string{"git", "apply", "x.patch"}, Env: map[string]string{"CPATH": "/x"}}})
		}
	}
	f := FactsFromPlan(gp)
	nv, ok := f.Component("nvshmem")
	if !ok || nv.Version != "3.5.19-1" || nv.Source != "git" || nv.Commit != "919760f413fb834e76382d129ba9c3314ce722be" ||
		nv.Repo != "https://github.com/NVIDIA/nvshmem" || nv.Options["NVSHMEM_IBGDA_SUPPORT"] != "1" || nv.BuildVars["NVSHMEM_GDRCOPY_SUPPORT"] != "ON" {
		t.Errorf("nvshmem facts: %+v", nv)
	}
	if dp, _ := f.Component("deepep"); len(dp.Commands) != 1 || dp.Commands[0][1] != "apply" || dp.BuildEnv["CPATH"] != "/x" || dp.BuildEnv["NVSHMEM_DIR"] == "" {
		t.Errorf("deepep command and build env: %+v", dp)
	}
	// the rules see them: R20 (git apply) and R23 (a build variable nvshmem-info lacks)
	rules, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	h, err := compat.LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	fs, err := compat.Evaluate(context.Background(), rules, f, compat.StagePlan, h)
	if err != nil {
		t.Fatal(err)
	}
	if ids := compat.IDs(fs); !slices.Contains(ids, "R20") || !slices.Contains(ids, "R23") {
		t.Errorf("want R20 and R23 from the plan's command and check, got %v", ids)
	}
	f = FactsFromPlan(planOf(t, "gcp-b200"))
	dp, ok := f.Component("deepep")
	if !ok || !slices.Equal(dp.Patches, []string{"deepep-pr466"}) || dp.BuildEnv["TORCH_CUDA_ARCH_LIST"] != "10.0" || dp.Commit != "29d31c095796f3c8ece47ee9cdcc167051bbeed9" {
		t.Errorf("deepep facts: %+v", dp)
	}
	if f.Recipe != "gcp-b200" || f.Toolchain.CUDA != ">=12.9" || !slices.Equal(f.Toolchain.Arch, []string{"sm_100"}) ||
		f.Env["NVSHMEM_IB_ENABLE_IBGDA"] != "1" || f.Host != nil || f.Toolchain.Present != nil {
		t.Errorf("plan facts: %+v", f)
	}
	// a package from the Python environment: its version is the recipe's constraint
	f = FactsFromPlan(planOf(t, "single-node"))
	if nv, _ := f.Component("nvshmem"); nv.Source != "python" || nv.Version != ">=3.3.9" {
		t.Errorf("wheel facts: %+v", nv)
	}
	// the facts are a copy: changing them leaves the plan alone
	p := planOf(t, "ibrc-dualport")
	f = FactsFromPlan(p)
	f.Env["X"] = "1"
	if _, ok := p.Env["X"]; ok {
		t.Error("FactsFromPlan shares the plan's env map")
	}
}

// The embedded recipes, as pinned, break no rule, and every commit rule is decided by the
// embedded history: `epbuild compat check` needs no clone for them.
func TestEmbeddedRecipesPassTheirRules(t *testing.T) {
	rules, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	h, err := compat.LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	names, err := recipes.NewLibrary().Names()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 4 {
		t.Fatalf("want the four embedded recipes, got %v", names)
	}
	for _, n := range names {
		fs, err := compat.Evaluate(context.Background(), rules, FactsFromPlan(planOf(t, n)), compat.StagePlan, h)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range fs {
			if f.Severity == compat.SeverityError {
				t.Errorf("%s breaks %s/%s: %s", n, f.ID, f.Case, f.Message)
			}
			if f.Unknown && strings.Contains(f.Message, "embedded history") {
				t.Errorf("%s: %s/%s undecided by the history: %s", n, f.ID, f.Case, f.Message)
			}
		}
	}
}

func TestApplyCatalog(t *testing.T) {
	cat, err := compat.LoadCatalog()
	if err != nil {
		t.Fatal(err)
	}
	load := func(name string, sets ...string) (*recipes.Doc, error) {
		doc, err := recipes.NewLibrary().Load(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := doc.Apply(sets); err != nil {
			t.Fatal(err)
		}
		if err := ApplyCatalog(doc, sets, cat); err != nil {
			return nil, err
		}
		// patch sets are not looked up here: their catalogue is another package's
		if err := doc.Validate(nil); err != nil {
			t.Fatalf("%s %v no longer validates: %v", name, sets, err)
		}
		return doc, nil
	}
	nv := func(d *recipes.Doc) *recipes.Component { c, _ := d.Recipe.Component("nvshmem"); return c }

	// archive → git
	d, err := load("ibrc-dualport", "nvshmem.version=3.5.19")
	if err != nil {
		t.Fatal(err)
	}
	if c := nv(d); c.Version != "3.5.19-1" || c.Source.Archive != nil || c.Source.Git == nil ||
		c.Source.Git.Commit != "919760f413fb834e76382d129ba9c3314ce722be" || c.Source.Git.Ref != "v3.5.19-1" {
		t.Errorf("3.5.19 on ibrc-dualport: %+v %+v", c, c.Source.Git)
	}
	// archive stays archive where the catalogue has one
	d, _ = load("ibrc-dualport", "nvshmem.version=3.4.5")
	if c := nv(d); c.Source.Archive == nil || !strings.HasPrefix(c.Source.Archive.SHA256, "40c1d4c2") || c.Source.Archive.Strip != 1 {
		t.Errorf("3.4.5 on ibrc-dualport: %+v", c.Source)
	}
	// git → archive when the release has no git pin
	d, _ = load("gcp-b200", "nvshmem.version=3.3.24")
	if c := nv(d); c.Source.Git != nil || c.Source.Archive == nil || !strings.HasPrefix(c.Source.Archive.SHA256, "3210e6ed") {
		t.Errorf("3.3.24 on gcp-b200: %+v", c.Source)
	}
	// git stays git
	d, _ = load("gcp-b200", "nvshmem.version=3.4.5-0")
	if c := nv(d); c.Source.Git == nil || c.Source.Git.Commit != "131da55f643ac87c810ba0bc51d359258bf433a1" {
		t.Errorf("3.4.5-0 on gcp-b200: %+v", c.Source)
	}
	// an explicit pin wins over the catalogue
	d, _ = load("ibrc-dualport", "nvshmem.version=3.3.24", "nvshmem.sha256="+strings.Repeat("0", 64))
	if c := nv(d); c.Source.Archive == nil || c.Source.Archive.SHA256 != strings.Repeat("0", 64) || !strings.Contains(c.Source.Archive.URL, "3.2.5") {
		t.Errorf("explicit sha256: %+v", c.Source.Archive)
	}
	// components the catalogue does not list, and Python packages with nothing to build,
	// keep their source
	d, _ = load("ibrc-dualport", "deepep.version=9.9.9")
	if c, _ := d.Recipe.Component("deepep"); c.Source.Git.Commit != "a84a24808fb0ea732f49b874cc456a69dde69076" {
		t.Errorf("deepep: %+v", c.Source.Git)
	}
	// a Python package the catalogue does not list is taken at V from the environment:
	// preflight asks for exactly that release (the recipe's pin is another)
	d, _ = load("uccl-ep", "nanobind.version=3.1.0")
	if c, _ := d.Recipe.Component("nanobind"); c.Version != "3.1.0" || c.Source.Python == nil || c.Source.Python.Version != "==3.1.0" {
		t.Errorf("nanobind 3.1.0: %+v %+v", c, c.Source.Python)
	}
	// a V that is no version is reported at the flag alone, not at the recipe's constraint
	doc, err := recipes.NewLibrary().Load("uccl-ep")
	if err != nil {
		t.Fatal(err)
	}
	bad := []string{"nanobind.version=>=3"}
	if err := doc.Apply(bad); err != nil {
		t.Fatal(err)
	}
	if err := ApplyCatalog(doc, bad, cat); err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(nil); err == nil || !strings.Contains(err.Error(), "--set nanobind.version=>=3") || strings.Contains(err.Error(), "uccl-ep.yaml") {
		t.Errorf("nanobind.version=>=3: %v", err)
	}
	d, _ = load("single-node", "nvshmem.version=3.4.5")
	if c := nv(d); c.Source.Python == nil || c.Version != "3.4.5" {
		t.Errorf("the NVSHMEM wheel: %+v", c)
	}
	// torch's NCCL by default; a catalogued release builds NVIDIA/nccl at its tag with the
	// recipe's steps; source=python (matrix value bundled) keeps torch's whatever the version
	nccl := func(d *recipes.Doc) *recipes.Component { c, _ := d.Recipe.Component("nccl"); return c }
	for _, name := range []string{"single-node", "gcp-b200", "efa-aws", "ibrc-dualport", "deepep-v2"} {
		d, _ = load(name)
		if c := nccl(d); c == nil || c.Source.Python == nil || !strings.HasPrefix(c.Source.Python.Package, "nvidia-nccl-cu") {
			t.Errorf("%s: nccl is not torch's by default: %+v", name, c)
		}
		d, _ = load(name, "nccl.version=2.22.3")
		if c := nccl(d); c.Version != "2.22.3-1" || c.Source.Git == nil || c.Source.Git.URL != "https://github.com/NVIDIA/nccl" ||
			c.Source.Git.Commit != "178b6b759074597777ce13438efb0e0ba625e429" || c.Source.Git.Ref != "v2.22.3-1" {
			t.Errorf("%s: nccl 2.22.3 from source: %+v %+v", name, c, c.Source.Git)
		}
		d, _ = load(name, "nccl.version=2.22.3-1", "nccl.source=python")
		if c := nccl(d); c.Source.Python == nil {
			t.Errorf("%s: nccl.source=python keeps torch's: %+v", name, c.Source)
		}
	}
	if _, err := load("single-node", "nccl.version=2.28.9"); err == nil || !strings.Contains(err.Error(), "not in the catalogue") {
		t.Errorf("an NCCL release the catalogue lacks: %v", err)
	}
	// ibrc-dualport's NVSHMEM 3.2.5-1 from the archive repository's release commit instead
	// of NVIDIA's tarball: the same version (the patch set's applies-to), a git pin
	d, err = load("ibrc-dualport", "nvshmem.source=git")
	if err != nil {
		t.Fatal(err)
	}
	if c := nv(d); c.Version != "3.2.5-1" || c.Source.Archive != nil || c.Source.Git == nil ||
		c.Source.Git.URL != "https://github.com/valgur/NVSHMEM-archive" || c.Source.Git.Commit != "6d8ab15b5d355d8d5fa5e9664962784de412dd9d" {
		t.Errorf("3.2.5-1 from git: %+v %+v", c, c.Source.Git)
	}
	// and back: a git recipe takes the tarball of the same release
	d, _ = load("gcp-b200", "nvshmem.version=3.3.9", "nvshmem.source=archive")
	if c := nv(d); c.Source.Archive == nil || !strings.HasPrefix(c.Source.Archive.SHA256, "ba41e9ad") {
		t.Errorf("3.3.9 as an archive: %+v", c.Source)
	}
	// a kind the release has no pin of is bad input naming the kinds it has
	_, err = load("gcp-b200", "nvshmem.version=3.3.24", "nvshmem.source=git")
	var re *recipes.Error
	if err == nil || !errors.As(err, &re) || re.ExitCode() != 2 || !strings.Contains(err.Error(), "no git pin of nvshmem 3.3.24") || !strings.Contains(err.Error(), "it has: archive") {
		t.Errorf("3.3.24 from git: %v", err)
	}
	// an unknown release is bad input, pointing at the flag
	_, err = load("gcp-b200", "nvshmem.version=3.3.1")
	if err == nil || !errors.As(err, &re) || re.ExitCode() != 2 || !strings.Contains(err.Error(), "--set nvshmem.version=3.3.1") || !strings.Contains(err.Error(), "3.5.19-1") {
		t.Errorf("unknown release: %v", err)
	}
}
