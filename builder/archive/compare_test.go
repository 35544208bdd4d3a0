package archive

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// makeInstallTree writes about 520 MB shaped like a staged NVSHMEM + DeepEP prefix: a few
// large, semi-compressible binaries (random bytes interleaved with repeats, as in code and
// relocation tables) and thousands of small text headers and scripts.
func makeInstallTree(t *testing.T, root string) int64 {
	t.Helper()
	rng := rand.New(rand.NewChaCha8([32]byte{7}))
	var total int64
	buf := make([]byte, 1<<20)
	for i := range 4 {
		p := filepath.Join(root, "lib", fmt.Sprintf("libnvshmem_part%d.a", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		for range 100 {
			// Each 4 KiB: 1.5 KiB fresh random, 2.5 KiB copied from up to 64 KiB back.
			for off := 0; off < len(buf); off += 4096 {
				fresh := buf[off : off+1536]
				for j := 0; j < len(fresh); j += 8 {
					v := rng.Uint64()
					for k := 0; k < 8; k++ {
						fresh[j+k] = byte(v >> (8 * k))
					}
				}
				src := max(0, off-rng.IntN(64<<10))
				copy(buf[off+1536:off+4096], buf[src:src+2560])
			}
			if _, err := f.Write(buf); err != nil {
				t.Fatal(err)
			}
			total += int64(len(buf))
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3000 {
		p := filepath.Join(root, "include", fmt.Sprintf("mod%02d", i%50), fmt.Sprintf("header_%04d.cuh", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriter(f)
		for j := range 420 {
			n, _ := fmt.Fprintf(w, "static __device__ inline int nvshmemi_fn_%d_%d(int a, int b) { return a * %d + b; }\n", i, j, rng.IntN(100000))
			total += int64(n)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return total
}

func timeIt(f func()) float64 {
	start := time.Now()
	f()
	return time.Since(start).Seconds()
}

func maxRSSMB() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	return float64(ru.Maxrss) / 1024 // kilobytes on Linux
}

// TestComparePackage times Pack against `tar | zstd -3 -T0` and HashTree against
// `find | xargs sha256sum` on the same tree, best of two interleaved runs each. maxrss_mb is
// the peak RSS of this whole test process (fixture generation included), not of Pack alone.
func TestComparePackage(t *testing.T) {
	if os.Getenv("EPBUILD_BENCH") == "" {
		t.Skip("set EPBUILD_BENCH=1 to measure")
	}
	tmp := t.TempDir()
	tree := filepath.Join(tmp, "prefix")
	total := makeInstallTree(t, tree)
	ctx := context.Background()
	ours := filepath.Join(tmp, "ours.tar.zst")
	anchor := filepath.Join(tmp, "anchor.tar.zst")

	var packS, anchorS, hashS, sumS float64 = 1e9, 1e9, 1e9, 1e9
	var written int64
	for range 2 {
		packS = min(packS, timeIt(func() {
			f, err := os.Create(ours)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Pack(ctx, tree, f, PackOptions{Prefix: "deepep", ModTime: fixedTime})
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			written = rep.Compressed
		}))
		anchorS = min(anchorS, timeIt(func() {
			out, err := exec.Command("bash", "-c", "set -eo pipefail; tar -cf - -C \"$1\" . | zstd -3 -T0 -q -f -o \"$2\"", "x", tree, anchor).CombinedOutput()
			if err != nil {
				t.Fatalf("anchor: %v\n%s", err, out)
			}
		}))
		hashS = min(hashS, timeIt(func() {
			if _, err := HashTree(ctx, tree); err != nil {
				t.Fatal(err)
			}
		}))
		sumS = min(sumS, timeIt(func() {
			out, err := exec.Command("bash", "-c", "set -eo pipefail; find \"$1\" -type f -print0 | xargs -0 sha256sum > /dev/null", "x", tree).CombinedOutput()
			if err != nil {
				t.Fatalf("sha256sum: %v\n%s", err, out)
			}
		}))
	}
	st, err := os.Stat(anchor)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tree %d bytes; ours %d bytes compressed, anchor %d bytes", total, written, st.Size())
	rss := maxRSSMB()
	fmt.Printf("BENCH package ratio=%.2f epbuild_s=%.3f anchor_s=%.3f bytes=%d maxrss_mb=%.0f\n", packS/anchorS, packS, anchorS, written, rss)
	fmt.Printf("BENCH hash ratio=%.2f epbuild_s=%.3f anchor_s=%.3f bytes=%d maxrss_mb=%.0f\n", hashS/sumS, hashS, sumS, total, rss)
}
