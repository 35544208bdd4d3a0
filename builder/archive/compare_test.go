package archive

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"

	"github.com/epbuild/epbuild/builder/benchcmp"
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
