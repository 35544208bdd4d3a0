package patches

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

const goodDiffPatch = `  - name: p
    upstream-diff:
      repo: https://example.com/r
      base: 29d31c095796f3c8ece47ee9cdcc167051bbeed9
      head: 8a07e7e7ed57cfc63005f670d64d410cb30b061b
`

// TestSetYAMLErrors: strict decoding and validation errors point at the
// offending line and column of patches/<name>/set.yaml.
func TestSetYAMLErrors(t *testing.T) {
	head := "name: x\ndescription: d\ncomponent: deepep\npatches:\n"
	cases := []struct {
		name string
		yaml string
		want string
	}{
		{"unknown field", head + goodDiffPatch + "colour: blue\n", `patches/x/set.yaml:10:1: unknown field "colour"`},
		{"unknown nested field", head + goodDiffPatch + "      branch: main\n", `patches/x/set.yaml:10:7: unknown field "branch"`},
		{"duplicate key", "name: x\nname: x\ndescription: d\ncomponent: deepep\npatches:\n" + goodDiffPatch, `patches/x/set.yaml:2:1: mapping key "name" already defined at [1:1]`},
		{"wrong type", head + goodDiffPatch + "max-offset: many\n", `patches/x/set.yaml:10:13: cannot unmarshal string into Go struct field Set.MaxOffset of type int`},
		{"short commit", head + strings.Replace(goodDiffPatch, "29d31c095796f3c8ece47ee9cdcc167051bbeed9", "29d31c0", 1),
			`patches/x/set.yaml:8:13: patches[0].upstream-diff.base: "29d31c0" is a short commit; a full 40-hex commit is required`},
		{"bad sha256", head + "  - name: p\n    upstream-file:\n      repo: https://example.com/r\n      commit: 29d31c095796f3c8ece47ee9cdcc167051bbeed9\n      path: a.patch\n      sha256: abc\n",
			`patches/x/set.yaml:10:15: patches[0].upstream-file.sha256: "abc" is not a sha256`},
		{"two kinds", head + goodDiffPatch + "    file: a.patch\n    sha256: " + strings.Repeat("a", 64) + "\n",
			`patches/x/set.yaml:5:5: patches[0]: give exactly one of file, upstream-diff, upstream-file, replace (found file, upstream-diff)`},
		{"no kind", head + "  - name: p\n", `patches/x/set.yaml:5:5: patches[0]: give exactly one of`},
		{"name differs", strings.Replace(head, "name: x", "name: y", 1) + goodDiffPatch, `patches/x/set.yaml:1:7: name: "y" differs from its directory "x"`},
		{"component", strings.Replace(head, "deepep", "Deep EP", 1) + goodDiffPatch, `patches/x/set.yaml:3:12: component: "Deep EP" is not a component name`},
		{"no component", strings.Replace(head, "component: deepep\n", "", 1) + goodDiffPatch, `patches/x/set.yaml:1:1: component: is required`},
		{"applies-to short", head + goodDiffPatch + "applies-to:\n  - commit: a84a248\n", `patches/x/set.yaml:11:13: applies-to[0].commit: "a84a248" is a short commit`},
		{"missing own file", head + "  - name: p\n    file: nope.patch\n    sha256: " + strings.Repeat("a", 64) + "\n", `patches/x/set.yaml:6:11: patches[0].file: read patches/x/nope.patch`},
		{"own file pin", head + "  - name: p\n    file: own.patch\n    sha256: " + strings.Repeat("a", 64) + "\n", `patches/x/set.yaml:7:13: patches[0].sha256: patches/x/own.patch has sha256 `},
		{"effect kind", head + goodDiffPatch + "effects:\n  - kind: greps\n    file: a.py\n", `patches/x/set.yaml:11:11: effects[0].kind: unknown effect kind "greps"`},
		{"effect field", head + goodDiffPatch + "effects:\n  - kind: contains\n    file: a.py\n    txt: y\n", `patches/x/set.yaml:13:5: unknown field "txt"`},
		{"replace target", head + "  - name: p\n    replace:\n      target: ../x\n      repo: https://example.com/r\n      commit: 29d31c095796f3c8ece47ee9cdcc167051bbeed9\n      path: x\n      sha256: " + strings.Repeat("a", 64) + "\n",
			`patches/x/set.yaml:7:15: patches[0].replace.target: "../x" is not a relative path inside a tree`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fsys := fstest.MapFS{
				"x/set.yaml":  {Data: []byte(c.yaml)},
				"x/own.patch": {Data: []byte("diff --git a/a b/a\n")},
			}
			_, err := LoadFS(fsys)
			if err == nil {
				t.Fatal("loaded")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error\n got %s\nwant %s", err, c.want)
			}
		})
	}
}

