package patches

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/patches/effect"
)

// The GPUDirect-TCPX build fixes apply to the plugin's only commit, each effect tells
// the patched tree from the upstream one, and the fixed CMakeLists.txt parses where
// upstream's does not (real cmake: it stops at enable_language(CUDA) without nvcc, or
// later with one, but never at line 1).
func TestUpstreamGPUDirectTCPXBuild(t *testing.T) {
	dir := os.Getenv("EPBUILD_TEST_MIRROR")
	if dir == "" {
		t.Skip("set EPBUILD_TEST_MIRROR to a mirror directory of the upstream repositories")
	}
	repo := filepath.Join(dir, "github.com", "google", "nccl-plugin-gpudirecttcpx.git")
	if _, err := os.Stat(repo); err != nil {
		t.Skipf("mirror lacks google/nccl-plugin-gpudirecttcpx: %v", err)
	}
	s := shipped(t, "gpudirecttcpx-build")
	const commit = "4b8ea7f2716fc21b026b4d09c79578d43b23e86d"
	before, tree := t.TempDir(), t.TempDir()
	extract(t, repo, commit, before)
	extract(t, repo, commit, tree)
	res, err := Apply(context.Background(), tree, s, gitUpstream{}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Patches {
		if p.Status != StatusApplied {
			t.Errorf("%s: %s", p.Name, p.Status)
		}
	}
	for i, e := range s.Effects {
		if e.Kind == effect.ELFSymbol {
			continue // a built file: checked on the staged and installed prefix
		}
		if r := effect.Check(tree, e, nil); r.Status != effect.StatusPass {
			t.Errorf("effect %d (%s) on the patched tree: %+v", i, e, r)
		}
		if r := effect.Check(before, e, nil); r.Status == effect.StatusPass {
			t.Errorf("effect %d (%s) already holds upstream: it proves nothing", i, e)
		}
	}

	cmake, err := exec.LookPath("cmake")
	if err != nil {
		t.Skip("cmake not found on PATH")
	}
	configure := func(src string) string {
		out, _ := exec.Command(cmake, "-S", src, "-B", t.TempDir(), "-DNET_GPUDIRECTTCPX_EXPORT=nccl").CombinedOutput()
		return string(out)
	}
	if out := configure(before); !strings.Contains(out, "Parse error") {
		t.Errorf("upstream's CMakeLists.txt parsed; the bracket-comment fix may be moot:\n%s", out)
	}
	if out := configure(tree); strings.Contains(out, "Parse error") || strings.Contains(out, "CMakeLists.txt:1 ") {
		t.Errorf("the patched CMakeLists.txt does not parse:\n%s", out)
	}

	// Ninja: the patched top of CMakeLists.txt (up to CUDA, which this host may lack)
	// builds a program; with upstream's unguarded flags ninja refuses the build file.
	if _, err := exec.LookPath("ninja"); err != nil {
		t.Skip("ninja not found on PATH")
	}
	top, err := os.ReadFile(filepath.Join(tree, "CMakeLists.txt"))
	if err != nil {
		t.Fatal(err)
	}
	head, _, ok := strings.Cut(string(top), "# The CUDA compiler")
	if !ok {
		t.Fatal("the patched CMakeLists.txt has no CUDA section marker")
	}
	guarded := "if(CMAKE_GENERATOR MATCHES \"Makefiles\")\n"
	unguarded := strings.Replace(strings.Replace(head, guarded, "", 1), "\n  set(CMAKE_CUDA_FLAGS", "\nset(CMAKE_CUDA_FLAGS", 1)
	unguarded = strings.Replace(strings.Replace(unguarded, "\n  set(CMAKE_CXX_FLAGS", "\nset(CMAKE_CXX_FLAGS", 1), "'\")\nendif()\n", "'\")\n", 1)
	if unguarded == head {
		t.Fatal("could not undo the guard")
	}
	ninjaBuild := func(cmakeLists string) (string, error) {
		src := t.TempDir()
		if err := os.WriteFile(filepath.Join(src, "CMakeLists.txt"), []byte(cmakeLists+"add_executable(x x.cc)\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, "x.cc"), []byte("int main() { return 0; }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		b := t.TempDir()
		out, err := exec.Command(cmake, "-G", "Ninja", "-S", src, "-B", b).CombinedOutput()
		if err != nil {
			return string(out), err
		}
		out, err = exec.Command(cmake, "--build", b).CombinedOutput()
		return string(out), err
	}
	if out, err := ninjaBuild(head); err != nil {
		t.Errorf("the patched flags with Ninja: %v\n%s", err, out)
	}
	if out, err := ninjaBuild(unguarded); err == nil || !strings.Contains(out, "bad $-escape") {
		t.Errorf("upstream's flags with Ninja built (the guard would be moot): %v\n%s", err, out)
	}
}
