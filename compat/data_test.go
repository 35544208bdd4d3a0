package compat

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
)

// Mistakes in a rules file are reported at their line and column.
func TestParseRulesErrors(t *testing.T) {
	const head = "rules:\n  - id: R1\n    title: t\n    stages: [plan]\n    severity: error\n    message: m\n    sources: [s]\n"
	for _, tc := range []struct{ name, body, want string }{
		{"unknown key", head + "    when: {version: {component: nvshmem, satisfy: \">=1\"}}\n", "rules.yaml:8:42"},
		{"bad constraint", head + "    when: {version: {component: nvshmem, satisfies: \">=x\"}}\n", "rules.yaml:8:"},
		{"short commit", head + "    when:\n      commit: {component: deepep, before: 29d31c0}\n", "rules.yaml:9:"},
		{"two keys", head + "    when: {requires: a, present: b}\n", "exactly one key"},
		{"unknown stage", strings.Replace(head, "[plan]", "[plan, build]", 1) + "    when: {requires: a}\n", "rules.yaml:4:"},
		{"no when", head, "needs when: or cases:"},
		{"two matchers", head + "    when: {env: {key: A, set: true, equals: x}}\n", "exactly one of equals"},
		{"bad regexp", head + "    when: {command: {matches: \"(\"}}\n", "rules.yaml:8:"},
		{"bad fix", head + "    when: {requires: a}\n    fix: {set: [version]}\n", "not a --set override"},
		{"duplicate id", head + "    when: {requires: a}\n" + strings.TrimPrefix(head, "rules:\n") + "    when: {requires: a}\n", "used twice"},
		{"duplicate key", head + "    when: {requires: a}\n    title: again\n", "rules.yaml:9:"},
		{"size below without a default", head + "    when: {size: {env: NVSHMEM_SYMMETRIC_SIZE, below: buffer-bytes}}\n", "below: needs default:"},
		{"size below an unknown key", head + "    when: {size: {env: NVSHMEM_SYMMETRIC_SIZE, default: 1G, below: heap}}\n", "rules.yaml:8:"},
		{"size default not a size", head + "    when: {size: {env: NVSHMEM_SYMMETRIC_SIZE, default: 1Q, below: buffer-bytes}}\n", "unknown suffix"},
		{"size both below and invalid", head + "    when: {size: {env: X, default: 1G, below: buffer-bytes, invalid: true}}\n", "exactly one of below: and invalid"},
		{"unknown runtime key", head + "    when: {runtime: {key: heap-bytes, set: true}}\n", "runtime key \"heap-bytes\""},
		{"unknown build fact", head + "    when: {build: {key: deepep.layout, equals: v2}}\n", "build fact \"deepep.layout\""},
		{"build fact of a component", head + "    when: {build: {component: nvshmem, key: nvshmem.rc-layout, equals: v2}}\n", "rules.yaml:8:"},
		{"release of a bad component", head + "    when: {release: NVSHMEM}\n", "rules.yaml:8:"},
		{"cite repo not GitHub", head + "    when: {requires: a}\n" + fmt.Sprintf("    cites:\n      - {repo: %s, commit: %s, path: %s, lines: %s, says: %s}\n", "https://gitlab.com/a/b", "v1", "a.c", "\"1\"", "x"), "https://github.com/OWNER/REPO"},
		{"cite repo .git", head + "    when: {requires: a}\n" + fmt.Sprintf("    cites:\n      - {repo: %s, commit: %s, path: %s, lines: %s, says: %s}\n", "https://github.com/a/b.git", "v1", "a.c", "\"1\"", "x"), "https://github.com/OWNER/REPO"},
		{"cite lines backwards", head + "    when: {requires: a}\n" + fmt.Sprintf("    cites:\n      - {repo: %s, commit: %s, path: %s, lines: %s, says: %s}\n", "https://github.com/a/b", "v1", "a.c", "9-3", "x"), "rules.yaml:10:"},
		{"cite path escapes", head + "    when: {requires: a}\n" + fmt.Sprintf("    cites:\n      - {repo: %s, commit: %s, path: %s, lines: %s, says: %s}\n", "https://github.com/a/b", "v1", "../a.c", "\"1\"", "x"), "a file's path"},
		{"cite commit with a range", head + "    when: {requires: a}\n" + fmt.Sprintf("    cites:\n      - {repo: %s, commit: %s, path: %s, lines: %s, says: %s}\n", "https://github.com/a/b", "v1..v2", "a.c", "\"1\"", "x"), "a full 40-hex commit or a tag"},
		{"cite says nothing", head + "    when: {requires: a}\n" + fmt.Sprintf("    cites:\n      - {repo: %s, commit: %s, path: %s, lines: %s, says: %s}\n", "https://github.com/a/b", "v1", "a.c", "\"1\"", "\"  \""), "says:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRules("rules.yaml", []byte(tc.body))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
	if _, err := ParseRules("rules.yaml", []byte(head+"    when: {requires: a}\n")); err != nil {
		t.Fatalf("a good file fails: %v", err)
	}
}

// A plain YAML scalar ends at " #": a text that names an issue (PR #696) must be quoted,
// or the rest of the sentence silently becomes a comment.
func TestRulesTextNotCutByComments(t *testing.T) {
	for i, l := range strings.Split(string(rulesYAML), "\n") {
		s := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "- "))
		for _, k := range []string{"title: ", "message: ", "text: ", "name: "} {
			v, ok := strings.CutPrefix(s, k)
			if ok && !strings.HasPrefix(v, "\"") && !strings.HasPrefix(v, "'") && !strings.HasPrefix(v, ">") && strings.Contains(v, " #") {
				t.Errorf("rules.yaml:%d: quote this %s it is cut at \" #\"", i+1, k)
			}
		}
	}
}

