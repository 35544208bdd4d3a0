package patches

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/patches/effect"
)

const channelBase = `import os


class Channel:
    def __init__(self, index):
        self.index = index
        self.ready = True

    def describe(self):
        return "channel %d" % self.index
`

const channelSite = `import os


class Channel:
    def __init__(self, index):
        self.index = index
        self.ready = True
        self._setup_site()

    def _setup_site(self):
        self.site = os.environ.get("DEMO_SITE", "nowhere")

    def describe(self):
        return "channel %d at %s" % (self.index, self.site)
`

const shimBase = "#include \"old.h\"\n\nint shim(void) { return 0; }\n"
const shimNew = "#include \"old.h\"\n#include \"efa/device.h\"\n\nint shim(void) { return efa_count(); }\n"

// siteRepo is a git repository with a base commit and two commits on it: a Python method
// added and called that reads an environment variable, and a C #include added.
func siteRepo(t *testing.T) (f *fixture, base string) {
	t.Helper()
	f = newFixture(t)
	base = f.commit("base", map[string][]byte{"pkg/channel.py": []byte(channelBase), "csrc/shim.c": []byte(shimBase)})
	f.commit("channel: read the site from DEMO_SITE", map[string][]byte{"pkg/channel.py": []byte(channelSite)})
	f.commit("shim: include the EFA device header", map[string][]byte{"csrc/shim.c": []byte(shimNew)})
	return f, base
}

// TestNewFromCommits: patch new on a commit range writes a set (one patch per commit,
// pinned) that the loader reads without a warning, that applies to the base, and whose
// suggested effects pass on the patched tree: the method added and called, the variable
// read, the header included.
func TestNewFromCommits(t *testing.T) {
	f, base := siteRepo(t)
	out := t.TempDir()
	ns, err := New(context.Background(), NewOptions{Dir: filepath.Join(out, "site-fix"), Component: "pydemo", Repo: f.dir, Range: base[:10] + "..HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Patches) != 2 || ns.Patches[0].Name != "0001-channel-read-the-site-from-DEMO_SITE" || ns.Patches[1].Name != "0002-shim-include-the-EFA-device-header" {
		t.Fatalf("patches %v", patchNames(ns.Patches))
	}
	c, err := LoadFor(Local{Dirs: []string{out}}, "site-fix")
	if err != nil {
		t.Fatal(err)
	}
	s := mustGet(t, c, "site-fix")
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("warnings %q", w)
	}
	if s.Description != "channel: read the site from DEMO_SITE" || len(s.AppliesTo) != 1 || s.AppliesTo[0].Commit != base {
		t.Errorf("description %q, applies-to %+v", s.Description, s.AppliesTo)
	}
	var got []string
	for _, e := range s.Effects {
		got = append(got, e.String())
	}
	want := []string{
		"env-read: pkg/channel.py reads DEMO_SITE",
		"include: csrc/shim.c includes efa/device.h",
		"python-def: Channel._setup_site defined in pkg/channel.py",
		"python-call: Channel.__init__ calls _setup_site in pkg/channel.py",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("effects:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	tree := f.checkout(base)
	if _, err := Apply(context.Background(), tree, s, nil, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Effects {
		if r := effect.Check(tree, e, nil); r.Status != effect.StatusPass {
			t.Errorf("%s: %s %s", e, r.Status, r.Detail)
		}
	}
	if r := effect.Check(f.checkout(base), s.Effects[3], nil); r.Status == effect.StatusPass {
		t.Errorf("the call passes on the base tree too: %s", r.Found)
	}

	// the directory exists now: refused, left as it was
	_, err = New(context.Background(), NewOptions{Dir: filepath.Join(out, "site-fix"), Component: "pydemo", Repo: f.dir, Range: base + "..HEAD"})
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "site-fix exists: pick another name, or remove it first") {
		t.Fatalf("second write: %v", err)
	}
	if des, _ := os.ReadDir(out); len(des) != 1 {
		t.Errorf("left in %s: %v", out, des)
	}
}

// TestNewFromFiles: patch new on diff files writes them pinned, with effects read from
// the diff alone.
func TestNewFromFiles(t *testing.T) {
	f, base := siteRepo(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "site.diff")
	if err := os.WriteFile(file, f.diff(base, "HEAD"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := New(context.Background(), NewOptions{Dir: filepath.Join(out, "site-fix"), Component: "pydemo", Files: []string{file}}); err != nil {
		t.Fatal(err)
	}
	c, err := LoadFor(Local{Dirs: []string{out}}, "site-fix")
	if err != nil {
		t.Fatal(err)
	}
	s := mustGet(t, c, "site-fix")
	tree := f.checkout(base)
	if _, err := Apply(context.Background(), tree, s, nil, Options{}); err != nil {
		t.Fatal(err)
	}
	if len(s.Effects) < 3 {
		t.Errorf("effects %v", s.Effects)
	}
	for _, e := range s.Effects {
		if r := effect.Check(tree, e, nil); r.Status != effect.StatusPass {
			t.Errorf("%s: %s %s", e, r.Status, r.Detail)
		}
	}

	// a FIFO given as a diff file is refused, not waited on
	fifo := filepath.Join(dir, "fifo.patch")
	if err := mkfifo(fifo); err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), NewOptions{Dir: filepath.Join(out, "other"), Component: "pydemo", Files: []string{fifo}})
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), fifo+" is a named pipe (FIFO), not a regular file") {
		t.Fatalf("fifo: %v", err)
	}
}

func TestUnknownEffectKindSuggests(t *testing.T) {
	dir := t.TempDir()
	writeLocalSet(t, dir, "site-fix", "deepep", localPatch)
	y := filepath.Join(dir, "site-fix", "set.yaml")
	b, err := os.ReadFile(y)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(y, append(b, "effects:\n  - kind: contain\n    file: a.txt\n    text: b\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadFor(Local{Dirs: []string{dir}}, "site-fix")
	want := y + `:9:11: effects[0].kind: unknown effect kind "contain" (one of python-def, python-call, contains, absent, include, env-read, elf-symbol): did you mean "contains"?`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant %s", err, want)
	}
}
