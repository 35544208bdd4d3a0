package builder

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// labRepo is a git repository of three commits A ← B ← C (C tagged v2.0.1), cloned bare
// into a mirror laid out by URL: example.invalid/lab/deep.git.
type labRepo struct {
	mirror, url string
	a, b, c     string
}

func newLabRepo(t *testing.T) *labRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skipf("the test repository is made with the git CLI: %v", err)
	}
	work := t.TempDir()
	fixture.Git(t, work, "init", "-q", "-b", "main")
	r := &labRepo{mirror: t.TempDir(), url: "https://example.invalid/lab/deep"}
	for i, name := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(work, "f"), []byte(name+"\n"), 0o644)
		fixture.Git(t, work, "add", "f")
		fixture.Git(t, work, "commit", "-q", "-m", name)
		id := fixture.Git(t, work, "rev-parse", "HEAD")
		switch i {
		case 0:
			r.a = id
		case 1:
			r.b = id
		case 2:
			r.c = id
		}
	}
	fixture.Git(t, work, "tag", "-a", "v2.0.1", "-m", "release", r.c)
	fixture.Git(t, work, "clone", "-q", "--bare", work, filepath.Join(r.mirror, "example.invalid", "lab", "deep.git"))
	return r
}

// labRules is one error-level rule on the lab repository's history: deepep before B.
func labRules(t *testing.T, r *labRepo) *compat.Rules {
	t.Helper()
	rules, err := compat.ParseRules("lab-rules.yaml", []byte(`rules:
  - id: T1
    title: deepep before B hangs
    stages: [plan]
    severity: error
    message: deepep before B hangs in dispatch.
    sources: [the lab repository]
    when: {commit: {component: deepep, before: `+r.b+`}}
    fix: {set: [deepep.commit=`+r.b+`]}
`))
	if err != nil {
		t.Fatal(err)
	}
	return rules
}

func labRecipe(t *testing.T, r *labRepo) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "lab.yaml")
	body := "name: lab\ncluster: test\ndescription: test\ncomponents:\n  - name: deepep\n    version: 1.0.0\n    source:\n      git: {url: \"" + r.url + "\", commit: " + r.a + "}\n"
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A commit outside the embedded history is decided from a repository that holds its
// history; with none at hand the error-level rule is undecided, which stops the plan
// unless allowed, and says which question could not be decided.
func TestAncestryFromTheRepositoryAtHand(t *testing.T) {
	r := newLabRepo(t)
	rules := labRules(t, r)
	recipe := labRecipe(t, r)
	open := func(t *testing.T, commit, mirror string, allow bool) (*Job, []compat.Finding, error) {
		t.Helper()
		j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: recipe, Sets: []string{"deepep.commit=" + commit},
			CacheDir: filepath.Join(t.TempDir(), "cache"), Mirror: mirror, Rules: rules, AllowUndecided: allow})
		if err != nil {
			t.Fatal(err)
		}
		fs, err := j.Findings(context.Background(), nil)
		return j, fs, err
	}
	t.Run("decided from the mirror: C contains B", func(t *testing.T) {
		if _, fs, err := open(t, r.c, r.mirror, false); err != nil || len(fs) != 0 {
			t.Errorf("findings %+v, %v", fs, err)
		}
	})
	t.Run("decided from the mirror: A is before B", func(t *testing.T) {
		_, fs, err := open(t, r.a, r.mirror, false)
		var re *RulesError
		if !errors.As(err, &re) || re.ExitCode() != 2 || len(fs) != 1 || fs[0].Unknown || !strings.Contains(err.Error(), "lab breaks T1: deepep before B hangs (`epbuild compat explain T1` says why") {
			t.Errorf("findings %+v, %v", fs, err)
		}
	})
	t.Run("no repository: undecided stops", func(t *testing.T) {
		_, fs, err := open(t, r.c, "", false)
		var re *RulesError
		if !errors.As(err, &re) || re.ExitCode() != 2 || len(fs) != 1 || !fs[0].Unknown || fs[0].IfDecided != compat.SeverityError {
			t.Fatalf("findings %+v, %v", fs, err)
		}
		for _, want := range []string{"could not be decided (T1)", "whether deepep " + r.c[:12] + " contains " + r.b[:12], "--allow-undecided"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the message lacks %q: %v", want, err)
			}
		}
	})
	t.Run("no repository, --allow-undecided: goes on", func(t *testing.T) {
		if _, fs, err := open(t, r.c, "", true); err != nil || len(fs) != 1 || !fs[0].Unknown || fs[0].Severity != compat.SeverityWarn {
			t.Errorf("findings %+v, %v", fs, err)
		}
	})
	t.Run("the commit's version comes from its tag, never the old label", func(t *testing.T) {
		j, _, _ := open(t, r.c, r.mirror, false)
		if c, _ := j.Plan.Component("deepep"); c.Version != "2.0.1" {
			t.Errorf("deepep at C (tagged v2.0.1): version %q", c.Version)
		}
		j, _, _ = open(t, r.b, r.mirror, true)
		if c, _ := j.Plan.Component("deepep"); c.Version != "" || !strings.Contains(strings.Join(j.Plan.Notes, "\n"), "its version is unknown") {
			t.Errorf("deepep at B (no tag): version %q, notes %q", c.Version, j.Plan.Notes)
		}
	})
}