// Every rule has a source, a title, a why and a fix, and explain can print its condition back.
func TestEmbeddedRulesShape(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules.All() {
		if len(r.Sources) == 0 || r.Title == "" || r.Message == "" {
			t.Errorf("%s lacks sources, title or message", r.ID)
		}
		// every way the rule can hold says how to get past it
		if r.Fix == nil && len(r.Cases) == 0 {
			t.Errorf("%s has no fix", r.ID)
		}
		for _, c := range r.Cases {
			if r.Fix == nil && c.Fix == nil {
				t.Errorf("%s/%s has no fix, nor has its rule", r.ID, c.Name)
			}
		}
		b, err := yaml.Marshal(r)
		if err != nil || len(b) == 0 {
			t.Errorf("%s does not marshal: %v", r.ID, err)
		}
	}
	if _, ok := rules.Get("r18"); !ok {
		t.Error("Get is case-insensitive for ids")
	}
}

func TestDecideVersion(t *testing.T) {
	for _, tc := range []struct {
		fact, cond string
		want       tri
	}{
		{"12.9", "<12.8", no},
		{"12.6", "<12.8", yes},
		{">=12.9", "<12.8", no},
		{">=12.3", "<12.8", unknown},
		{">=12.9", ">=12.8", yes},
		{">=12.8, <13", ">=12.8, <13 || >=14", yes},
		{">=12.3, <12.8", ">=12.8", no},
		{"=3.2.5-1", ">=3.2.5, <3.2.6", yes},
		{">=3.3.9", "<3.3.9", no},
		{">3.3.9", "<=3.3.9", no},
		{"<=3.3.9", ">=3.3.9", unknown},
		{"2.10.0+cu129", "<2.10", no},
		{"2.9.1+cu128", "<2.10", yes},
		{"~2.9", "<2.10", unknown},
		{"", ">=1", unknown},
		{"not a version", ">=1", unknown},
	} {
		got, why := decideVersion("x", tc.fact, mustConstraint(t, tc.cond))
		if got != tc.want || why == "" {
			t.Errorf("%q against %q: %v (%s), want %v", tc.fact, tc.cond, got, why, tc.want)
		}
	}
}

