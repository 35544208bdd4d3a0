package builder

import (
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/stage"

	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/verify"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// The recipes' own NCCL steps (single-node's) build an NCCL tree into a prefix that the
// nccl-version check reads, env.sh preloads, and verify-install finds as the one NCCL a
// job maps; a commit whose NCCL is another release than the plan says fails the check
// stage.
func TestNCCLFromSourceEndToEnd(t *testing.T) {
	fixture.NeedTools(t, "gcc", "python3", "make", "git")
	// the fixture NCCL repository: v2.21.5-1, then v2.22.3-1
	work := t.TempDir()
	fixture.Git(t, work, "init", "-q", "-b", "master")
	fixture.WriteFile(t, filepath.Join(work, "src", "nccl.c"), fixture.NCCLSource)
	fixture.WriteFile(t, filepath.Join(work, "src", "Makefile"), fixture.NCCLMakefile)
	commits := map[string]string{}
	for _, v := range []string{"2.21.5", "2.22.3"} {
		f := strings.Split(v, ".")
		fixture.WriteFile(t, filepath.Join(work, "makefiles", "version.mk"), fmt.Sprintf("NCCL_MAJOR := %s\nNCCL_MINOR := %s\nNCCL_PATCH := %s\nNCCL_SUFFIX :=\nPKG_REVISION := 1\n", f[0], f[1], f[2]))
		fixture.Git(t, work, "add", "-A")
		fixture.Git(t, work, "commit", "-q", "-m", "NCCL "+v)
		fixture.Git(t, work, "tag", "v"+v+"-1")
		commits[v] = fixture.Git(t, work, "rev-parse", "HEAD")
	}
	mirror := t.TempDir()
	fixture.Git(t, work, "clone", "-q", "--bare", work, filepath.Join(mirror, "example.invalid", "nvidia", "nccl.git"))

	// a recipe whose nccl component has single-node's build steps and preload
	doc, err := recipes.NewLibrary().Load("single-node")
	if err != nil {
		t.Fatal(err)
	}
	sn, _ := doc.Recipe.Component("nccl")
	var steps []string
	for _, st := range sn.Build {
		var args []string
		for _, a := range st.Command.Run {
			args = append(args, fmt.Sprintf("%q", a))
		}
		steps = append(steps, "      - command: {run: ["+strings.Join(args, ", ")+"]}")
	}
	recipe := filepath.Join(t.TempDir(), "ncclfix.yaml")
	fixture.WriteFile(t, recipe, `name: ncclfix
cluster: test
description: NCCL from source with the recipes' steps
components:
  - name: nccl
    version: 2.21.5-1
    source:
      git: {url: "https://example.invalid/nvidia/nccl", commit: `+commits["2.21.5"]+`}
    build:
`+strings.Join(steps, "\n")+`
    preload: [`+strings.Join(sn.Preload, ", ")+`]
    checks:
      - nccl-version: lib/libnccl.so.2
env:
  NCCL_NVLS_ENABLE: "0"
`)
	cache, out := filepath.Join(t.TempDir(), "cache"), t.TempDir()
	build := func(sets ...string) (*stage.Result, error) {
		// no CUDA here: R40 (NCCL < 2.27.3 with CUDA 13) cannot be decided, and needs not be
		j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: recipe, Sets: sets, CacheDir: cache, Mirror: mirror, Log: log.New(io.Discard),
			AllowUndecided: true})
		if err != nil {
			t.Fatal(err)
		}
		return j.Build(context.Background(), BuildOptions{OutDir: out, Version: "test", Environ: os.Environ(), Getenv: os.Getenv})
	}
	res, err := build()
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Plan.Env["LD_PRELOAD"]; got != "{{nccl.prefix}}/lib/libnccl.so.2" {
		t.Errorf("the plan preloads the built NCCL: %q", got)
	}
	site := fixture.TorchSite(t, "2.28.9", "2.28.9", nil)
	prefix := filepath.Join(t.TempDir(), "inst")
	environ := append(verify.CleanEnviron(os.Getenv), "PYTHONPATH="+site)
	if _, err := install.Install(context.Background(), install.InstallOptions{Artifact: res.Artifact, Prefix: prefix, Version: "test", Verify: verify.VerifyOptions{Environ: environ}}); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Verify(context.Background(), verify.VerifyOptions{Prefix: prefix, Environ: environ})
	if err != nil {
		t.Fatal(err)
	}
	// what a matrix cell records: the preloaded build torch binds, not torch's header 2.28.9
	resolved := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return p
	}
	// (as the matrix run reads it: the NCCL a process with the install's env runs)
	ienv, err := envsh.InstallEnv(prefix, environ)
	if err != nil {
		t.Fatal(err)
	}
	if n := toolchain.ProbeNCCL(context.Background(), "", ienv, nil); n.Version != "2.21.5" ||
		!strings.HasPrefix(resolved(n.Path), resolved(filepath.Join(prefix, "nccl", "lib"))+"/") || n.TorchHeader != "2.28.9" {
		t.Errorf("the cell's NCCL: %+v", n)
	}
	for id, want := range map[string]string{"nccl.nccl-version": "ncclGetVersion 22105 (2.21.5); include/nccl.h 2.21.5", "process.single-nccl": filepath.Join(prefix, "nccl", "lib")} {
		if c, ok := rep.Check(id); !ok || c.Status != check.Pass || !strings.Contains(c.Found, want) {
			t.Errorf("%s: %+v (want pass, found %q)", id, c, want)
		}
	}
	if rep.Failed() {
		t.Errorf("verify-install failed: %s", failedChecks(rep))
	}
	// the other release's commit labelled 2.21.5-1: the check stage names the mismatch
	_, err = build("nccl.commit="+commits["2.22.3"], "nccl.version=2.21.5-1")
	var cf *verify.ChecksFailed
	if !errors.As(err, &cf) || !strings.Contains(err.Error(), "nccl.nccl-version") || !strings.Contains(err.Error(), "ncclGetVersion 22203 (2.22.3)") {
		t.Errorf("2.22.3 built as 2.21.5-1: %v", err)
	}
}

