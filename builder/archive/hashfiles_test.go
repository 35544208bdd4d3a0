package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// sumsOf hashes paths through hashFiles on workers workers, done (if set) seeing each
// result first, and returns each path's result.
func sumsOf(t *testing.T, workers int, paths []string, done func(string, FileSum)) map[string]FileSum {
	t.Helper()
	jobs := make(chan string, len(paths))
	for _, p := range paths {
		jobs <- p
	}
	close(jobs)
	var mu sync.Mutex
	got := map[string]FileSum{}
	err := hashFiles(context.Background(), workers, jobs, func(p string) string { return p }, func(p string, r FileSum) error {
		if done != nil {
			done(p, r)
		}
		mu.Lock()
		defer mu.Unlock()
		if _, dup := got[p]; dup {
			return fmt.Errorf("%s reported twice", p)
		}
		r.Data = nil // valid only in the call
		got[p] = r
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Every size around the block and the read/map boundaries, in both lanes and alone, on
// one worker and on several: the digests are crypto/sha256's, small files come with
// their bytes, and a file that is gone is an error of its own.
func TestHashFilesAgainstStdlib(t *testing.T) {
	dir := t.TempDir()
	want := map[string][]byte{}
	var paths []string
	for i, n := range []int{0, 1, 63, 64, 65, 1000, wholeMax - 1, wholeMax, wholeMax + 1, 12<<20 + 100, 5 << 20, 4096} {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(j*13 + i)
		}
		p := filepath.Join(dir, fmt.Sprintf("f%02d", i))
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		want[p] = b
		paths = append(paths, p)
	}
	gone := filepath.Join(dir, "gone")
	paths = append(paths[:5:5], append([]string{gone}, paths[5:]...)...)
	for _, workers := range []int{1, 2, 3} {
		got := sumsOf(t, workers, paths, func(p string, r FileSum) {
			if b := want[p]; r.Err == nil && len(b) < wholeMax && string(r.Data) != string(b) {
				t.Errorf("%d workers: %s: Data is not the file's %d bytes", workers, p, len(b))
			}
		})
		for p, b := range want {
			r := got[p]
			if r.Err != nil || r.N != int64(len(b)) || r.SHA256 != hexSum(b) || r.Info == nil || r.Info.Size() != int64(len(b)) {
				t.Errorf("%d workers: %s (%d bytes): %s, %d bytes, %v; want %s", workers, p, len(b), r.SHA256, r.N, r.Err, hexSum(b))
			}
		}
		if r := got[gone]; r.Err == nil || !os.IsNotExist(r.Err) {
			t.Errorf("%d workers: a missing file: %+v; want a not-exist error", workers, r)
		}
	}
}

// An error from done stops the hashing, and HashFiles returns it; a cancelled context
// stops it too, before the big file beside is done.
func TestHashFilesStops(t *testing.T) {
	dir := t.TempDir()
	small, big := filepath.Join(dir, "small"), filepath.Join(dir, "big")
	if err := os.WriteFile(small, []byte("small"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(big, make([]byte, 16<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	feed := func() chan string {
		jobs := make(chan string, 2)
		jobs <- small
		jobs <- big
		close(jobs)
		return jobs
	}
	stop := errors.New("stop here")
	var seen []string
	err := hashFiles(context.Background(), 1, feed(), func(p string) string { return p }, func(p string, r FileSum) error {
		seen = append(seen, p)
		return stop
	})
	if !errors.Is(err, stop) || len(seen) != 1 || seen[0] != small {
		t.Errorf("done's error: HashFiles returned %v after %v; want %v after the small file alone", err, seen, stop)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen = nil
	err = hashFiles(ctx, 1, feed(), func(p string) string { return p }, func(p string, r FileSum) error {
		seen = append(seen, p)
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(seen) != 1 {
		t.Errorf("cancelled: HashFiles returned %v after %v; want context.Canceled after the small file alone", err, seen)
	}
}
