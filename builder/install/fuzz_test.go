package install

import (
	"github.com/epbuild/epbuild/builder/internal/fixture"

	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/verify"
)

// installSeeds are uncompressed artifacts: a well-formed one (a manifest that matches
// its files), one whose manifest declares less than it holds, one with only a manifest.
func installSeeds(f *testing.F) [][]byte {
	f.Helper()
	dir := f.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "c", "lib"), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "c", "lib", "x.so"), []byte("0123456789"), 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.Symlink("x.so", filepath.Join(dir, "c", "lib", "y.so")); err != nil {
		f.Fatal(err)
	}
	entries, err := archive.HashTree(context.Background(), dir)
	if err != nil {
		f.Fatal(err)
	}
	pack := func(files []archive.Entry) []byte {
		m, err := json.Marshal(manifest.Manifest{Format: manifest.ManifestFormat, Recipe: "r", PlanKey: "k", Plan: &plan.Plan{}, Files: files})
		if err != nil {
			f.Fatal(err)
		}
		var zbuf bytes.Buffer
		if _, err := archive.Pack(context.Background(), dir, &zbuf, archive.PackOptions{ModTime: time.Unix(1700000000, 0),
			Extra: []archive.File{{Name: manifest.ManifestName, Mode: 0o644, Data: m}}}); err != nil {
			f.Fatal(err)
		}
		zr, err := zstd.NewReader(&zbuf)
		if err != nil {
			f.Fatal(err)
		}
		defer zr.Close()
		raw, err := io.ReadAll(zr)
		if err != nil {
			f.Fatal(err)
		}
		return raw
	}
	lying := slices.Clone(entries)
	for i := range lying {
		if lying[i].Type == archive.TypeFile {
			lying[i].Size = 1
		}
	}
	var onlyManifest bytes.Buffer
	m, _ := json.Marshal(manifest.Manifest{Format: manifest.ManifestFormat, Recipe: "r", PlanKey: "k", Plan: &plan.Plan{}, Files: entries})
	if _, err := archive.Pack(context.Background(), f.TempDir(), &onlyManifest, archive.PackOptions{Extra: []archive.File{{Name: manifest.ManifestName, Mode: 0o644, Data: m}}}); err != nil {
		f.Fatal(err)
	}
	zr, _ := zstd.NewReader(&onlyManifest)
	om, _ := io.ReadAll(zr)
	zr.Close()
	return [][]byte{pack(entries), pack(lying), om}
}

// FuzzInstallExtract feeds tar streams, compressed as an artifact is, to install's
// extraction: the manifest read first, the extraction bounded by what it declares, the
// check of every entry against it. No input panics, writes outside the staging
// directory or leaves a partial tree; a tree that is accepted matches its manifest.
// (make fuzz runs it under a memory limit.)
func FuzzInstallExtract(f *testing.F) {
	for _, s := range installSeeds(f) {
		f.Add(s)
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithLowerEncoderMem(true))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		base := t.TempDir()
		canary := filepath.Join(base, "canary")
		if err := os.WriteFile(canary, []byte("keep"), 0o644); err != nil {
			t.Fatal(err)
		}
		art := filepath.Join(base, "a.tar.zst")
		if err := os.WriteFile(art, enc.EncodeAll(data, nil), 0o644); err != nil {
			t.Fatal(err)
		}
		stage := filepath.Join(base, "stage")
		if err := os.Mkdir(stage, 0o755); err != nil {
			t.Fatal(err)
		}
		want := []string{"a.tar.zst", "canary", "stage"}
		m, raw, err := ReadArtifactManifest(ctx, art, int64(len(data)))
		if err == nil {
			tree := filepath.Join(stage, "tree")
			if _, err := stageArtifact(ctx, art, tree, m, raw); err != nil {
				if _, serr := os.Lstat(tree); !os.IsNotExist(serr) {
					t.Fatalf("a refused artifact left %s (%v)", tree, err)
				}
			} else {
				problems, _, err := verify.VerifyFiles(ctx, tree, m.Files)
				if err != nil || len(problems) > 0 {
					t.Fatalf("an accepted tree does not match its manifest: %v %+v", err, problems)
				}
			}
		}
		if got := fixture.Names(t, base); !slices.Equal(got, want) {
			t.Fatalf("beside the staging directory: %v", got)
		}
		if b, _ := os.ReadFile(canary); string(b) != "keep" {
			t.Fatal("the canary changed")
		}
		if got := fixture.Names(t, stage); len(got) > 1 || len(got) == 1 && got[0] != "tree" {
			t.Fatalf("the staging directory holds %v", got)
		}
	})
}
