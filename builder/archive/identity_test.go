package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// pass: HashTree for the manifest, then Pack with env.sh as an extra file and the
// manifest made beforehand.
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
	if _, err := Pack(ctx, tree, &buf, PackOptions{ModTime: mtime, Level: zstd.SpeedDefault,
		Extra: []File{{Name: "env.sh", Mode: 0o755, Data: env}},
		Late:  &LateFile{Name: "manifest.json", Mode: 0o644, Data: func([]Entry) ([]byte, error) { return mb, nil }},
	}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// goldenArtifact is the sha256 of the artifact that epbuild's package stage makes of
// artifactTree (format 2: the manifest first, frames of seekable.FrameSize and a seek table).
// Packing must keep giving these bytes: an artifact is named and pinned by its hash, and
// the same tree must give the same artifact across epbuild versions and machines. (A new
// zstd library version that changes its output changes this too: that is a change of
// artifact bytes and must be a decision, not an accident.) Format 1, one zstd stream with
// the manifest in sorted order, gave 9e5d23b1e133801f1285c5d67a9252e312012e464fa13edd0603e42dcd4783f4.
const goldenArtifact = "35edeaa18950af2ba429c01baea4280354833fe3e72c285779f4b3d644cdaf28"

// TestArtifactBytesUnchanged checks the bytes of an artifact of a fixed tree, packed with
// a manifest made by HashTree, against the golden ones.
func TestArtifactBytesUnchanged(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	artifactTree(t, tree)
	got := twoPassArtifact(t, tree, []byte("export X=1\n"), time.Unix(1700000000, 0))
	if s := sum(got); s != goldenArtifact {
		t.Errorf("two-pass artifact sha256 %s, want %s", s, goldenArtifact)
	}
}

// onePassArtifact is how the package stage makes an artifact now: one Pack, the manifest
// made from the entries Pack hashed.
func onePassArtifact(t testing.TB, tree string, env []byte, mtime time.Time) ([]byte, *PackReport) {
	t.Helper()
	var buf bytes.Buffer
	rep, err := Pack(context.Background(), tree, &buf, PackOptions{ModTime: mtime, Level: zstd.SpeedDefault,
		Extra: []File{{Name: "env.sh", Mode: 0o755, Data: env}},
		Late:  &LateFile{Name: "manifest.json", Mode: 0o644, Data: manifestOf},
	})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), rep
}

// TestOnePassSameBytes: packing in one pass gives the golden artifact with the manifest
// its first entry; the report's sha256 is that of the bytes written, its entries sorted.
func TestOnePassSameBytes(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	artifactTree(t, tree)
	env := []byte("export X=1\n")
	mtime := time.Unix(1700000000, 0)
	got, rep := onePassArtifact(t, tree, env, mtime)
	if s := sum(got); s != goldenArtifact {
		t.Errorf("one-pass artifact sha256 %s, want %s", s, goldenArtifact)
	}
	if rep.SHA256 != sum(got) || rep.Compressed != int64(len(got)) {
		t.Errorf("report: sha256 %s, %d bytes; wrote %s, %d bytes", rep.SHA256, rep.Compressed, sum(got), len(got))
	}
	names := make([]string, len(rep.Entries))
	for i, e := range rep.Entries {
		names[i] = e.Path
	}
	if !slices.IsSorted(names) {
		t.Errorf("report entries not sorted: %v", names)
	}
	if inTar := tarNames(t, got); len(inTar) == 0 || inTar[0] != "manifest.json" || !slices.IsSorted(inTar[1:]) {
		t.Fatalf("archive order: %v, want manifest.json first, then sorted", inTar)
	}
}

