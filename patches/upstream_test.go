package patches

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/patches/effect"
)

// mirror returns an Upstream over the bare repositories of EPBUILD_TEST_MIRROR
// (laid out by URL: <dir>/github.com/<owner>/<repo>.git), or skips.
func mirror(t *testing.T) (gitUpstream, string) {
	t.Helper()
	dir := os.Getenv("EPBUILD_TEST_MIRROR")
	if dir == "" {
		t.Skip("set EPBUILD_TEST_MIRROR to a mirror directory of the upstream repositories")
	}
	up := gitUpstream{}
	for _, repo := range []string{"deepseek-ai/DeepEP", "Infrawaves/DeepEP_ibrc_dual-ports_multiQP", "valgur/NVSHMEM-archive"} {
		p := filepath.Join(dir, "github.com", repo+".git")
		if _, err := os.Stat(p); err != nil {
			t.Skipf("mirror lacks %s: %v", repo, err)
		}
		up["https://github.com/"+repo] = p
	}
	return up, dir
}

func shipped(t *testing.T, name string) *Set {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	s, ok := c.Get(name)
	if !ok {
		t.Fatalf("no set %s", name)
	}
	return s
}

// checkoutUpstream unpacks commit (or tag) of a mirrored repository.
func checkoutUpstream(t *testing.T, up gitUpstream, repo, commit string) string {
	t.Helper()
	dst := t.TempDir()
	extract(t, up["https://github.com/"+repo], commit, dst)
	return dst
}

// rawEffect says whether the raw fact behind an effect holds on a tree (the
// real checks belong to package effect; this is the text they rest on).
func rawEffect(t *testing.T, root string, e effect.Effect) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(e.File)))
	if err != nil {
		t.Fatalf("effect %s: %v", e.Kind, err)
	}
	s := string(data)
	switch e.Kind {
	case effect.Contains:
		return strings.Contains(s, e.Text)
	case effect.Absent:
		return !strings.Contains(s, e.Text)
	case effect.EnvRead:
		return strings.Contains(s, `getenv("`+e.Name+`")`) || strings.Contains(s, `os.environ['`+e.Name+`']`)
	case effect.PythonDef:
		return strings.Contains(s, "class "+e.Class) && strings.Contains(s, "    def "+e.Method+"(self")
	case effect.PythonCall:
		return strings.Contains(s, "self."+e.Callee+"(")
	}
	t.Fatalf("no raw check for effect kind %s", e.Kind)
	return false
}

// checkEffects: every effect of the set holds on the patched tree and none
// holds on the unpatched one (so each effect tells the two apart).
func checkEffects(t *testing.T, s *Set, before, after string) {
	t.Helper()
	for _, e := range s.Effects {
		if !rawEffect(t, after, e) {
			t.Errorf("%s: effect %s %s%s%s does not hold on the patched tree", s.Name, e.Kind, e.Text, e.Name, e.Method)
		}
		if rawEffect(t, before, e) {
			t.Errorf("%s: effect %s %s%s%s already holds on the unpatched tree", s.Name, e.Kind, e.Text, e.Name, e.Method)
		}
	}
}