// The catalogue names the release of a catalogued commit.
func TestSetCommitTakesTheCataloguedVersion(t *testing.T) {
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "gcp-b200", CacheDir: filepath.Join(t.TempDir(), "cache"),
		Sets: []string{"nvshmem.commit=131da55f643ac87c810ba0bc51d359258bf433a1"}})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := j.Plan.Component("nvshmem"); c.Version != "3.4.5" {
		t.Errorf("nvshmem at v3.4.5-0's commit: version %q, want the catalogue's 3.4.5 (not the recipe's 3.5.19-1)", c.Version)
	}
	// the recipe's own commit keeps the recipe's version
	j, err = Open(Options{Library: recipes.NewLibrary(), Recipe: "gcp-b200", CacheDir: filepath.Join(t.TempDir(), "cache"),
		Sets: []string{"deepep.commit=29d31c095796f3c8ece47ee9cdcc167051bbeed9"}})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := j.Plan.Component("deepep"); c.Version != "1.2.1" {
		t.Errorf("deepep at the recipe's commit: version %q", c.Version)
	}
}

// A rule that needs the toolchain (R26, R27: the CUDA the build host has) is undecided at
// plan time; preflight asks it again with the probed toolchain, so the plan goes on, and
// preflight decides it.
func TestPlanDefersToolchainQuestionsToPreflight(t *testing.T) {
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "single-node", CacheDir: filepath.Join(t.TempDir(), "cache")})
	if err != nil {
		t.Fatal(err)
	}
	fs, err := j.Findings(context.Background(), nil)
	if err != nil {
		t.Fatalf("plan stage: %v", err)
	}
	deferred := 0
	for _, f := range fs {
		if f.Unknown && f.IfDecided == compat.SeverityError && (f.ID == "R26" || f.ID == "R27") {
			deferred++
		}
	}
	if deferred == 0 {
		t.Fatalf("no undecided R26/R27 at plan time (the test proves nothing): %+v", fs)
	}
	// at preflight, on a CUDA 13 host with the cu12 wheel, R27 is decided and stops
	tc := gpuMachine()
	tc.PythonPackages["nvidia-nvshmem-cu12"] = toolchain.PythonPackage{Version: "3.4.5"}
	tc.PythonPackages["nvidia-nccl-cu12"] = toolchain.PythonPackage{Version: "2.28.9"}
	_, err = j.Findings(context.Background(), tc)
	var re *RulesError
	if !errors.As(err, &re) || re.Stage != compat.StagePreflight || !slices.ContainsFunc(re.Findings, func(f compat.Finding) bool { return f.ID == "R27" && !f.Unknown }) {
		t.Fatalf("preflight on CUDA 13 with the cu12 wheel: %v", err)
	}
}
