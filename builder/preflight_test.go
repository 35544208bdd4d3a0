package builder

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/log"
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// Preflight decides before the patch stages' outcome is said, although they ran while
// the toolchain was probed: with a tool missing, that is the error (exit 3) even when a
// source cannot be fetched; with none missing, the fetch's error; and nothing is built.
func TestPreflightDecidesFirst(t *testing.T) {
	const body = `name: order
cluster: test
description: a fetch that fails
toolchain: {cmake: "CMAKE"}
components:
  - name: lib
    version: 1.0.0
    source: {git: {url: "URL_lib", commit: 1111111111111111111111111111111111111111}}
    build:
      - cmake: {}
`
	for _, tc := range []struct {
		name, cmake string
		want        func(error) bool
	}{
		{"a tool missing", ">=999", func(err error) bool { var pe *toolchain.PreflightError; return errors.As(err, &pe) }},
		{"none missing", ">=3", func(err error) bool {
			var pe *toolchain.PreflightError
			return err != nil && !errors.As(err, &pe) && strings.Contains(err.Error(), "1111111111")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fixture.NewShape(t, map[string]map[string]string{"lib": {"README": "lib\n"}}, strings.Replace(body, "CMAKE", tc.cmake, 1))
			cacheDir := filepath.Join(t.TempDir(), "cache")
			j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: s.Recipe, CacheDir: cacheDir, Mirror: s.Mirror, Log: log.New(io.Discard)})
			if err != nil {
				t.Fatal(err)
			}
			_, err = j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv})
			if !tc.want(err) {
				t.Fatalf("got %v", err)
			}
			if des, _ := os.ReadDir(filepath.Join(cacheDir, "logs")); len(des) != 0 {
				t.Errorf("a build ran: %v", des)
			}
			if des, _ := os.ReadDir(filepath.Join(cacheDir, "tmp")); len(des) != 0 {
				t.Errorf("temporary directories left: %v", des)
			}
		})
	}
}

// The toolchain probe runs beside the patch stages: the fetch of an archive (from a
// server on loopback) waits until cmake is asked its version, and cmake, asked, waits
// until the fetch has begun. One after the other, either would wait in vain.
func TestProbeRunsBesidePatches(t *testing.T) {
	real, err := exec.LookPath("cmake")
	if err != nil {
		t.Skip("no cmake to ask")
	}
	ctl, bin := t.TempDir(), t.TempDir()
	wrapper := "#!/bin/sh\nCTL=" + strconv.Quote(ctl) + "\nif [ \"$1\" = --version ]; then\n  : > \"$CTL/probe.started\"\n  " +
		strings.ReplaceAll(fixture.WaitFor(`"$CTL/fetch.started"`, "the fetch never began while the probe ran"), "exit 1", `: > "$CTL/probe.alone"; break`) +
		"\nfi\nexec " + strconv.Quote(real) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "cmake"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(zw)
	data := []byte("the source\n")
	if err := tw.WriteHeader(&tar.Header{Name: "src/README", Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	tw.Write(data)
	tw.Close()
	zw.Close()
	sum := sha256.Sum256(tgz.Bytes())
	alone := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		os.WriteFile(filepath.Join(ctl, "fetch.started"), nil, 0o644)
		for i := 0; ; i++ {
			if _, err := os.Stat(filepath.Join(ctl, "probe.started")); err == nil {
				break
			}
			if i > 1200 {
				alone = true
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		w.Write(tgz.Bytes())
	}))
	defer srv.Close()
	recipe := filepath.Join(t.TempDir(), "probe.yaml")
	body := `name: probe
cluster: test
description: an archive fetched while the toolchain is probed
components:
  - name: src
    version: 1.0.0
    source: {archive: {url: "` + srv.URL + `/src.tar.gz", sha256: ` + hex.EncodeToString(sum[:]) + `, strip: 1}}
    build:
      - command: {run: [sh, -c, 'mkdir -p "$DESTDIR$PREFIX" && cp README "$DESTDIR$PREFIX/"']}
`
	if err := os.WriteFile(recipe, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: recipe, CacheDir: filepath.Join(t.TempDir(), "cache"), Log: log.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ctl, "probe.alone")); err == nil || alone {
		t.Errorf("the probe and the fetch ran one after the other (probe alone: %v, fetch alone: %v)", err == nil, alone)
	}
}

// Which NCCL torch loads, which only the manifest records, is asked while the build runs:
// the fixture torch answers only once a build stage has begun, and the manifest has its
// answer.
func TestNCCLAskedBesideTheBuild(t *testing.T) {
	for _, tool := range []string{"gcc", "python3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	cacheDir := filepath.Join(t.TempDir(), "cache")
	site := fixture.TorchSite(t, "2.28.9", "2.28.9", nil)
	init := filepath.Join(site, "torch", "__init__.py")
	body, err := os.ReadFile(init)
	if err != nil {
		t.Fatal(err)
	}
	alone := filepath.Join(t.TempDir(), "alone")
	wait := fmt.Sprintf(`import os, time
for _ in range(1200):
    if os.path.isdir(%q):
        break
    time.sleep(0.05)
else:
    open(%q, "w").close()
`, filepath.Join(cacheDir, "stages", "build"), alone)
	if err := os.WriteFile(init, append([]byte(wait), body...), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", site)
	s := fixture.NewShape(t, map[string]map[string]string{"app": {"README": "app\n"}}, `name: ncclwait
cluster: test
description: torch's NCCL, and something to build
components:
  - name: nccl
    source: {python: {package: nvidia-nccl-cu12}}
  - name: app
    version: 1.0.0
    source: {git: {url: "URL_app", commit: COMMIT_app}}
    build:
      - command: {run: [sh, -c, 'mkdir -p "$DESTDIR$PREFIX" && cp README "$DESTDIR$PREFIX/"']}
`)
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: s.Recipe, CacheDir: cacheDir, Mirror: s.Mirror, Log: log.New(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := j.Build(context.Background(), BuildOptions{OutDir: t.TempDir(), Version: "test", Environ: os.Environ(), Getenv: os.Getenv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(alone); err == nil {
		t.Error("torch's NCCL was asked before any build began")
	}
	m := fixture.DecodeManifestWithTar(t, res.Artifact)
	if m.Toolchain == nil || m.Toolchain.NCCL == nil || m.Toolchain.NCCL.Version != "2.28.9" || m.Toolchain.NCCL.Path != "nvidia/nccl/lib/libnccl.so.2.28.9" {
		t.Errorf("the manifest's NCCL: %+v", m.Toolchain)
	}
}