func mustConstraint(t *testing.T, s string) Constraint {
	t.Helper()
	c, err := ParseConstraint(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The fixture has the topology history.yaml records: every (mark, commit) pair answers
// the same through real git.
func TestFixtureMatchesHistory(t *testing.T) {
	h, err := LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	fx := deepepFixture(t)
	ctx := context.Background()
	repo, ok := h.Repos()[RepoKey(deepepURL)]
	if !ok {
		t.Fatal("history lacks DeepEP")
	}
	for c := range repo.Commits {
		if _, ok := fx.alias[c]; !ok {
			t.Errorf("fixture lacks %s", c)
			continue
		}
		for _, m := range repo.Marks {
			want, err := h.IsAncestor(ctx, deepepURL, m, c)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fx.IsAncestor(ctx, deepepURL, m, c)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("%s contains %s: fixture says %v, history %v", c[:7], m[:7], got, want)
			}
		}
	}
	if _, err := h.IsAncestor(ctx, "https://github.com/NVIDIA/nccl", cB6ce310, c29d31c0); err == nil {
		t.Error("a repository the history does not list must be unknown")
	}
}

// Every commit a rule names is a mark of the history, so that the embedded recipes are
// decided before anything is fetched.
func TestRuleCommitsAreMarks(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	h, err := LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	marks := h.Repos()[RepoKey(deepepURL)].Marks
	n := 0
	for _, r := range rules.All() {
		for _, c := range r.Commits() {
			n++
			if !slices.Contains(marks, c) {
				t.Errorf("%s names %s, which history.yaml does not list as a mark", r.ID, c)
			}
		}
	}
	if n == 0 {
		t.Fatal("no rule names a commit")
	}
}

func TestParseHistoryErrors(t *testing.T) {
	body := "repos:\n  - url: https://github.com/deepseek-ai/DeepEP\n    marks: [" + cB6ce310 + "]\n    commits:\n      " + c29d31c0 + ": [" + c29d31c0 + "]\n"
	_, err := ParseHistory("history.yaml", []byte(body))
	if err == nil || !strings.Contains(err.Error(), "not one of the marks") || !strings.Contains(err.Error(), "history.yaml:5:") {
		t.Fatalf("want a located error about a non-mark, got %v", err)
	}
}

// history.yaml against DeepEP itself: EPBUILD_TEST_MIRROR=DIR go test ./compat -run Upstream
func TestUpstreamHistory(t *testing.T) {
	dir := mirrorRepo(t, deepepURL)
	h, err := LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	real := &gitAncestry{repoKey: RepoKey(deepepURL), dir: dir}
	ctx := context.Background()
	repo := h.Repos()[RepoKey(deepepURL)]
	for c := range repo.Commits {
		for _, m := range repo.Marks {
			want, _ := h.IsAncestor(ctx, deepepURL, m, c)
			got, err := real.IsAncestor(ctx, deepepURL, m, c)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Errorf("upstream: %s contains %s is %v, history.yaml says %v", c, m, got, want)
			}
		}
	}
}

func TestCatalog(t *testing.T) {
	cat, err := LoadCatalog()
	if err != nil {
		t.Fatal(err)
	}
	p, ok := cat.Lookup("nvshmem", "3.2.5-1")
	if !ok || p.Archive == nil || !strings.HasPrefix(p.Archive.SHA256, "eb2c8fb3") || p.Archive.Strip != 1 ||
		!strings.HasSuffix(p.Archive.URL, "/3.2.5/source/nvshmem_src_3.2.5-1.txz") {
		t.Errorf("3.2.5-1: %+v", p)
	}
	for _, v := range []string{"3.4.5", "3.4.5-0", "v3.4.5-0"} {
		p, ok := cat.Lookup("nvshmem", v)
		if !ok || p.Git == nil || p.Git.Commit != "131da55f643ac87c810ba0bc51d359258bf433a1" || p.Git.Ref != "v3.4.5-0" {
			t.Errorf("%s: %+v", v, p)
		}
	}
	if p, ok := cat.LookupKind("nvshmem", "3.4.5", "archive"); !ok || p.Archive == nil || !strings.HasPrefix(p.Archive.SHA256, "40c1d4c2") {
		t.Errorf("3.4.5 as an archive: %+v", p)
	}
	if p, ok := cat.LookupKind("nvshmem", "3.5.19-1", "archive"); !ok || p.Git == nil || p.Git.Commit != "919760f413fb834e76382d129ba9c3314ce722be" {
		t.Errorf("3.5.19-1 has no archive: the git pin is the answer, got %+v", p)
	}
	if r, ok := cat.Release("nvshmem", "3.5.19"); !ok || r.Version != "3.5.19-1" {
		t.Errorf("3.5.19 names the only release of that core, 3.5.19-1: %+v %v", r, ok)
	}
	for _, v := range []string{"3.3.24", "3.3.20", "3.3.9"} {
		if p, ok := cat.Lookup("nvshmem", v); !ok || p.Archive == nil || !strings.Contains(p.Archive.URL, "nvshmem_src_cuda12-all-all-"+v+".tar.gz") {
			t.Errorf("%s: %+v", v, p)
		}
	}
	if _, ok := cat.Lookup("nvshmem", "3.3.1"); ok {
		t.Error("3.3.1 is not a known release")
	}
	if _, ok := cat.Lookup("nvshmem", "3.5.19-2"); ok {
		t.Error("3.5.19-2 is not 3.5.19-1")
	}
	if p, ok := cat.Lookup("nccl", "2.22.3-1"); !ok || p.Git == nil || p.Git.Commit != "178b6b759074597777ce13438efb0e0ba625e429" {
		t.Errorf("nccl 2.22.3-1: %+v", p)
	}
	// a devel tree resolves by its whole version only, never as "3.5.20"
	if p, ok := cat.Lookup("nvshmem", "3.5.20+devel.b03fa74"); !ok || p.Git == nil || p.Git.URL != "https://github.com/a-szegel/NVSHMEM" {
		t.Errorf("3.5.20+devel.b03fa74: %+v %v", p, ok)
	}
	if r, ok := cat.Release("nvshmem", "3.5.20"); ok {
		t.Errorf("3.5.20 is no release, yet resolves to %s", r.Version)
	}
	vs := cat.Versions("nvshmem")
	if !slices.IsSortedFunc(vs, func(a, b string) int { return MustVersion(a).Compare(MustVersion(b)) }) || len(vs) != 9 {
		t.Errorf("versions not sorted oldest first: %v", vs)
	}
	if cat.Has("deepep") || !cat.Has("nccl") {
		t.Error("Has")
	}
}

