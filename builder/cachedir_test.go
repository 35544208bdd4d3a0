package builder

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/cachegc"
	"github.com/epbuild/epbuild/builder/store"
)

// The helper process of TestKilledRunLeftovers: it makes a stage output and, midway,
// says so and waits to be killed.
func TestHelperKilledMidStage(t *testing.T) {
	dir := os.Getenv("EPBUILD_TEST_KILLED_CACHE")
	if dir == "" {
		t.Skip("a helper process")
	}
	s, err := store.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Produce(context.Background(), "build", os.Getenv("EPBUILD_TEST_KILLED_KEY"), func(tmp string) error {
		if err := os.WriteFile(filepath.Join(tmp, "half.o"), []byte("half"), 0o644); err != nil {
			return err
		}
		fmt.Println("ready")
		select {}
	})
	t.Fatal(err)
}

// A run killed (SIGKILL) midway leaves its temporary directory under tmp/; the next run
// (when it opens the store) and gc remove it, and keep the one of a run that is alive
// (its lock is held).
func TestKilledRunLeftovers(t *testing.T) {
	dir := t.TempDir()
	if _, err := cache.Open(dir); err != nil {
		t.Fatal(err)
	}
	const killed = "8888888888888888888888888888888888888888888888888888888888888888"
	const alive = "9999999999999999999999999999999999999999999999999999999999999999"
	kill := func(key string) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperKilledMidStage$")
		cmd.Env = append(os.Environ(), "EPBUILD_TEST_KILLED_CACHE="+dir, "EPBUILD_TEST_KILLED_KEY="+key)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if l, _ := bufio.NewReader(out).ReadString('\n'); l != "ready\n" {
			t.Fatalf("helper said %q", l)
		}
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
	kill(killed)
	kill(killed) // twice: the second run removes the first one's leftover
	temps := func(key string) []string {
		m, _ := filepath.Glob(filepath.Join(dir, "tmp", "build-"+key+"-*"))
		return m
	}
	if got := temps(killed); len(got) != 1 {
		t.Fatalf("leftovers of the killed runs: %v (the next run removes the one before)", got)
	}
	// a run in progress on another key
	s, err := store.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	unlock, err := holdLock(dir, "build-"+alive+".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	live := filepath.Join(dir, "tmp", "build-"+alive+"-1")
	if err := os.Mkdir(live, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := temps(killed); len(got) != 0 {
		t.Errorf("the next run left %v", got)
	}
	kill(killed)
	if _, err := cachegc.CacheGC(context.Background(), dir, cachegc.GCOptions{OlderThan: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := temps(killed); len(got) != 0 {
		t.Errorf("gc left %v", got)
	}
	// the next run too keeps what a live run makes
	s2, err := store.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if _, err := os.Stat(live); err != nil {
		t.Errorf("gc or a run removed what a live run makes: %v", err)
	}
}

// A cache on a read-only mount (shared, filled elsewhere) serves a run whose stages are
// all cached; gc on it says it is read-only (exit 3).
func TestReadOnlyCacheServesCachedRun(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("a read-only bind mount needs root")
	}
	dir := warmCache(t)
	res, err := demoRun(t, dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ro := t.TempDir()
	if out, err := exec.Command("mount", "--bind", "-o", "ro", dir, ro).CombinedOutput(); err != nil {
		t.Skipf("cannot bind-mount read-only here: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", ro).Run() })
	if cache.Writable(ro) {
		t.Skip("the bind mount is writable")
	}
	res2, err := demoRun(t, ro, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if res2.SHA256 != res.SHA256 {
		t.Errorf("from the read-only cache %s, was %s", res2.SHA256, res.SHA256)
	}
	for _, s := range res2.Stages {
		if !s.Cached {
			t.Errorf("%s %s not cached", s.Stage, s.Component)
		}
	}
	_, err = cachegc.CacheGC(context.Background(), ro, cachegc.GCOptions{})
	var de *cache.DirError
	if !errors.As(err, &de) || de.ExitCode() != 3 || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("gc on a read-only cache: %v", err)
	}
}
