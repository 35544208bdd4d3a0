package oci

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// demoBuild is the demo recipe built once per test binary, as `epbuild recipe demo` does.
var demoBuild struct {
	once sync.Once
	dir  string
	art  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if demoBuild.dir != "" {
		_ = os.RemoveAll(demoBuild.dir)
	}
	os.Exit(code)
}

// demoArtifact returns a copy of the demo artifact (with its .sha256) in a fresh
// directory of the test, so that tests may put files beside it.
func demoArtifact(t *testing.T) string {
	t.Helper()
	demoBuild.once.Do(func() {
		if demoBuild.dir, demoBuild.err = os.MkdirTemp("", "epbuild-oci-test-"); demoBuild.err == nil {
			demoBuild.art, demoBuild.err = buildDemo(demoBuild.dir)
		}
	})
	if demoBuild.err != nil {
		t.Fatalf("build the demo artifact: %v", demoBuild.err)
	}
	dir := t.TempDir()
	for _, suffix := range []string{"", ".sha256"} {
		b, err := os.ReadFile(demoBuild.art + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(demoBuild.art)+suffix), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, filepath.Base(demoBuild.art))
}

func buildDemo(dir string) (string, error) {
	ctx := context.Background()
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		return "", err
	}
	p, err := res.Resolve("demo", nil)
	if err != nil {
		return "", err
	}
	c, err := cache.Open(filepath.Join(dir, "cache"))
	if err != nil {
		return "", err
	}
	l := log.New(io.Discard)
	src, err := stage.NewSources(c, "", l, source.ProgressOff)
	if err != nil {
		return "", err
	}
	st, err := store.OpenStore(c.Dir())
	if err != nil {
		return "", err
	}
	tc := (&toolchain.Prober{Getenv: os.Getenv}).Probe(ctx)
	r := &stage.Runner{Store: st, Sources: src, Log: l, Toolchain: tc, Environ: os.Environ(), OutDir: filepath.Join(dir, "out"), Version: "test"}
	out, err := r.Run(ctx, p)
	if err != nil {
		return "", err
	}
	return out.Artifact, nil
}
