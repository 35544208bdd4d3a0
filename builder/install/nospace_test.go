package install

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
)

// A disk that fills up during the extraction itself (past the space check, which
// stageArtifact does not make) is no space too, and leaves nothing. Needs a tmpfs mount
// (root, or a user namespace that allows it).
func TestStageFullDisk(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "c", "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 256<<10)
	for i := range big {
		big[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(dir, "c", "lib", "x.so"), big, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := archive.HashTree(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := json.Marshal(manifest.Manifest{Format: manifest.ManifestFormat, Recipe: "r", PlanKey: "k", Plan: &plan.Plan{}, Files: entries})
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(t.TempDir(), "a.tar.zst")
	f, err := os.Create(art)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Pack(context.Background(), dir, f, archive.PackOptions{ModTime: time.Unix(1700000000, 0),
		Extra: []archive.File{{Name: manifest.ManifestName, Mode: 0o644, Data: mb}}}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	m, raw, err := ReadArtifactManifest(context.Background(), art, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	tight, err := os.MkdirTemp("", "fulldisk-")
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", tight, "tmpfs", 0, "size=12k"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(tight, syscall.MNT_DETACH); _ = os.Remove(tight) })
	_, err = stageArtifact(context.Background(), art, filepath.Join(tight, "tree"), m, raw)
	if !disk.IsNoSpace(err) {
		t.Fatalf("extraction into a full file system: %v", err)
	}
	if ents, _ := os.ReadDir(tight); len(ents) > 0 {
		t.Errorf("%s holds %s after a refused extraction", tight, ents[0].Name())
	}
}