func TestParseCatalogErrors(t *testing.T) {
	body := `components:
  nvshmem:
    - version: 3.4.5
      pins:
        - git: {url: https://github.com/NVIDIA/nvshmem, commit: 131da55}
    - version: 3.4.5-0
      pins:
        - archive: {url: http://example.com/x.tgz, sha256: abc}
`
	body += `    - version: 3.5.20
      devel: true
      pins:
        - git: {url: https://github.com/a-szegel/NVSHMEM, commit: b03fa743a088ea358daa04effd3e990c8e61df17}
`
	_, err := ParseCatalog("catalog.yaml", []byte(body))
	for _, want := range []string{"catalog.yaml:5:", "full 40-hex", "listed twice", "catalog.yaml:8:", "64-hex", "https URL", "catalog.yaml:9:", "a devel tree needs a local part"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}

// Git pins against the upstream repositories: the ref names the commit.
func TestUpstreamCatalogGitPins(t *testing.T) {
	cat, err := LoadCatalog()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, comp := range cat.Components() {
		for _, v := range cat.Versions(comp) {
			r, _ := cat.Release(comp, v)
			for _, p := range r.Pins {
				if p.Git == nil {
					continue
				}
				t.Run(comp+"@"+v, func(t *testing.T) {
					dir := mirrorRepo(t, p.Git.URL)
					out, err := exec.Command("git", "-C", dir, "rev-parse", "--verify", "-q", p.Git.Ref+"^{commit}").Output()
					if err != nil {
						t.Skipf("the mirror has no %s", p.Git.Ref)
					}
					if got := strings.TrimSpace(string(out)); got != p.Git.Commit {
						t.Errorf("%s %s: %s is %s upstream, the catalogue says %s", comp, v, p.Git.Ref, got, p.Git.Commit)
					}
					checked++
				})
			}
		}
	}
	t.Logf("%d git pins checked", checked)
}

func TestParseAxis(t *testing.T) {
	a, err := ParseAxis("nvshmem=3.3.24, 3.4.5,3.5.19-1")
	if err != nil || a.Key != "nvshmem.version" || !slices.Equal(a.Values, []string{"3.3.24", "3.4.5", "3.5.19-1"}) {
		t.Errorf("%+v %v", a, err)
	}
	if a, err := ParseAxis("toolchain.cuda=12.9,13.0"); err != nil || a.Key != "toolchain.cuda" {
		t.Errorf("%+v %v", a, err)
	}
	// bundled keeps the component in the Python environment (torch's NCCL) instead of a release
	b, err := ParseAxis("nccl=bundled,2.28.3-1")
	if err != nil || !slices.Equal(b.Sets("bundled"), []string{"nccl.source=python"}) ||
		!slices.Equal(b.Sets("2.28.3-1"), []string{"nccl.version=2.28.3-1"}) {
		t.Errorf("%+v %v", b, err)
	}
	if c, err := ParseAxis("nccl.env.X=bundled"); err != nil || !slices.Equal(c.Sets("bundled"), []string{"nccl.env.X=bundled"}) {
		t.Errorf("bundled on a key axis is a plain value: %+v %v", c, err)
	}
	// a version with a source kind: the wheel, the release from source and the archive in one axis
	d, err := ParseAxis("nvshmem=bundled,3.4.5:git,3.3.20:archive")
	if err != nil || !slices.Equal(d.Sets("3.4.5:git"), []string{"nvshmem.version=3.4.5", "nvshmem.source=git"}) ||
		!slices.Equal(d.Sets("3.3.20:archive"), []string{"nvshmem.version=3.3.20", "nvshmem.source=archive"}) {
		t.Errorf("%+v %v", d, err)
	}
	if e, err := ParseAxis("nccl.env.X=1:2"); err != nil || !slices.Equal(e.Sets("1:2"), []string{"nccl.env.X=1:2"}) {
		t.Errorf("a key axis's value is kept whole: %+v %v", e, err)
	}
	for _, bad := range []string{"nvshmem", "=1", "nvshmem=", "nvshmem=3.4.x", "nvshmem=3.4.5,3.4.5", "NV=1", "nccl=bundled,bundled",
		"nvshmem=3.4.5:pip", "nvshmem=3.4.5:", "nvshmem=3.4.x:git"} {
		if _, err := ParseAxis(bad); err == nil {
			t.Errorf("%q should not parse", bad)
		}
	}
}

// The matrix excludes what an error rule forbids, with its ids, and carries the env that
// warn rules add.
func TestBuildMatrix(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	facts := func(sets []string) (Facts, error) {
		f := baseFacts()
		ibrc(&f)
		for _, s := range sets {
			k, v, _ := strings.Cut(s, "=")
			name, _, _ := strings.Cut(k, ".")
			comp(&f, name).Version = v
		}
		return f, nil
	}
	axes := []Axis{}
	for _, s := range []string{"nvshmem=3.2.5-1,3.5.19-1", "nccl=2.21.5-1,2.22.3-1"} {
		a, err := ParseAxis(s)
		if err != nil {
			t.Fatal(err)
		}
		axes = append(axes, a)
	}
	m, err := BuildMatrix(context.Background(), "ibrc-dualport", axes, nil, rules, deepepFixture(t), facts, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Cells) != 2 || len(m.Excluded) != 2 {
		t.Fatalf("want 2 cells and 2 exclusions, got %+v", m)
	}
	for _, e := range m.Excluded {
		if e.Values["nvshmem"] != "3.5.19-1" || !slices.Contains(e.Rules, "R3") || !slices.Contains(e.Rules, "R5") {
			t.Errorf("exclusion %s: rules %v", e.Name, e.Rules)
		}
	}
	for _, c := range m.Cells {
		want := c.Values["nccl"] == "2.22.3-1"
		if got := c.Env["NCCL_RUNTIME_CONNECT"] == "0"; got != want {
			t.Errorf("cell %s env %v", c.Name, c.Env)
		}
		if !strings.HasPrefix(c.Command, "epbuild recipe ibrc-dualport --set nvshmem.version=3.2.5-1 --set nccl.version=") {
			t.Errorf("command %q", c.Command)
		}
	}
	gh, err := m.GitHub()
	if err != nil {
		t.Fatal(err)
	}
	var ghm struct {
		Include []struct {
			Recipe, Name, Sets, Command string
			Env                         map[string]string
		}
	}
	if err := json.Unmarshal(gh, &ghm); err != nil || len(ghm.Include) != 2 || ghm.Include[1].Env["NCCL_RUNTIME_CONNECT"] != "0" ||
		ghm.Include[0].Sets != "--set nvshmem.version=3.2.5-1 --set nccl.version=2.21.5-1" {
		t.Errorf("github matrix %s: %v", gh, err)
	}
	gl, err := m.GitLab()
	if err != nil {
		t.Fatal(err)
	}
	var glm struct {
		Parallel struct {
			Matrix []map[string]string `yaml:"matrix"`
		} `yaml:"parallel"`
	}
	if err := yaml.Unmarshal(gl, &glm); err != nil || len(glm.Parallel.Matrix) != 2 || glm.Parallel.Matrix[1]["NCCL_RUNTIME_CONNECT"] != "0" ||
		glm.Parallel.Matrix[0]["EPBUILD_RECIPE"] != "ibrc-dualport" {
		t.Errorf("gitlab matrix:\n%s\n%v", gl, err)
	}
	if _, err := BuildMatrix(context.Background(), "x", []Axis{axes[0], axes[0]}, nil, rules, nil, facts, false); err == nil {
		t.Error("a repeated axis must be an error")
	}
	one, err := BuildMatrix(context.Background(), "x", nil, nil, rules, deepepFixture(t), facts, false)
	if err != nil || len(one.Cells) != 1 || one.Cells[0].Command != "epbuild recipe x" {
		t.Errorf("no axes: one cell, the recipe: %+v %v", one, err)
	}
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"nvshmem.version=3.4.5":  "nvshmem.version=3.4.5",
		"env.LD_PRELOAD={{x}}/y": "'env.LD_PRELOAD={{x}}/y'",
		"a b":                    "'a b'",
		"it's":                   `'it'\''s'`,
		"":                       "''",
	} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
