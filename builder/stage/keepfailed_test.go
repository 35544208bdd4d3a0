package stage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/internal/fixture"
)

const failingRecipe = `name: failing
cluster: test
description: a build that fails after writing a file of its own
components:
  - name: broken
    version: 1.0.0
    source: {git: {url: "URL_broken", commit: COMMIT_broken}}
    build:
      - command: {run: [sh, -c, 'echo "see also $PWD/err.log" >&2; echo why > err.log; exit 3']}
    checks: [{file: x}]
`

// TestKeepFailed: a failed build's directory is removed, unless KeepFailed keeps it
// (its path in the error), holding what the step wrote; the next build removes it.
func TestKeepFailed(t *testing.T) {
	s := fixture.NewShape(t, map[string]map[string]string{"broken": {"README": "broken\n"}}, failingRecipe)
	build := func(keep bool) *BuildError {
		t.Helper()
		r, p := shapeRunner(t, s, 1)
		r.KeepFailed = keep
		_, err := r.Run(context.Background(), p)
		var be *BuildError
		if !errors.As(err, &be) {
			t.Fatalf("want a failed build, got %v", err)
		}
		return be
	}
	be := build(true)
	if be.Kept == "" || !strings.Contains(be.Error(), "the build directory is kept: "+be.Kept) {
		t.Fatalf("the error names no kept directory: %v", be)
	}
	logs, _ := filepath.Glob(filepath.Join(be.Kept, "*", "err.log"))
	if len(logs) != 1 {
		t.Fatalf("the kept directory %s lacks the step's err.log", be.Kept)
	}
	kept := be.Kept
	if be = build(false); be.Kept != "" {
		t.Errorf("kept without KeepFailed: %s", be.Kept)
	}
	if _, err := os.Stat(kept); err == nil {
		t.Errorf("the next build left the kept directory %s", kept)
	}
}
