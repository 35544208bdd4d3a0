package builder

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A rerun repairs what was damaged beside the artifact in the output directory: its
// .sha256 sidecar (truncated, wrong, garbage, gone) and the artifact itself; sha256sum -c
// agrees afterwards, a FIFO or a link to /dev/zero there included. A store whose artifact and record disagree is not published.
func TestRerunRepairsTheSidecar(t *testing.T) {
	dir, out := warmCache(t), t.TempDir()
	res, err := demoRun(t, dir, out)
	if err != nil {
		t.Fatal(err)
	}
	side := res.Artifact + ".sha256"
	want := res.SHA256 + "  " + filepath.Base(res.Artifact) + "\n"
	damage := map[string]func() error{
		"truncated": func() error { return os.WriteFile(side, []byte(want[:20]), 0o644) },
		"wrong sum": func() error {
			return os.WriteFile(side, []byte(strings.Repeat("0", 64)+"  "+filepath.Base(res.Artifact)+"\n"), 0o644)
		},
		"garbage":  func() error { return os.WriteFile(side, []byte("<html>\n"), 0o644) },
		"missing":  func() error { return os.Remove(side) },
		"empty":    func() error { return os.WriteFile(side, nil, 0o644) },
		"artifact": func() error { return os.WriteFile(res.Artifact, []byte("truncated"), 0o644) },
		// read whole, these would hang the rerun or exhaust its memory
		"fifo": func() error {
			os.Remove(side)
			return syscall.Mkfifo(side, 0o644)
		},
		"dev-zero": func() error {
			os.Remove(side)
			return os.Symlink("/dev/zero", side)
		},
	}
	for name, f := range damage {
		if err := f(); err != nil {
			t.Fatal(err)
		}
		again, err := demoRun(t, dir, out)
		if err != nil {
			t.Fatalf("%s: rerun: %v", name, err)
		}
		if b, _ := os.ReadFile(side); string(b) != want || again.SHA256 != res.SHA256 {
			t.Errorf("%s: after a rerun the sidecar says %q, want %q", name, b, want)
		}
		cmd := exec.Command("sha256sum", "-c", filepath.Base(side))
		cmd.Dir = out
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: sha256sum -c: %v\n%s", name, err, b)
		}
	}
	// the stored record wrong: refused, then repaired by --force=package
	stored := filepath.Join(dir, "stages", "package", res.Stages[len(res.Stages)-1].Key, filepath.Base(res.Artifact))
	if err := os.WriteFile(stored+".sha256", []byte(strings.Repeat("1", 64)+"  x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(res.Artifact); err != nil {
		t.Fatal(err)
	}
	if _, err := demoRun(t, dir, out); err == nil || !strings.Contains(err.Error(), "the cache is damaged; rebuild it with --force=package") {
		t.Fatalf("a damaged store record: %v", err)
	}
	if _, err := os.Stat(res.Artifact); !os.IsNotExist(err) {
		t.Errorf("an artifact was published from a damaged store: %v", err)
	}
	if again, err := demoRun(t, dir, out, "package"); err != nil || again.SHA256 != res.SHA256 {
		t.Fatalf("--force=package: %v", err)
	}
	if b, _ := os.ReadFile(side); string(b) != want {
		t.Errorf("after --force=package the sidecar says %q", b)
	}
}