// TestUpstreamNCCLReleases reads the catalogued NVIDIA/nccl releases from the mirror: each
// has the src/Makefile target lib the recipes build and a version.mk of its release (what
// nccl-version will compare), R40 fires, with CUDA 13, exactly on the releases whose
// cudawrap.h still declares the driver entry points with CUDA's unversioned PFN types,
// and R53 fires, with torch 2.11, exactly on those whose headers lack one of the NCCL
// functions torch 2.11's libtorch_cuda.so calls and 2.27.3 lacks.
func TestUpstreamNCCLReleases(t *testing.T) {
	mirror := os.Getenv("EPBUILD_TEST_MIRROR")
	if mirror == "" {
		t.Skip("EPBUILD_TEST_MIRROR is unset: point it at a mirror holding github.com/NVIDIA/nccl.git")
	}
	repo := filepath.Join(mirror, "github.com", "NVIDIA", "nccl.git")
	if _, err := os.Stat(repo); err != nil {
		t.Skipf("the mirror has no NVIDIA/nccl: %v", err)
	}
	show := func(commit, path string) string {
		t.Helper()
		out, err := exec.Command("git", "--git-dir", repo, "show", commit+":"+path).Output()
		if err != nil {
			t.Fatalf("git show %s:%s: %v", commit, path, err)
		}
		return string(out)
	}
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	rules, err := compat.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	unversioned := regexp.MustCompile(`(?m)^#define DECLARE_CUDA_PFN_EXTERN\(symbol\) extern PFN_##symbol pfn_##symbol`)
	versioned := regexp.MustCompile(`(?m)^#define DECLARE_CUDA_PFN_EXTERN\(symbol,\s*version\) extern PFN_##symbol##_v##version pfn_##symbol`)
	for _, v := range res.Catalog.Versions("nccl") {
		p, err := res.Resolve("single-node", []string{"nccl.version=" + v})
		if err != nil {
			t.Fatal(err)
		}
		c, _ := p.Component("nccl")
		commit := c.Source.Git.Commit
		if !regexp.MustCompile(`(?m)^lib\s*:`).MatchString(show(commit, "src/Makefile")) {
			t.Errorf("%s: src/Makefile has no target lib", v)
		}
		mk := show(commit, "makefiles/version.mk")
		f := strings.Split(strings.SplitN(v, "-", 2)[0], ".")
		for i, k := range []string{"NCCL_MAJOR", "NCCL_MINOR", "NCCL_PATCH"} {
			if !regexp.MustCompile(`(?m)^` + k + `\s*:=\s*` + f[i] + `\s*$`).MatchString(mk) {
				t.Errorf("%s: makefiles/version.mk does not say %s %s:\n%s", v, k, f[i], mk)
			}
		}
		wrap := show(commit, "src/include/cudawrap.h")
		old, cur := unversioned.MatchString(wrap), versioned.MatchString(wrap)
		if old == cur {
			t.Fatalf("%s: cudawrap.h declares its PFN types neither way (or both)", v)
		}
		facts := toolchain.PreflightFacts(plan.FactsFromPlan(p), p, &toolchain.Toolchain{CUDA: "13.0"})
		fs, err := compat.Evaluate(context.Background(), rules, facts, compat.StagePreflight, nil)
		if err != nil {
			t.Fatal(err)
		}
		fired := slices.ContainsFunc(fs, func(f compat.Finding) bool { return f.ID == "R40" && !f.Unknown })
		if fired != old {
			t.Errorf("%s: cudawrap.h unversioned %v, R40 fired %v", v, old, fired)
		}
		// git grep exits 1 when nothing matches; anything else is a failure to read, not an absence
		declared := func(fn string) bool {
			err := exec.Command("git", "--git-dir", repo, "grep", "-q", "-E", `ncclResult_t +`+fn+`\(`, commit, "--", "src/nccl.h.in", "src/include").Run()
			var ee *exec.ExitError
			if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
				t.Fatalf("%s: git grep %s at %s: %v", v, fn, commit, err)
			}
			return err == nil
		}
		lacks := !declared("ncclAlltoAll") || !declared("ncclDevCommCreate") || !declared("ncclDevCommDestroy")
		facts = toolchain.PreflightFacts(plan.FactsFromPlan(p), p, &toolchain.Toolchain{CUDA: "13.0", Torch: "2.11.0+cu130"})
		if fs, err = compat.Evaluate(context.Background(), rules, facts, compat.StagePreflight, nil); err != nil {
			t.Fatal(err)
		}
		fired = slices.ContainsFunc(fs, func(f compat.Finding) bool { return f.ID == "R53" && !f.Unknown })
		if fired != lacks {
			t.Errorf("%s: headers lack a function torch 2.11 calls %v, R53 fired %v", v, lacks, fired)
		}
	}
}
