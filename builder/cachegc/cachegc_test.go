package cachegc

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/cache"
)

// In a cache, gc removes only what epbuild names: a user's files under tmp/ and logs/
// (and at the top) are reported, not removed.
func TestCacheGCLeavesWhatIsNotEpbuilds(t *testing.T) {
	dir := t.TempDir()
	if _, err := cache.Open(dir); err != nil {
		t.Fatal(err)
	}
	const key = "7777777777777777777777777777777777777777777777777777777777777777"
	mine := []string{"tmp/project/notes.txt", "logs/2023/app.log", "notes.txt", "stages/patch/mine/x", "compat/keep.json"}
	ours := []string{"tmp/build-" + key + "-1/x", "logs/build-" + key + "/00-cmake.log", "stages/patch/" + key + "/.done"}
	for _, n := range append(slices.Clone(mine), ours...) {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := CacheGC(context.Background(), dir, GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range mine {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("gc removed %s: %v", n, err)
		}
	}
	for _, n := range ours {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			t.Errorf("gc left %s", n)
		}
	}
	for _, n := range []string{"tmp/project", "logs/2023", "notes.txt", "stages/patch/mine", "compat/keep.json"} {
		if !slices.ContainsFunc(rep.Kept, func(it GCItem) bool { return it.Name == n && it.Why == notOurs }) {
			t.Errorf("%s not reported as left alone: %+v", n, rep.Kept)
		}
	}
}

// gc on a directory that is no cache ($HOME): exit 2, nothing removed, nothing made.
func TestCacheGCRefusesHome(t *testing.T) {
	home := t.TempDir()
	for _, n := range []string{"tmp/project/notes.txt", "logs/2023/app.log"} {
		p := filepath.Join(home, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-1000 * time.Hour)
		_ = os.Chtimes(p, old, old)
	}
	for _, f := range []func() error{
		func() error { _, err := CacheGC(context.Background(), home, GCOptions{}); return err },
		func() error { _, err := CacheList(home); return err },
		func() error { _, err := CacheDU(home); return err },
	} {
		var de *cache.DirError
		if err := f(); !errors.As(err, &de) || de.ExitCode() != 2 {
			t.Errorf("want a refusal (exit 2), got %v", err)
		}
	}
	des, _ := os.ReadDir(home)
	var names []string
	for _, d := range des {
		names = append(names, d.Name())
	}
	if strings.Join(names, " ") != "logs tmp" {
		t.Errorf("the directory holds %v", names)
	}
	for _, n := range []string{"tmp/project/notes.txt", "logs/2023/app.log"} {
		if _, err := os.Stat(filepath.Join(home, n)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}