// TestLoadGoodSet: a valid set loads with its fields, and errors of two sets
// are reported together.
func TestLoadGoodSet(t *testing.T) {
	good := "name: x\ndescription: d\ncomponent: nvshmem\nmax-offset: 2\napplies-to:\n  - version: 3.2.5-1\npatches:\n" + goodDiffPatch +
		"      ref: refs/pull/1/head\neffects:\n  - kind: env-read\n    file: a.c\n    name: V\n"
	c, err := LoadFS(fstest.MapFS{"x/set.yaml": {Data: []byte(good)}})
	if err != nil {
		t.Fatal(err)
	}
	s, ok := c.Get("x")
	if !ok || s.Component != NVSHMEM || s.MaxOffset != 2 || s.AppliesTo[0].Version != "3.2.5-1" ||
		s.Patches[0].Kind() != KindUpstreamDiff || s.Patches[0].UpstreamDiff.Ref != "refs/pull/1/head" ||
		s.Effects[0].Name != "V" || strings.Join(c.Names(), ",") != "x" {
		t.Fatalf("loaded %+v", s)
	}
	_, err = LoadFS(fstest.MapFS{
		"a/set.yaml": {Data: []byte(strings.Replace(good, "name: x", "name: a", 1) + "bogus: 1\n")},
		"b/set.yaml": {Data: []byte(strings.Replace(good, "name: x", "name: b", 1) + "bogus: 1\n")},
	})
	if err == nil || !strings.Contains(err.Error(), "patches/a/set.yaml") || !strings.Contains(err.Error(), "patches/b/set.yaml") {
		t.Fatalf("want both sets' errors, got %v", err)
	}
}

