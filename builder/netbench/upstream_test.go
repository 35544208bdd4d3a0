package netbench

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/embedded"
)

// Our declaration of the ncclNet_v7 interface (ncclnet_v7.h) agrees, field by field and
// parameter by parameter, with the plugin headers of every NCCL release that ships them
// (ext-net/example/nccl, 2.19.1 to 2.29.3), and the check notices a difference.
func TestUpstreamNCCLNetV7Declaration(t *testing.T) {
	dir := os.Getenv("EPBUILD_TEST_MIRROR")
	if dir == "" {
		t.Skip("set EPBUILD_TEST_MIRROR to a mirror directory of the upstream repositories")
	}
	repo := filepath.Join(dir, "github.com", "NVIDIA", "nccl.git")
	if _, err := os.Stat(repo); err != nil {
		t.Skipf("mirror lacks NVIDIA/nccl: %v", err)
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found on PATH")
	}
	src := t.TempDir()
	if err := embedded.WriteFiles("tools", Component, src); err != nil {
		t.Fatal(err)
	}
	tags, err := exec.Command("git", "--git-dir", repo, "tag", "--list", "v2.*").Output()
	if err != nil {
		t.Fatal(err)
	}
	// abi_check.c includes ours by quotes: the copy beside it is the one compiled
	compile := func(ext, ours string) ([]byte, error) {
		return exec.Command(gcc, "-std=c11", "-Werror", "-fsyntax-only", "-I", ext, filepath.Join(ours, "abi_check.c")).CombinedOutput()
	}
	checked := map[string]bool{}
	var last string
	for _, tag := range strings.Fields(string(tags)) {
		if exec.Command("git", "--git-dir", repo, "cat-file", "-e", tag+":ext-net/example/nccl/net_v7.h").Run() != nil {
			continue
		}
		ext := t.TempDir()
		archive := exec.Command("sh", "-c", `git --git-dir "$1" archive "$2" ext-net/example/nccl | tar -x -C "$3"`, "sh", repo, tag, ext)
		if out, err := archive.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", tag, err, out)
		}
		last = filepath.Join(ext, "ext-net", "example", "nccl")
		if out, err := compile(last, src); err != nil {
			t.Errorf("%s: our ncclNet_v7 declaration differs from NCCL's:\n%s", tag, out)
		}
		checked[tag] = true
	}
	for _, must := range []string{"v2.19.1-1", "v2.21.5-1", "v2.28.3-1"} {
		if !checked[must] {
			t.Errorf("%s was not checked (%d tags checked)", must, len(checked))
		}
	}
	t.Logf("%d NCCL releases checked", len(checked))

	// the check can fail: a field added to our properties struct shifts the rest
	mutated := t.TempDir()
	h, err := os.ReadFile(filepath.Join(src, "ncclnet_v7.h"))
	if err != nil {
		t.Fatal(err)
	}
	bad := strings.Replace(string(h), "  int maxRecvs;\n", "  int maxRecvs;\n  int extra;\n", 1)
	if bad == string(h) {
		t.Fatal("the mutation did not apply")
	}
	check, err := os.ReadFile(filepath.Join(src, "abi_check.c"))
	if err != nil {
		t.Fatal(err)
	}
	if os.WriteFile(filepath.Join(mutated, "ncclnet_v7.h"), []byte(bad), 0o644) != nil || os.WriteFile(filepath.Join(mutated, "abi_check.c"), check, 0o644) != nil {
		t.Fatal("write the mutated copy")
	}
	if out, err := compile(last, mutated); err == nil || !strings.Contains(string(out), "netDeviceType differs") {
		t.Errorf("a mutated declaration passed the check: %v\n%s", err, out)
	}
}
