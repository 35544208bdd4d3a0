package builder

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/pack"
)

// TestOutputSetWholeOrNothing: the artifact, its .sha256, its SBOM and its wheels are
// published together or not at all. An output directory with room for the artifact
// but not for all of its set holds nothing afterwards (exit 3 naming it); the temporary
// names of a run that died are removed by the next run.
func TestOutputSetWholeOrNothing(t *testing.T) {
	var env []string
	if os.Getenv("EPBUILD_TEST_CHILD") != "outputset" {
		// the child runs on a copy of the warm demo's cache: what it tests is the output
		env = append(env, "EPBUILD_TEST_DIR="+warmCache(t))
	}
	fixture.InMountNamespace(t, "TestOutputSetWholeOrNothing", "outputset", outputSetChild, env...)
}

func outputSetChild(t *testing.T) {
	cache := os.Getenv("EPBUILD_TEST_DIR")
	ref, err := demoRun(t, cache, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(ref.Wheels) == 0 {
		t.Fatal("the demo has no wheel: the test needs one")
	}
	pages := func(path string) int64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return (st.Size() + 4095) / 4096
	}
	// room for the artifact, then for one sidecar less than the set needs each time
	art := pages(ref.Artifact)
	for _, extra := range []int64{0, 1, 1 + pages(ref.SBOM)} {
		out := smallFS(t, strconv.FormatInt((art+extra)*4, 10)+"k")
		_, err := demoRun(t, cache, out)
		wantNoSpace(t, err, out)
		isEmpty(t, out)
	}

	// epbuild sbom -o FILE on a full file system: no space, naming it; nothing left
	full := smallFS(t, "4k")
	err = disk.WriteOutput(filepath.Join(full, "x.cdx.json"), make([]byte, 64<<10))
	wantNoSpace(t, err, full)
	isEmpty(t, full)

	// a killed run's temporary names go; another name, and one of a live process, stay
	out := t.TempDir()
	name := filepath.Base(ref.Artifact)
	dead := "999999999"
	leftovers := []string{name + ".tmp-" + dead, name + ".sha256.tmp-" + dead, name + pack.SBOMSuffix + ".tmp-" + dead,
		strings.TrimSuffix(name, ".tar.zst") + ".wheels.tmp-" + dead}
	kept := []string{"notes.txt.tmp-" + dead, name + ".tmp-1"}
	for _, n := range append(leftovers, kept...) {
		if err := os.WriteFile(filepath.Join(out, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res, err := demoRun(t, cache, out)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range leftovers {
		if _, err := os.Lstat(filepath.Join(out, n)); err == nil {
			t.Errorf("a dead run's %s was left", n)
		}
	}
	for _, n := range kept {
		if _, err := os.Lstat(filepath.Join(out, n)); err != nil {
			t.Errorf("%s was removed: %v", n, err)
		}
	}
	for _, f := range append([]string{res.Artifact, res.Artifact + ".sha256", res.SBOM}, res.Wheels...) {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("the output set lacks %s: %v", f, err)
		}
	}
	// a second run over a complete set (its wheel directory there) replaces it whole
	if _, err := demoRun(t, cache, out); err != nil {
		t.Fatalf("a run over an existing set: %v", err)
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") && !strings.HasPrefix(e.Name(), "notes") && e.Name() != name+".tmp-1" {
			t.Errorf("a temporary name is left: %s", e.Name())
		}
	}
}
