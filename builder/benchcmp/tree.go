package benchcmp

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// InstallTree writes under root a tree shaped like a staged NVSHMEM + DeepEP prefix and
// returns its size in bytes: bigMiB MiB in four large, semi-compressible libraries (random
// bytes interleaved with repeats, as in code and relocation tables) and headers small text
// files of about 35 KB. The same arguments give the same bytes.
func InstallTree(tb testing.TB, root string, bigMiB, headers int) int64 {
	tb.Helper()
	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	var total int64
	buf := make([]byte, 1<<20)
	for i := range 4 {
		p := filepath.Join(root, "lib", fmt.Sprintf("libnvshmem_part%d.a", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			tb.Fatal(err)
		}
		for range bigMiB / 4 {
			// Each 4 KiB: 1.5 KiB fresh random, 2.5 KiB copied from up to 64 KiB back.
			for off := 0; off < len(buf); off += 4096 {
				fresh := buf[off : off+1536]
				for j := 0; j < len(fresh); j += 8 {
					v := rng.Uint64()
					for k := range 8 {
						fresh[j+k] = byte(v >> (8 * k))
					}
				}
				src := max(0, off-rng.IntN(64<<10))
				copy(buf[off+1536:off+4096], buf[src:src+2560])
			}
			if _, err := f.Write(buf); err != nil {
				tb.Fatal(err)
			}
			total += int64(len(buf))
		}
		if err := f.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	for i := range headers {
		p := filepath.Join(root, "include", fmt.Sprintf("mod%02d", i%50), fmt.Sprintf("header_%04d.cuh", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			tb.Fatal(err)
		}
		w := bufio.NewWriter(f)
		for j := range 420 {
			n, _ := fmt.Fprintf(w, "static __device__ inline int nvshmemi_fn_%d_%d(int a, int b) { return a * %d + b; }\n", i, j, rng.IntN(100000))
			total += int64(n)
		}
		if err := w.Flush(); err != nil {
			tb.Fatal(err)
		}
		if err := f.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	return total
}
