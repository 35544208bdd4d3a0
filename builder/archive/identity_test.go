package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// artifactTree writes a tree shaped like an artifact's: components whose names sort before
// and after "manifest.json", files over several 1 MiB read chunks and several zstd
// blocks, semi-compressible and text data, empty and executable files, an empty directory
// and relative symlinks. The same call gives the same tree.
func artifactTree(t testing.TB, root string) {
	t.Helper()
	rng := rand.New(rand.NewChaCha8([32]byte{17}))
	blob := func(n int) string {
		b := make([]byte, n)
		for i := 0; i < n; i += 4096 {
			end := min(i+4096, n)
			half := i + (end-i)/2
			for j := i; j < half; j++ {
				b[j] = byte(rng.Uint32())
			}
			copy(b[half:end], b[max(0, i-rng.IntN(32<<10)):])
		}
		return string(b)
	}
	text := func(lines int) string {
		var s strings.Builder
		for i := range lines {
			fmt.Fprintf(&s, "static inline int fn_%d(int a) { return a * %d; }\n", i, rng.IntN(1000))
		}
		return s.String()
	}
	for _, comp := range []string{"alpha", "nvshmem"} {
		writeFile(t, filepath.Join(root, comp, "lib", "libbig.so"), blob(3<<20+12345), 0o755)
		writeFile(t, filepath.Join(root, comp, "lib", "libsmall.a"), blob(70000), 0o644)
		for i := range 40 {
			writeFile(t, filepath.Join(root, comp, "include", fmt.Sprintf("h%02d.h", i)), text(20+i*7), 0o644)
		}
		writeFile(t, filepath.Join(root, comp, "bin", "run.sh"), "#!/bin/sh\nexec true\n", 0o755)
		writeFile(t, filepath.Join(root, comp, "share", "empty"), "", 0o644)
		if err := os.MkdirAll(filepath.Join(root, comp, "share", "nothing"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("libbig.so", filepath.Join(root, comp, "lib", "libbig.so.3")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../lib", filepath.Join(root, comp, "bin", "lib")); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(root, "zz-last.txt"), text(3), 0o644)
}

// manifestOf is a stand-in for the builder's manifest: JSON holding every entry.
func manifestOf(entries []Entry) ([]byte, error) {
	b, err := json.MarshalIndent(struct {
		Files []Entry `json:"files"`
	}{entries}, "", "  ")
	return append(b, '\n'), err
}

// twoPassArtifact is how the package stage made an artifact before it packed in one
// pass: HashTree for the manifest, then Pack with the manifest and env.sh as extra files.
func twoPassArtifact(t testing.TB, tree string, env []byte, mtime time.Time) []byte {
	t.Helper()
	ctx := context.Background()
	entries, err := HashTree(ctx, tree)
	if err != nil {
		t.Fatal(err)
	}
	entries = append(entries, Entry{Path: "env.sh", Type: TypeFile, Mode: 0o755, Size: int64(len(env)), SHA256: sum(env)})
	slices.SortFunc(entries, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	mb, err := manifestOf(entries)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Pack(ctx, tree, &buf, PackOptions{ModTime: mtime, Level: zstd.SpeedDefault, Extra: []File{
		{Name: "manifest.json", Mode: 0o644, Data: mb},
		{Name: "env.sh", Mode: 0o755, Data: env},
	}}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// goldenArtifact is the sha256 of the artifact that epbuild's package stage made of
// artifactTree before packing went to one pass (HashTree, then Pack with one zstd
// thread). Packing must keep giving these bytes: an artifact is named and pinned by its
// hash, and the same tree must give the same artifact across epbuild versions. (A new
// zstd library version that changes its output changes this too: that is a change of
// artifact bytes and must be a decision, not an accident.)
const goldenArtifact = "9e5d23b1e133801f1285c5d67a9252e312012e464fa13edd0603e42dcd4783f4"

// TestArtifactBytesUnchanged checks the bytes of an artifact of a fixed tree against the
// ones the two-pass package stage made.
func TestArtifactBytesUnchanged(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	artifactTree(t, tree)
	env := []byte("export X=1\n")
	mtime := time.Unix(1700000000, 0)
	old := twoPassArtifact(t, tree, env, mtime)
	if got := sum(old); got != goldenArtifact {
		t.Errorf("two-pass artifact sha256 %s, want %s", got, goldenArtifact)
	}
}
