package effect

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const (
	deepEPWithPR466 = "8a07e7e7ed57cfc63005f670d64d410cb30b061b" // buffer.py calls _setup_device_hca_mapping
	deepEPWithout   = "29d31c095796f3c8ece47ee9cdcc167051bbeed9" // before PR #466; kernels include ibgda_device.cuh
)

// deepEPMirror is the bare DeepEP repository under $EPBUILD_TEST_MIRROR, or a skip.
func deepEPMirror(t *testing.T) string {
	t.Helper()
	mirror := os.Getenv("EPBUILD_TEST_MIRROR")
	if mirror == "" {
		t.Skip("EPBUILD_TEST_MIRROR is unset: point it at a mirror dir holding github.com/deepseek-ai/DeepEP.git")
	}
	git := filepath.Join(mirror, "github.com", "deepseek-ai", "DeepEP.git")
	if _, err := os.Stat(git); err != nil {
		t.Fatalf("EPBUILD_TEST_MIRROR is set but holds no DeepEP: %v", err)
	}
	return git
}

// export writes the files of commit that match keep into a new temp dir.
func export(t *testing.T, gitDir, commit string, keep func(string) bool) (string, []string) {
	t.Helper()
	out, err := exec.Command("git", "--git-dir="+gitDir, "ls-tree", "-r", "--name-only", commit).Output()
	if err != nil {
		t.Fatalf("git ls-tree %s in %s: %v", commit, gitDir, err)
	}
	dir := t.TempDir()
	var files []string
	for _, name := range strings.Fields(string(out)) {
		if !keep(name) {
			continue
		}
		src, err := exec.Command("git", "--git-dir="+gitDir, "show", commit+":"+name).Output()
		if err != nil {
			t.Fatalf("git show %s:%s: %v", commit, name, err)
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, src, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	return dir, files
}

func TestUpstreamDeepEPHCAMapping(t *testing.T) {
	git := deepEPMirror(t)
	effects := []Effect{
		{Kind: PythonDef, File: "deep_ep/buffer.py", Class: "Buffer", Method: "_setup_device_hca_mapping"},
		{Kind: PythonCall, File: "deep_ep/buffer.py", Class: "Buffer", Method: "__init__", Callee: "_setup_device_hca_mapping"},
		{Kind: EnvRead, File: "deep_ep/buffer.py", Name: "DEEP_EP_DEVICE_TO_HCA_MAPPING"},
	}
	for _, c := range []struct {
		commit, status string
	}{{deepEPWithPR466, StatusPass}, {deepEPWithout, StatusFail}} {
		root, files := export(t, git, c.commit, func(n string) bool { return n == "deep_ep/buffer.py" })
		for _, e := range effects {
			r := Check(root, e, nil)
			t.Logf("%.7s %s: %s: %s %s", c.commit, e, r.Status, r.Found, r.Detail)
			if r.Status != c.status {
				t.Errorf("at %.7s %s: status %s, want %s (found %s; %s)", c.commit, e, r.Status, c.status, r.Found, r.Detail)
			}
		}
		compareTokens(t, files)
		compareReader(t, files)
	}
}

func TestUpstreamDeepEPIBGDAInclude(t *testing.T) {
	git := deepEPMirror(t)
	root, _ := export(t, git, deepEPWithout, func(n string) bool { return strings.HasPrefix(n, "csrc/kernels/") })
	r := Check(root, Effect{Kind: Include, Files: []string{"csrc/kernels/*.cu"}, Header: "ibgda_device.cuh", Not: true}, nil)
	t.Logf("%s: %s: %s", r.Effect, r.Status, r.Found)
	if r.Status != StatusFail {
		t.Fatalf("status %s, want fail: %s %s", r.Status, r.Found, r.Detail)
	}
	var files []string
	for _, m := range regexp.MustCompile(`csrc/kernels/([a-z_]+\.cu):\d+`).FindAllStringSubmatch(r.Found, -1) {
		files = append(files, m[1])
	}
	slices.Sort(files)
	if want := []string{"internode.cu", "internode_ll.cu", "runtime.cu"}; !slices.Equal(files, want) {
		t.Errorf("files including ibgda_device.cuh = %v, want %v", files, want)
	}
	if r := Check(root, Effect{Kind: Include, File: "csrc/kernels/internode.cu", Header: "ibgda_device.cuh"}, nil); r.Status != StatusPass {
		t.Errorf("internode.cu includes ibgda_device.cuh: %+v", r)
	}
}

// TestUpstreamDeepEPPythonFiles reads every Python file of DeepEP with both tokenizers
// and readers: Go's must agree with Python's tokenize and ast.
func TestUpstreamDeepEPPythonFiles(t *testing.T) {
	git := deepEPMirror(t)
	_, files := export(t, git, deepEPWithout, func(n string) bool { return strings.HasSuffix(n, ".py") })
	if len(files) < 5 {
		t.Fatalf("only %d Python files exported", len(files))
	}
	compareTokens(t, files)
	compareReader(t, files)
}
