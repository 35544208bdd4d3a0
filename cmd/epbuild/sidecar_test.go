package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/oci/ocitest"
)

// TestHostileSumSidecar: an ARTIFACT.sha256 that is a FIFO or a symlink to /dev/zero
// makes install, push and sbom end at once with exit 2, naming the file, what it is and
// the fix: read whole, the FIFO would hang and /dev/zero would exhaust memory.
func TestHostileSumSidecar(t *testing.T) {
	demo := demoArtifact(t)
	reg := ocitest.Start(t, ocitest.Options{})
	env := nodeEnv("DOCKER_CONFIG", t.TempDir())
	for _, sc := range []struct {
		name string
		make func(side string) error
		is   string
	}{
		{"fifo", func(side string) error { return syscall.Mkfifo(side, 0o644) }, "is a named pipe (FIFO), not a regular file"},
		{"dev-zero", func(side string) error { return os.Symlink("/dev/zero", side) }, "is a symlink to a character device, not a regular file"},
	} {
		dir := t.TempDir()
		art := filepath.Join(dir, filepath.Base(demo))
		if err := os.Link(demo, art); err != nil {
			t.Fatal(err)
		}
		if err := sc.make(art + ".sha256"); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"install", art, "--prefix", filepath.Join(t.TempDir(), "demo")},
			{"push", art, "oci://" + reg.Addr + "/epbuild/hostile", "--plain-http"},
			{"sbom", art, "-o", filepath.Join(t.TempDir(), "bom.json")},
		} {
			t.Run(sc.name+"/"+args[0], func(t *testing.T) {
				code, out, errs := runBounded(t, env, args...)
				expect(t, args[0], code, 2, out, errs, art+".sha256 "+sc.is, "remove it, or write it again beside the artifact with: sha256sum ")
			})
		}
	}
}

// runBounded is run, failing the test when the command blocks, and ending the test
// binary before a read without end takes the machine's memory.
func runBounded(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errs := run(t, env, args...)
		done <- result{code, out, errs}
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(time.Minute)
	var ms runtime.MemStats
	for {
		select {
		case r := <-done:
			return r.code, r.out, r.err
		case <-deadline:
			t.Fatalf("%s blocked", strings.Join(args, " "))
		case <-tick.C:
			if runtime.ReadMemStats(&ms); ms.HeapAlloc > 1<<30 {
				panic(strings.Join(args, " ") + ": over 1 GiB of heap: a read without a bound")
			}
		}
	}
}
