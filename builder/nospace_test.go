package builder

import (
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/stage"

	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/recipes"
)

// TestFullDisk fills real file systems: small tmpfs mounts, in a mount namespace of a
// child process of its own, so that nothing outlives the test. Where the test cannot
// make one (not root, no user namespaces), it says so and skips.
func TestFullDisk(t *testing.T) {
	// the child compares its build with the warm demo's, which it does not build again
	var env []string
	if os.Getenv("EPBUILD_TEST_CHILD") != "fulldisk" {
		env = append(env, envDemoSHA256+"="+warmBuild(t).res.SHA256)
	}
	out, ok := fixture.InMountNamespace(t, "TestFullDisk", "fulldisk", fullDiskChild, env...)
	if !ok {
		return
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "nospace_test.go") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

// smallFS mounts a tmpfs of size (mount's syntax: 64k) at a new directory.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "fulldisk-")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// resize remounts the tmpfs at dir with size (mount's syntax: 64k).
func resize(t *testing.T, dir, size string) {
	t.Helper()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size="+size); err != nil {
		t.Fatalf("remount %s with %s: %v", dir, size, err)
	}
}

func isEmpty(t *testing.T, dir string) {
	t.Helper()
	if ents, _ := os.ReadDir(dir); len(ents) > 0 {
		t.Errorf("%s holds %s after a refused write", dir, ents[0].Name())
	}
}

func wantNoSpace(t *testing.T, err error, dir string) *disk.NoSpaceError {
	t.Helper()
	var ns *disk.NoSpaceError
	if !errors.As(err, &ns) || ns.ExitCode() != 3 {
		t.Fatalf("got %v; want a NoSpaceError (exit 3)", err)
	}
	if ns.Path != dir || !strings.Contains(err.Error(), "no space left on the file system of "+dir) {
		t.Errorf("the error names %s, not %s: %v", ns.Path, dir, err)
	}
	return ns
}

// envDemoSHA256 hands the warm demo's artifact sha256 to TestFullDisk's child.
const envDemoSHA256 = "EPBUILD_TEST_DEMO_SHA256"

func fullDiskChild(t *testing.T) {
	// a cache that fills up during the fetch, the tree copy, cmake: exit 3 naming it, no
	// incomplete stage output kept; with more room the rerun goes on from what was made
	// (one cold build in all, made larger step by step) and, with room, completes with the
	// warm demo's bytes
	want := os.Getenv(envDemoSHA256)
	cache := smallFS(t, "64k")
	out := t.TempDir()
	failures := 0
	var ref *stage.Result
	for _, size := range []string{"64k", "160k", "288k", "64m"} {
		resize(t, cache, size)
		res, err := demoRun(t, cache, out)
		if err == nil {
			ref = res
			break
		}
		failures++
		ns := wantNoSpace(t, err, cache)
		// the embedded repositories come from the binary only, never from their host
		if strings.Contains(err.Error(), "lookup ") || strings.Contains(err.Error(), "no such host") {
			t.Errorf("cache of %s: the error speaks of the network: %v", size, err)
		}
		t.Logf("cache of %s: %s", size, strings.SplitN(ns.Error(), ": step", 2)[0])
		stages, _ := filepath.Glob(filepath.Join(cache, "stages", "*", "*"))
		for _, s := range stages {
			if _, err := os.Stat(filepath.Join(s, ".done")); err != nil {
				t.Errorf("cache of %s: an incomplete stage output was kept: %s", size, s)
			}
		}
	}
	if ref == nil {
		t.Fatalf("the demo did not build in a cache of 64m")
	}
	if ref.SHA256 != want {
		t.Errorf("after making room: artifact %s, want %s", ref.SHA256, want)
	}
	if failures < 2 {
		t.Errorf("only %d of the small caches filled up: the demo got smaller; lower the sizes", failures)
	}
	// a full output directory: exit 3 naming it, no partial artifact
	out = smallFS(t, "4k")
	_, err := demoRun(t, cache, out)
	wantNoSpace(t, err, out)
	isEmpty(t, out)

	// fetch and mirror run outside the stage store: no space is said as such too
	r := newLabRepo(t)
	lab := func(t *testing.T, cache string) *Job {
		j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: labRecipe(t, r), CacheDir: cache, Mirror: r.mirror})
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	small := smallFS(t, "8k")
	_, err = lab(t, small).Fetch(context.Background(), "")
	t.Logf("fetch into a full cache: %v", wantNoSpace(t, err, small))
	full := smallFS(t, "4k")
	_, err = lab(t, t.TempDir()).Fetch(context.Background(), filepath.Join(full, "ws"))
	t.Logf("fetch into a full workspace: %v", wantNoSpace(t, err, filepath.Join(full, "ws")))
	full = smallFS(t, "4k")
	_, err = Mirror(context.Background(), full, lab(t, t.TempDir()))
	t.Logf("a mirror on a full disk: %v", wantNoSpace(t, err, full))

	// install: the free space is checked before anything is written
	parent := smallFS(t, "16k")
	_, err = install.Install(context.Background(), install.InstallOptions{Artifact: ref.Artifact, Prefix: filepath.Join(parent, "demo"), Version: "test"})
	ns := wantNoSpace(t, err, parent)
	if ns.Need <= ns.Free || !strings.Contains(err.Error(), "needed") {
		t.Errorf("the error does not say how much is needed: %v", err)
	}
	isEmpty(t, parent)
	// ... and the inodes
	few := t.TempDir()
	if err := syscall.Mount("tmpfs", few, "tmpfs", 0, "size=8m,nr_inodes=8"); err != nil {
		t.Fatal(err)
	}
	defer syscall.Unmount(few, syscall.MNT_DETACH)
	_, err = install.Install(context.Background(), install.InstallOptions{Artifact: ref.Artifact, Prefix: filepath.Join(few, "demo"), Version: "test"})
	if wantNoSpace(t, err, few); !strings.Contains(err.Error(), "inodes") {
		t.Errorf("the error does not name the inodes: %v", err)
	}
	isEmpty(t, few)
	// a disk that fills up during the extraction itself: builder/install's TestStageFullDisk
}
