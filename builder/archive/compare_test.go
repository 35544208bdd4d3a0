package archive

import (
	"github.com/epbuild/epbuild/builder/archive/seekable"

	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/epbuild/epbuild/builder/benchcmp"
	"github.com/klauspost/compress/zstd"
)

// TestCompareHash times HashTree against `openssl dgst -sha256` on as many processes as
// HashTree has workers, on the same tree. (The package stage as a whole is compared in the
// builder package.)
func TestCompareHash(t *testing.T) {
	benchcmp.Skip(t)
	benchcmp.Need(t, "openssl", "xargs")
	tree := filepath.Join(t.TempDir(), "prefix")
	total := benchcmp.InstallTree(t, tree, 256, 8000)
	ctx := context.Background()
	workers := benchcmp.Workers()
	ours := func(tb testing.TB) benchcmp.Sample {
		return benchcmp.Time(tb, func() error { _, err := HashTree(ctx, tree); return err })
	}
	// 4 batches of files per process: few process starts, and the batches even out.
	anchor := func(tb testing.TB) benchcmp.Sample {
		return benchcmp.Shell(tb, tree, `find . -type f -print0 | xargs -0 -P "$1" -n "$2" openssl dgst -sha256 -r > /dev/null`,
			fmt.Sprint(workers), fmt.Sprint(8004/(4*workers)+1))
	}
	benchcmp.Compare(t, benchcmp.Rounds(5), ours, anchor).Print("hash", fmt.Sprintf("bytes=%d", total), fmt.Sprintf("workers=%d", workers))
}

// TestCompareEncoder times the zstd encoder alone, as Pack runs it (the same level,
// frames and workers), on a tar file of the package comparison's tree, against
// `zstd -3 -T1` on the same file, and against the package comparison's anchor
// (`tar | zstd -3 -T1` of the tree): the floor under the package stage's ratio.
func TestCompareEncoder(t *testing.T) {
	benchcmp.Skip(t)
	benchcmp.Need(t, "tar", "zstd")
	tmp := t.TempDir()
	total := benchcmp.InstallTree(t, filepath.Join(tmp, "prefix"), 256, 8000)
	tarball := filepath.Join(tmp, "tree.tar")
	if out, err := exec.Command("tar", "-C", tmp, "--sort=name", "-cf", tarball, "prefix").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	out := filepath.Join(tmp, "out.zst")
	ours := func(tb testing.TB) benchcmp.Sample {
		return benchcmp.Time(tb, func() error {
			in, err := os.Open(tarball)
			if err != nil {
				return err
			}
			defer in.Close()
			f, err := os.Create(out)
			if err != nil {
				return err
			}
			defer f.Close()
			// Pack's own writer: big writes, on a goroutine of their own.
			cw := newOutWriter(f, sha256.New())
			zw, err := seekable.NewWriter(cw, zstd.SpeedDefault, 0, seekable.FrameSize)
			if err != nil {
				cw.Close()
				return err
			}
			_, err = io.Copy(zw, in)
			if zerr := zw.Close(); err == nil {
				err = zerr
			}
			if cerr := cw.Close(); err == nil {
				err = cerr
			}
			return err
		})
	}
	anchor := func(tb testing.TB) benchcmp.Sample {
		return benchcmp.Shell(tb, tmp, `zstd -3 -T1 -q -f -o "$2" "$1"`, tarball, out+".anchor")
	}
	// The package comparison's anchor: what the encoder alone is to it bounds what the
	// whole stage can be.
	tarZstd := func(tb testing.TB) benchcmp.Sample {
		return benchcmp.Shell(tb, tmp, `tar --sort=name -cf - prefix | zstd -3 -T1 -q -f -o "$1"`, out+".tar-zstd")
	}
	rs := benchcmp.CompareMany(t, benchcmp.Rounds(5), ours, anchor, tarZstd)
	rs[0].Print("encoder", fmt.Sprintf("bytes=%d", total))
	rs[1].Print("encoder-vs-package-anchor", fmt.Sprintf("bytes=%d", total))
}

// benchInstallTree writes a 64 MiB + 2000-header tree for one benchmark (b.Loop runs the
// benchmark function once, so the tree is made once).
func benchInstallTree(b *testing.B) (string, int64) {
	b.Helper()
	tree := filepath.Join(b.TempDir(), "prefix")
	return tree, benchcmp.InstallTree(b, tree, 64, 2000)
}

func BenchmarkPack(b *testing.B) {
	tree, n := benchInstallTree(b)
	b.SetBytes(n)
	for b.Loop() {
		if _, err := Pack(context.Background(), tree, io.Discard, PackOptions{Prefix: "p", ModTime: fixedTime}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHashTree(b *testing.B) {
	tree, n := benchInstallTree(b)
	b.SetBytes(n)
	for b.Loop() {
		if _, err := HashTree(context.Background(), tree); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExtract(b *testing.B) {
	tree, n := benchInstallTree(b)
	art := filepath.Join(b.TempDir(), "a.tar.zst")
	if _, err := PackFile(context.Background(), tree, art, PackOptions{Prefix: "p", ModTime: fixedTime}); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(n)
	for b.Loop() {
		b.StopTimer()
		dest := filepath.Join(b.TempDir(), "x")
		b.StartTimer()
		if _, err := ExtractFile(context.Background(), art, dest, ExtractOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncoder is the floor under BenchmarkPack: the zstd encoder alone, as Pack runs
// it, on a tar of the same tree held in memory.
func BenchmarkEncoder(b *testing.B) {
	tree, _ := benchInstallTree(b)
	var tarball bytes.Buffer
	if _, err := Pack(context.Background(), tree, &tarball, PackOptions{Prefix: "p", ModTime: fixedTime}); err != nil {
		b.Fatal(err)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		b.Fatal(err)
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(tarball.Bytes(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		zw, err := seekable.NewWriter(io.Discard, zstd.SpeedDefault, 0, seekable.FrameSize)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := zw.Write(raw); err != nil {
			b.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			b.Fatal(err)
		}
	}
}
