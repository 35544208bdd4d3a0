package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// TestSysrootCaptureArchive: --sysroot takes the archive host capture wrote as it is:
// host check and verify-install --host read it as they read the directory it unpacks
// into, leave no unpacked copy behind, and refuse a damaged archive naming it (exit 2).
func TestSysrootCaptureArchive(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where an unpacked capture would be left
	env := nodeEnv()
	capture := filepath.Join(t.TempDir(), "node.tar.zst")
	if code, out, errs := run(t, env, "host", "capture", capture, "--recipe", "gcp-b200"); code != 0 {
		t.Fatalf("host capture: exit %d\n%s%s", code, out, errs)
	}
	root := t.TempDir()
	f, err := os.Open(capture)
	if err != nil {
		t.Fatal(err)
	}
	err = sysroot.Extract(f, root)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	dirCode, fromDir, _ := run(t, env, "host", "check", "--recipe", "gcp-b200", "--json", "--sysroot", root)
	arcCode, fromArchive, errs := run(t, env, "host", "check", "--recipe", "gcp-b200", "--json", "--sysroot", capture)
	if arcCode != dirCode {
		t.Fatalf("host check --sysroot ARCHIVE: exit %d, from the directory %d\n%s", arcCode, dirCode, errs)
	}
	_, want := decodeReport(t, fromDir)
	_, got := decodeReport(t, fromArchive)
	if len(got) != len(want) || len(want) < 5 {
		t.Fatalf("checks from the archive %d, from the directory %d", len(got), len(want))
	}
	for id, c := range want {
		if g := got[id]; g.Status != c.Status || g.Found != c.Found {
			t.Errorf("%s: %s %q from the archive, %s %q from the directory", id, g.Status, g.Found, c.Status, c.Found)
		}
	}
	// a capture of the capture, from the archive, holds the same files
	again := filepath.Join(t.TempDir(), "again.tar.zst")
	if code, _, errs := run(t, env, "host", "capture", again, "--recipe", "gcp-b200", "--sysroot", capture); code != 0 {
		t.Fatalf("host capture --sysroot ARCHIVE: exit %d %s", code, errs)
	}
	a, _ := os.ReadFile(capture)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Errorf("capturing the capture changed it (%d bytes, %d bytes)", len(a), len(b))
	}
	prefix := pristineInstall(t)
	_, out, _ := run(t, env, "verify-install", "--prefix", prefix, "--host", "--sysroot", capture, "--json")
	// the demo uses no GPU: host.gpus does not apply to it, whatever the capture holds
	if _, checks := decodeReport(t, out); checks["host.gpus"].Status != "skip" || !strings.Contains(checks["host.gpus"].Found, "uses no GPU") || checks["files"].Status != "pass" {
		t.Errorf("verify-install --host --sysroot ARCHIVE:\n%s", out)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "epbuild-sysroot-*")); len(left) > 0 {
		t.Errorf("unpacked captures left behind: %v", left)
	}

	// damaged: cut short; not a capture at all
	cut := filepath.Join(t.TempDir(), "cut.tar.zst")
	if err := os.WriteFile(cut, a[:len(a)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	text := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(text, []byte("not a capture\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{cut, text, filepath.Join(t.TempDir(), "none.tar.zst")} {
		for _, args := range [][]string{{"host", "check"}, {"verify-install", "--prefix", prefix, "--host"}} {
			code, _, errs := run(t, env, append(args, "--sysroot", bad)...)
			if code != exitBadInput || !strings.Contains(errs, "--sysroot "+bad) {
				t.Errorf("%v --sysroot %s: exit %d, want %d naming it: %s", args, filepath.Base(bad), code, exitBadInput, errs)
			}
		}
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "epbuild-sysroot-*")); len(left) > 0 {
		t.Errorf("a refused capture left %v", left)
	}
}
