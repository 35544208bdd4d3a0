package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/embedded"
)

// benchPrefix lays out an install's netbench component (bin/netbench and the loopback
// plugin) compiled with gcc from the embedded sources.
func benchPrefix(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found on PATH: this test compiles the benchmark")
	}
	src := t.TempDir()
	if err := embedded.WriteFiles("tools", "netbench", src); err != nil {
		t.Fatal(err)
	}
	prefix := t.TempDir()
	comp := filepath.Join(prefix, "netbench")
	for _, d := range []string{"bin", "lib"} {
		if err := os.MkdirAll(filepath.Join(comp, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"-O2", "-o", filepath.Join(comp, "bin", "netbench"), "netbench.c", "-ldl"},
		{"-O2", "-shared", "-fPIC", "-o", filepath.Join(comp, "lib", "libnccl-net-loopback.so"), "loopback.c"},
	} {
		cmd := exec.Command("gcc", args...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
	}
	return prefix
}

func TestBench(t *testing.T) {
	prefix := benchPrefix(t)
	small := []string{"--size", "4M", "--chunk", "128K", "--iters", "1", "--timeout", "30"}

	code, out, errs := run(t, map[string]string{"EPBUILD_PREFIX": prefix}, append([]string{"bench", "--loopback", "--json"}, small...)...)
	if code != 0 {
		t.Fatalf("bench --loopback: exit %d\n%s\n%s", code, out, errs)
	}
	var res struct {
		Recv struct {
			MaxHeld  int  `json:"max_held"`
			Verified bool `json:"verified"`
		} `json:"recv"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Recv.MaxHeld != 16 || !res.Recv.Verified {
		t.Errorf("bench --json: %v %+v\n%s", err, res, out)
	}

	code, out, _ = run(t, nil, append([]string{"bench", "--prefix", prefix, "--loopback"}, small...)...)
	if code != 0 || !strings.Contains(out, "window   16 of 16 requests (most held: recv 16, send 16)") || !strings.Contains(out, "data     verified") {
		t.Errorf("bench text: exit %d\n%s", code, out)
	}

	// a window past the limit is refused by the benchmark: bad input
	code, _, errs = run(t, nil, append([]string{"bench", "--prefix", prefix, "--loopback", "--window", "17"}, small...)...)
	if code != 2 || !strings.Contains(errs, "exceeds the plugin's request limit 16") {
		t.Errorf("--window 17: exit %d\n%s", code, errs)
	}
	// no plugin named
	if code, _, errs := run(t, nil, "bench", "--prefix", prefix); code != 2 || !strings.Contains(errs, "no plugin") {
		t.Errorf("no plugin: exit %d %s", code, errs)
	}
	// an install without the benchmark
	if code, _, errs := run(t, nil, "bench", "--prefix", t.TempDir(), "--loopback"); code != 3 || !strings.Contains(errs, "find the transfer benchmark") {
		t.Errorf("no benchmark: exit %d %s", code, errs)
	}
}
