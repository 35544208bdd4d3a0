package source

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/cache"
)

// helperEnv selects what TestHelperProcess does when the test binary runs itself.
const helperEnv = "EPBUILD_SOURCE_TEST_HELPER"

// TestHelperProcess is not a test: the other tests run the test binary as a child in this
// mode to fetch in a separate process (to kill it, or to measure its memory).
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("helper process for other tests")
	}
	c, err := cache.Open(os.Getenv("HELPER_CACHE"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	f, err := New(Options{Cache: c, Mirror: os.Getenv("HELPER_MIRROR"), Progress: ProgressOff})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	ctx := context.Background()
	switch mode {
	case "git":
		err = f.FetchGit(ctx, Git{URL: os.Getenv("HELPER_URL"), Commit: os.Getenv("HELPER_COMMIT")})
	case "checkout":
		err = f.CheckoutGit(ctx, Git{URL: os.Getenv("HELPER_URL"), Commit: os.Getenv("HELPER_COMMIT")}, os.Getenv("HELPER_DEST"))
	case "archive":
		_, err = f.FetchArchive(ctx, Archive{URL: os.Getenv("HELPER_URL"), SHA256: os.Getenv("HELPER_SHA256")})
	case "rss":
		// Runs a checkout in a grandchild and prints its peak RSS. Linux counts the memory
		// of the process that exec'd a child into the child's maxrss, so a child of the big
		// test process would report the test's memory; this small process is the parent.
		cmd := helperCmd("checkout")
		var out []byte
		if out, err = cmd.CombinedOutput(); err == nil {
			fmt.Printf("maxrss_kb=%d\n", cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)
		} else {
			err = fmt.Errorf("%w: %s", err, out)
		}
	default:
		err = fmt.Errorf("unknown helper mode %q", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func helperCmd(mode string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{helperEnv + "=" + mode}, env...)...)
	return cmd
}

// TestKilledFetchLeavesNothingVisible kills fetching children with SIGKILL at random
// moments; after each kill whatever the cache shows must be complete, and a final fetch in
// this process must succeed and clear the dead children's leftovers.
func TestKilledFetchLeavesNothingVisible(t *testing.T) {
	fx := newFixture(t, 192<<10)
	gsrv := newGitServer(t, fx.root, 8*time.Millisecond)
	fsrv := newFileServer(t, 4*time.Millisecond)
	body := make([]byte, 384<<10)
	rand.Read(body)
	sum := sha256hex(body)
	aurl := fsrv.put("/dl/big.tar.gz", body)
	gurl := gsrv.url(fx.name)
	cacheDir := t.TempDir()
	c, err := cache.Open(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	repo := c.GitDir(strings.TrimPrefix(gsrv.URL, "http://") + "/org/proj.git")
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := mrand.New(mrand.NewSource(seed))

	const trials = 8
	completed := 0
	for i := 0; i < trials; i++ {
		var cmd *exec.Cmd
		if i%2 == 0 {
			cmd = helperCmd("git", "HELPER_CACHE="+cacheDir, "HELPER_URL="+gurl, "HELPER_COMMIT="+fx.c3)
		} else {
			cmd = helperCmd("archive", "HELPER_CACHE="+cacheDir, "HELPER_URL="+aurl, "HELPER_SHA256="+sum)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(rng.Int63n(int64(400 * time.Millisecond))))
		cmd.Process.Kill()
		if err := cmd.Wait(); err == nil {
			completed++
		}
		// The invariant: anything visible is whole.
		if _, err := os.Stat(filepath.Join(repo, "refs", "epbuild", fx.c3)); err == nil {
			if out, err := gitOut(repo, nil, "rev-list", "--objects", fx.c3); err != nil {
				t.Fatalf("trial %d: the ref is visible but objects are missing: %v\n%s", i, err, out)
			}
			// Later trials would find it done; start over so that every trial fetches.
			os.RemoveAll(repo)
		}
		if _, err := os.Stat(filepath.Join(repo, "HEAD")); err == nil {
			if out, err := gitOut(repo, nil, "fsck", "--no-dangling"); err != nil {
				t.Fatalf("trial %d: git fsck on the cache repository: %v\n%s", i, err, out)
			}
		}
		if p := c.ArchivePath(sum); fileExists(p) {
			if got, _ := fileSHA256(p); got != sum {
				t.Fatalf("trial %d: a partial archive is visible (sha256 %s)", i, got)
			}
			os.Remove(p)
		}
	}
	if completed == trials {
		t.Errorf("no child was killed mid-fetch: the test proves nothing")
	}
	f, err := New(Options{Cache: c, Progress: ProgressOff})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.FetchGit(context.Background(), Git{URL: gurl, Commit: fx.c3}); err != nil {
		t.Fatalf("fetch after the kills: %v", err)
	}
	if _, err := f.FetchArchive(context.Background(), Archive{URL: aurl, SHA256: sum}); err != nil {
		t.Fatalf("fetch after the kills: %v", err)
	}
	runGit(t, repo, "rev-list", "--objects", fx.c3)
	assertNoTemp(t, f)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestConcurrentFetchTransfersOnce runs four fetches of one source at once, each with its
// own Fetcher on one cache directory (as four processes would): all succeed and the
// servers see one transfer.
func TestConcurrentFetchTransfersOnce(t *testing.T) {
	fx := newFixture(t, 64<<10)
	gsrv := newGitServer(t, fx.root, 2*time.Millisecond)
	fsrv := newFileServer(t, 2*time.Millisecond)
	body := make([]byte, 128<<10)
	rand.Read(body)
	aurl := fsrv.put("/dl/x.tar.gz", body)
	cacheDir := t.TempDir()
	ctx := context.Background()

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 4; i++ {
		f := newTestFetcher(t, cacheDir, "")
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- f.FetchGit(ctx, Git{URL: gsrv.url(fx.name), Commit: fx.c3})
		}()
		go func() {
			defer wg.Done()
			_, err := f.FetchArchive(ctx, Archive{URL: aurl, SHA256: sha256hex(body)})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := gsrv.fetches.Load(); n != 1 {
		t.Errorf("git objects transferred %d times, want once", n)
	}
	if n := fsrv.count("/dl/x.tar.gz"); n != 1 {
		t.Errorf("archive downloaded %d times, want once", n)
	}
}

func TestLockWaitIsCancellable(t *testing.T) {
	fx := newFixture(t, 0)
	f := newTestFetcher(t, "", "")
	key, _ := RepoKey("file://" + fx.bare)
	unlock, err := f.Cache().Lock(context.Background(), cache.KindGit, key)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = f.FetchGit(ctx, Git{URL: "file://" + fx.bare, Commit: fx.c1})
	if err == nil || ctx.Err() == nil {
		t.Fatalf("fetch under a held lock: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("cancellation took %v", time.Since(start))
	}
}
