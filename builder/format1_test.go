package builder

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/pack"
)

// format1 rewrites a format-2 artifact as epbuild wrote format 1: the same tar entries
// in sorted order (the manifest among them) in one zstd stream, no seek table.
func format1(t *testing.T, art []byte) []byte {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(art))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	type ent struct {
		h    *tar.Header
		data []byte
	}
	var ents []ent
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		ents = append(ents, ent{h, data})
	}
	if len(ents) == 0 || ents[0].h.Name != manifest.ManifestName {
		t.Fatalf("the format-2 artifact does not start with %s", manifest.ManifestName)
	}
	slices.SortFunc(ents, func(a, b ent) int {
		return strings.Compare(strings.TrimSuffix(a.h.Name, "/"), strings.TrimSuffix(b.h.Name, "/"))
	})
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	for _, e := range ents {
		if err := tw.WriteHeader(e.h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestFormat1ArtifactStillWorks: an artifact of format 1 (one zstd stream, the manifest
// in sorted order) still installs and verifies, gives its manifest to sbom, passes the
// check push and pull make, and diff finds it equal to the format-2 artifact of the same
// tree.
func TestFormat1ArtifactStillWorks(t *testing.T) {
	a := artifacts(t).A
	b, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(t.TempDir(), filepath.Base(a))
	ob := format1(t, b)
	if err := os.WriteFile(old, ob, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old+".sha256", []byte(manifest.SHA256Hex(ob)+"  "+filepath.Base(old)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prefix := filepath.Join(t.TempDir(), "p")
	mustInstall(t, old, prefix, false)
	filesOK(t, prefix)
	if _, _, _, err := manifest.CheckArtifact(ctx, old); err != nil {
		t.Errorf("the artifact check of push and pull: %v", err)
	}
	if _, err := pack.SBOM(ctx, old, "test", pack.SBOMCredits{}); err != nil {
		t.Errorf("sbom: %v", err)
	}
	rep, err := pack.Diff(ctx, old, a, 1<<30)
	if err != nil || !rep.Equal {
		t.Errorf("diff of format 1 and format 2 of one tree: %+v (%v), want equal", rep, err)
	}
}