// TestLateFileSeesChange: a file after the manifest that changes between its hashing and
// its packing fails the pack instead of leaving a manifest that does not match the
// archive (a big file, read again to be packed); a small file is packed from the bytes
// hashed, so that the archive holds what the manifest says whatever happened to the file
// since; an error making the late file fails the pack.
func TestLateFileSeesChange(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	artifactTree(t, tree)
	victim := filepath.Join(tree, "nvshmem", "lib", "libbig.so")
	old, err := os.ReadFile(victim)
	if err != nil {
		t.Fatal(err)
	}
	if len(old) <= keepMax {
		t.Fatalf("%s: %d bytes, want a file too big to be kept", victim, len(old))
	}
	for _, change := range []struct {
		name  string
		apply func() error
	}{
		{"same size, new bytes", func() error {
			b := slices.Clone(old)
			b[len(b)/2] ^= 0xff
			return os.WriteFile(victim, b, 0o644)
		}},
		{"same bytes written again, mtime put back", func() error {
			fi, err := os.Stat(victim)
			if err != nil {
				return err
			}
			now, err := os.ReadFile(victim)
			if err != nil {
				return err
			}
			if err := os.WriteFile(victim, now, 0o644); err != nil {
				return err
			}
			return os.Chtimes(victim, fi.ModTime(), fi.ModTime())
		}},
	} {
		t.Run(change.name, func(t *testing.T) {
			_, err := Pack(context.Background(), tree, io.Discard, PackOptions{Late: &LateFile{Name: "manifest.json", Data: func(e []Entry) ([]byte, error) {
				if err := change.apply(); err != nil {
					t.Fatal(err)
				}
				return manifestOf(e)
			}}})
			if err == nil || !strings.Contains(err.Error(), `"nvshmem/lib/libbig.so": file changed while being packed`) {
				t.Errorf("got %v, want a change of nvshmem/lib/libbig.so", err)
			}
		})
	}

	t.Run("small file kept", func(t *testing.T) {
		small := filepath.Join(tree, "nvshmem", "include", "h05.h")
		before, err := os.ReadFile(small)
		if err != nil {
			t.Fatal(err)
		}
		art := filepath.Join(t.TempDir(), "a.tar.zst")
		_, err = PackFile(context.Background(), tree, art, PackOptions{Late: &LateFile{Name: "manifest.json", Data: func(e []Entry) ([]byte, error) {
			if err := os.WriteFile(small, bytes.ToUpper(before), 0o644); err != nil {
				t.Fatal(err)
			}
			return manifestOf(e)
		}}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadMember(context.Background(), art, "nvshmem/include/h05.h", 1<<20, ExtractOptions{Format: FormatTarZst})
		if err != nil || !bytes.Equal(got, before) {
			t.Fatalf("packed h05.h: %d bytes (%v), want the %d bytes hashed", len(got), err, len(before))
		}
		mb, err := ReadMember(context.Background(), art, "manifest.json", 1<<20, ExtractOptions{Format: FormatTarZst})
		if err != nil {
			t.Fatal(err)
		}
		if want := sum(before); !strings.Contains(string(mb), want) {
			t.Errorf("the manifest does not record h05.h's packed bytes (sha256 %s)", want)
		}
	})

	boom := errors.New("no manifest today")
	_, err = Pack(context.Background(), tree, io.Discard, PackOptions{Late: &LateFile{Name: "manifest.json", Data: func([]Entry) ([]byte, error) { return nil, boom }}})
	if !errors.Is(err, boom) {
		t.Errorf("got %v, want the late file's error", err)
	}
}

// TestMountsAsIfLaidOut: packing each component's directory as a mount gives the bytes of
// packing a tree laid out with them.
func TestMountsAsIfLaidOut(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	artifactTree(t, tree)
	last, err := os.ReadFile(filepath.Join(tree, "zz-last.txt"))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	rep, err := Pack(context.Background(), "", &buf, PackOptions{ModTime: time.Unix(1700000000, 0), Level: zstd.SpeedDefault,
		Mounts: []Mount{{Name: "nvshmem", Dir: filepath.Join(tree, "nvshmem")}, {Name: "alpha", Dir: filepath.Join(tree, "alpha")}},
		Extra:  []File{{Name: "env.sh", Mode: 0o755, Data: []byte("export X=1\n")}, {Name: "zz-last.txt", Mode: 0o644, Data: last}},
		Late:   &LateFile{Name: "manifest.json", Mode: 0o644, Data: manifestOf},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(buf.Bytes()); got != goldenArtifact || rep.SHA256 != got {
		t.Errorf("artifact from mounts: sha256 %s (report %s), want %s", got, rep.SHA256, goldenArtifact)
	}

	for _, bad := range []struct {
		src    string
		mounts []Mount
		want   string
	}{
		{tree, []Mount{{Name: "alpha", Dir: filepath.Join(tree, "nvshmem")}}, `mount "alpha"`},
		{"", []Mount{{Name: "a/b", Dir: tree}}, "one path component"},
		{"", []Mount{{Name: "..", Dir: tree}}, "one path component"},
		{"", []Mount{{Name: "x", Dir: filepath.Join(tree, "none")}}, "no such file"},
	} {
		_, err := Pack(context.Background(), bad.src, io.Discard, PackOptions{Mounts: bad.mounts})
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("mounts %v: got %v, want %q", bad.mounts, err, bad.want)
		}
	}
}
