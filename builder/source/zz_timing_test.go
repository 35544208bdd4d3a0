package source

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestZZTiming(t *testing.T) {
	if os.Getenv("ZZ") == "" {
		t.Skip()
	}
	mirror, url, commit := genMirror(t, 300, 2000)
	if m := os.Getenv("EPBUILD_TEST_MIRROR"); m != "" {
		mirror, url, commit = m, deepEP, "29d31c095796f3c8ece47ee9cdcc167051bbeed9"
	}
	key, _ := RepoKey(url)
	mrepo := filepath.Join(mirror, filepath.FromSlash(key))
	ctx := context.Background()
	g := Git{URL: url, Commit: commit}
	for i := 0; i < 9; i++ {
		f := newTestFetcher(t, "", mirror)
		dest := filepath.Join(t.TempDir(), "ws")
		s := time.Now()
		if err := f.FetchGit(ctx, g); err != nil {
			t.Fatal(err)
		}
		a := time.Since(s)
		s = time.Now()
		if err := f.CheckoutGit(ctx, g, dest); err != nil {
			t.Fatal(err)
		}
		b := time.Since(s)
		d := filepath.Join(t.TempDir(), "d")
		s = time.Now()
		if out, err := exec.Command("git", "clone", "-q", "--no-checkout", mrepo, d).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		c := time.Since(s)
		s = time.Now()
		if out, err := exec.Command("git", "-C", d, "checkout", "-q", commit).CombinedOutput(); err != nil {
			t.Fatalf("git checkout: %v\n%s", err, out)
		}
		e := time.Since(s)
		s = time.Now()
		exec.Command("true").Run()
		n := time.Since(s)
		fmt.Printf("fetch=%.3f checkout=%.3f | clone=%.3f gcheckout=%.3f | spawn=%.4f\n", a.Seconds(), b.Seconds(), c.Seconds(), e.Seconds(), n.Seconds())
	}
}
