package store

import (
	"os"
	"path/filepath"
	"testing"
)

// A run's record lives while the run does: a store that is not closed (its process was
// killed) is taken for ended once its lock is gone.
func TestRunRecordEndsWithTheRun(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.record("build/abc"); err != nil {
		t.Fatal(err)
	}
	ids, alive, err := LiveRuns(dir)
	if err != nil || alive != 1 || !ids["build/abc"] {
		t.Fatalf("live runs: %v %d %v", ids, alive, err)
	}
	// as if killed: the lock goes with its file descriptor, the file stays
	s.run.f.Close()
	ids, alive, err = LiveRuns(dir)
	if err != nil || alive != 0 || len(ids) != 0 {
		t.Fatalf("after the run's end: %v %d %v", ids, alive, err)
	}
	if des, _ := os.ReadDir(filepath.Join(dir, "runs")); len(des) != 0 {
		t.Errorf("the ended run's record is left: %v", des)
	}
}