var (
	full40 = regexp.MustCompile(`^[0-9a-f]{40}$`)
	full64 = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// TestShippedSets: every embedded set loads, is strict, states effects, and
// pins everything fully.
func TestShippedSets(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Component{"deepep-pr466": DeepEP, "ibrc-dualport-nvshmem": NVSHMEM, "ibrc-dualport-deepep": DeepEP, "nvshmem-3.2-cuda13": NVSHMEM, "nvshmem-3.2-ibgda-no-gdrcopy": NVSHMEM, "deepep-a84a248-test-procs": DeepEP}
	for name, comp := range want {
		s, ok := c.Get(name)
		if !ok {
			t.Fatalf("set %s missing; have %v", name, c.Names())
		}
		if s.Component != comp || s.MaxOffset != 0 || len(s.Effects) == 0 || len(s.AppliesTo) == 0 {
			t.Errorf("%s: %+v", name, s)
		}
		for _, a := range s.AppliesTo {
			if a.Commit != "" && !full40.MatchString(a.Commit) {
				t.Errorf("%s: applies-to %q", name, a.Commit)
			}
		}
		for _, p := range s.Patches {
			var pins []string
			switch p.Kind() {
			case KindUpstreamDiff:
				pins = []string{p.UpstreamDiff.Base, p.UpstreamDiff.Head}
			case KindUpstreamFile:
				pins = []string{p.UpstreamFile.Commit}
				if !full64.MatchString(p.UpstreamFile.SHA256) {
					t.Errorf("%s/%s: sha256 %q", name, p.Name, p.UpstreamFile.SHA256)
				}
			case KindReplace:
				pins = []string{p.Replace.Commit}
				if !full64.MatchString(p.Replace.SHA256) {
					t.Errorf("%s/%s: sha256 %q", name, p.Name, p.Replace.SHA256)
				}
			case KindFile:
				if !full64.MatchString(p.SHA256) {
					t.Errorf("%s/%s: sha256 %q", name, p.Name, p.SHA256)
				}
			default:
				t.Errorf("%s/%s: no kind", name, p.Name)
			}
			for _, pin := range pins {
				if !full40.MatchString(pin) {
					t.Errorf("%s/%s: pin %q is not a full commit", name, p.Name, pin)
				}
			}
		}
	}
}

// TestUpstreamSources: the three upstream kinds through an Upstream served by
// the git CLI: a diff base..head, a pinned patch file (and a wrong pin), a
// pinned replacement (then already applied), and a missing upstream.
func TestUpstreamSources(t *testing.T) {
	up := newFixture(t)
	base := up.commit("base", map[string][]byte{"lib/x.c": []byte(lines("x", 30))})
	head := up.commit("head", map[string][]byte{"lib/x.c": []byte(strings.Replace(lines("x", 30), "x 9\n", "x nine\n", 1))})
	up.commit("store", map[string][]byte{"fix.patch": up.diff(base, head), "repl.c": []byte("replaced\n")})
	store := strings.TrimSpace(git(t, up.dir, "rev-parse", "HEAD"))
	git(t, up.dir, "update-ref", "refs/pull/7/head", head)
	patchSHA := sha256Hex(up.diff(base, head))
	replSHA := sha256Hex([]byte("replaced\n"))
	src := gitUpstream{"https://example.com/up": up.dir}

	load := func(t *testing.T, patches string) *Set {
		c, err := LoadFS(fstest.MapFS{"s/set.yaml": {Data: []byte("name: s\ndescription: d\ncomponent: deepep\npatches:\n" + patches)}})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := c.Get("s")
		return s
	}
	diffSet := load(t, "  - name: d\n    upstream-diff:\n      repo: https://example.com/up\n      base: "+base+"\n      head: "+head+"\n      ref: refs/pull/7/head\n")
	fileSetUp := func(sha string) *Set {
		return load(t, "  - name: f\n    upstream-file:\n      repo: https://example.com/up\n      commit: "+store+"\n      path: fix.patch\n      sha256: "+sha+"\n")
	}
	replSet := load(t, "  - name: r\n    replace:\n      target: lib/x.c\n      repo: https://example.com/up\n      commit: "+store+"\n      path: repl.c\n      sha256: "+replSHA+"\n")
	ctx := context.Background()

	for _, s := range []*Set{diffSet, fileSetUp(patchSHA)} {
		tree := up.checkout(base)
		res, err := Apply(ctx, tree, s, src, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Patches[0].Digest != patchSHA {
			t.Errorf("%s: digest %s, want the diff's %s", s.Patches[0].Name, res.Patches[0].Digest, patchSHA)
		}
		sameTrees(t, "upstream patch vs head", snapshot(t, up.checkout(head)), snapshot(t, tree))
	}

	tree := up.checkout(base)
	before := snapshot(t, tree)
	_, err := Apply(ctx, tree, fileSetUp(strings.Repeat("ab", 32)), src, Options{})
	var pe *PinError
	if !errors.As(err, &pe) || pe.Got != patchSHA || !strings.Contains(err.Error(), "https://example.com/up@"+store[:7]+":fix.patch: sha256 is") {
		t.Fatalf("want a pin error, got %v", err)
	}
	sameTrees(t, "after pin error", before, snapshot(t, tree))

	if _, err := Apply(ctx, tree, diffSet, nil, Options{}); err == nil || !strings.Contains(err.Error(), "patch d: upstream-diff needs an upstream source") {
		t.Fatalf("nil upstream: %v", err)
	}

	res, err := Apply(ctx, tree, replSet, src, Options{})
	if err != nil || res.Patches[0].Files[0].Op != OpReplace || res.Patches[0].Digest != replSHA {
		t.Fatalf("replace: %+v %v", res, err)
	}
	_, err = Apply(ctx, tree, replSet, src, Options{})
	var ae *AlreadyAppliedError
	if !errors.As(err, &ae) {
		t.Fatalf("replace twice: %v", err)
	}
	missing := up.checkout(store)
	if err := removeAll(missing, "lib"); err != nil {
		t.Fatal(err)
	}
	_, err = Apply(ctx, missing, replSet, src, Options{})
	var ce *ConflictError
	if !errors.As(err, &ce) || err.Error() != "patch r: lib/x.c: file does not exist" {
		t.Fatalf("replace of a missing file: %v", err)
	}
}