func TestUpstreamDeepEPPR466(t *testing.T) {
	up, _ := mirror(t)
	s := shipped(t, "deepep-pr466")
	ctx := context.Background()
	const deepep = "deepseek-ai/DeepEP"

	const base = "29d31c095796f3c8ece47ee9cdcc167051bbeed9"
	tree := checkoutUpstream(t, up, deepep, base)
	res, err := Apply(ctx, tree, s, up, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pr := res.Patches[0]
	t.Logf("on 29d31c0: %s digest %s files %+v", pr.Status, pr.Digest[:12], pr.Files)
	if pr.Status != StatusApplied || pr.Files[0].Path != "deep_ep/buffer.py" || len(pr.Files[0].Hunks) != 2 {
		t.Fatalf("on 29d31c0: %+v", pr)
	}
	checkEffects(t, s, checkoutUpstream(t, up, deepep, base), tree)
	sameTrees(t, "PR #466 applied vs its head", snapshot(t, checkoutUpstream(t, up, deepep, s.Patches[0].UpstreamDiff.Head)), snapshot(t, tree))

	before := snapshot(t, tree)
	_, err = Apply(ctx, tree, s, up, Options{})
	var ae *AlreadyAppliedError
	if !errors.As(err, &ae) {
		t.Fatalf("applied twice: %v", err)
	}
	t.Logf("twice: %v", err)
	sameTrees(t, "after second apply", before, snapshot(t, tree))

	// v1.2.1: the hunks sit 9 and 11 lines earlier. Strict and a bound of 10
	// refuse it; a bound of 11 takes it and says where each hunk went.
	const v121 = "9af0e0d0e74f3577af1979c9b9e1ac2cad0104ee"
	for _, bound := range []int{0, 10} {
		tree := checkoutUpstream(t, up, deepep, v121)
		_, err := Apply(ctx, tree, s, up, Options{MaxOffset: &bound})
		var ce *ConflictError
		if !errors.As(err, &ce) || ce.File != "deep_ep/buffer.py" {
			t.Fatalf("v1.2.1, max offset %d: want a conflict, got %v", bound, err)
		}
		// The conflict says what would work: the offset git apply finds.
		if ce.NeedOffset != 11 || (bound == 0 && (ce.Hunk != 1 || ce.FitOffset != -9 || ce.FitLine != ce.Line-9)) ||
			!strings.Contains(err.Error(), "pass `--max-offset 11`") {
			t.Errorf("v1.2.1, max offset %d: the conflict does not say that 11 lines place every hunk: %v", bound, err)
		}
		t.Logf("v1.2.1, max offset %d: %v", bound, err)
	}
	eleven := 11
	tree = checkoutUpstream(t, up, deepep, v121)
	res, err = Apply(ctx, tree, s, up, Options{MaxOffset: &eleven})
	if err != nil {
		t.Fatal(err)
	}
	pr = res.Patches[0]
	t.Logf("v1.2.1, max offset 11: %s %+v", pr.Status, pr.Files[0].Hunks)
	if h := pr.Files[0].Hunks; pr.Status != StatusAppliedOffset || h[0].Offset != -9 || h[1].Offset != -11 {
		t.Fatalf("v1.2.1: %+v", pr)
	}
	checkEffects(t, s, checkoutUpstream(t, up, deepep, v121), tree)

	tree = checkoutUpstream(t, up, deepep, "a84a24808fb0ea732f49b874cc456a69dde69076")
	before = snapshot(t, tree)
	_, err = Apply(ctx, tree, s, up, Options{})
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.File != "deep_ep/buffer.py" || ce.Hunk == 0 {
		t.Fatalf("on a84a248: want a conflict on deep_ep/buffer.py, got %v", err)
	}
	t.Logf("on a84a248: %v", err)
	sameTrees(t, "after conflict", before, snapshot(t, tree))
}

func TestUpstreamIBRCNVSHMEM(t *testing.T) {
	up, _ := mirror(t)
	s := shipped(t, "ibrc-dualport-nvshmem")
	tree := checkoutUpstream(t, up, "valgur/NVSHMEM-archive", "3.2.5-1")
	res, err := Apply(context.Background(), tree, s, up, Options{})
	if err != nil {
		t.Fatal(err)
	}
	pr := res.Patches[0]
	hunks := 0
	for _, f := range pr.Files {
		hunks += len(f.Hunks)
	}
	t.Logf("%s: %s, %d files, %d hunks, digest %s", pr.Name, pr.Status, len(pr.Files), hunks, pr.Digest)
	if pr.Status != StatusApplied || pr.Digest != s.Patches[0].UpstreamFile.SHA256 {
		t.Fatalf("%+v", pr)
	}
	checkEffects(t, s, checkoutUpstream(t, up, "valgur/NVSHMEM-archive", "3.2.5-1"), tree)

	// The same patch through git apply gives the same tree.
	patch, err := up.File(context.Background(), s.Patches[0].UpstreamFile.Spec())
	if err != nil {
		t.Fatal(err)
	}
	ref := checkoutUpstream(t, up, "valgur/NVSHMEM-archive", "3.2.5-1")
	gitApply(t, ref, patch)
	sameTrees(t, "engine vs git apply", snapshot(t, ref), snapshot(t, tree))
}

func TestUpstreamIBRCDeepEP(t *testing.T) {
	up, _ := mirror(t)
	s := shipped(t, "ibrc-dualport-deepep")
	const base = "a84a24808fb0ea732f49b874cc456a69dde69076"
	tree := checkoutUpstream(t, up, "deepseek-ai/DeepEP", base)
	res, err := Apply(context.Background(), tree, s, up, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res.Patches[0])
	data, err := os.ReadFile(filepath.Join(tree, "csrc", "kernels", "internode.cu"))
	if err != nil {
		t.Fatal(err)
	}
	if sha256Hex(data) != s.Patches[0].Replace.SHA256 {
		t.Fatal("internode.cu is not the pinned replacement")
	}
	checkEffects(t, s, checkoutUpstream(t, up, "deepseek-ai/DeepEP", base), tree)
	_, err = Apply(context.Background(), tree, s, up, Options{})
	var ae *AlreadyAppliedError
	if !errors.As(err, &ae) {
		t.Fatalf("replaced twice: %v", err)
	}
}
