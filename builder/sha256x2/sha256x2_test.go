package sha256x2

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"testing"
)

func stdSum(p []byte) string {
	s := sha256.Sum256(p)
	return hex.EncodeToString(s[:])
}

// hash2 hashes a and b with Blocks2 over their common whole blocks, in pieces of step
// blocks, and the rest through Sum.
func hash2(a, b []byte, step int) (string, string) {
	var da, db Digest
	da.Reset()
	db.Reset()
	n := min(len(a), len(b)) / BlockSize * BlockSize
	for off := 0; off < n; {
		k := min(n-off, step*BlockSize)
		Blocks2(&da, &db, a[off:off+k], b[off:off+k])
		off += k
	}
	return da.Sum(a[n:]), db.Sum(b[n:])
}

func TestAgainstStdlib(t *testing.T) {
	t.Logf("two-message kernel: %v", haveX2)
	rng := rand.New(rand.NewChaCha8([32]byte{3}))
	for _, la := range []int{0, 1, 55, 56, 63, 64, 65, 119, 128, 1000, 4096, 1<<16 + 17} {
		for _, lb := range []int{0, 64, 77, 4096, 1 << 16} {
			a, b := make([]byte, la), make([]byte, lb)
			for i := range a {
				a[i] = byte(rng.Uint32())
			}
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			for _, step := range []int{1, 3, 1 << 20} {
				ga, gb := hash2(a, b, step)
				if wa := stdSum(a); ga != wa {
					t.Fatalf("len %d (beside %d, step %d): %s, crypto/sha256 says %s", la, lb, step, ga, wa)
				}
				if wb := stdSum(b); gb != wb {
					t.Fatalf("len %d (beside %d, step %d): %s, crypto/sha256 says %s", lb, la, step, gb, wb)
				}
			}
		}
	}
}

// The lanes must not share anything: the same message beside different ones hashes the
// same, and two copies of one message hash alike.
func TestLanesIndependent(t *testing.T) {
	a := make([]byte, 640)
	for i := range a {
		a[i] = byte(i)
	}
	b := make([]byte, 640)
	want := stdSum(a)
	for _, other := range [][]byte{a, b} {
		ga, gb := hash2(a, other, 2)
		gb2, ga2 := hash2(other, a, 2)
		if ga != want || ga2 != want || gb != gb2 {
			t.Fatalf("lanes leak into each other: %s %s (want %s); %s %s", ga, ga2, want, gb, gb2)
		}
	}
}

// The fallback (crypto/sha256 through its saved state) gives the same digests.
func TestWriteFallback(t *testing.T) {
	p := make([]byte, 64*9+5)
	for i := range p {
		p[i] = byte(i * 31)
	}
	var d Digest
	d.Reset()
	d.write(p[:64*4])
	d.write(p[64*4 : 64*9])
	if got, want := d.Sum(p[64*9:]), stdSum(p); got != want {
		t.Fatalf("fallback: %s, want %s", got, want)
	}
}

func TestBlocks2RefusesUnevenInput(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Blocks2 of 64 and 128 bytes did not panic")
		}
	}()
	var a, b Digest
	a.Reset()
	b.Reset()
	Blocks2(&a, &b, make([]byte, 64), make([]byte, 128))
}

func FuzzBlocks2(f *testing.F) {
	f.Add([]byte("abc"), []byte("a much longer message than the first one, over one block long......"), uint8(1))
	f.Fuzz(func(t *testing.T, a, b []byte, step uint8) {
		ga, gb := hash2(a, b, int(step)+1)
		if ga != stdSum(a) || gb != stdSum(b) {
			t.Fatalf("digests differ from crypto/sha256 for %d and %d bytes", len(a), len(b))
		}
	})
}

// BenchmarkBlocks2 and BenchmarkStdlib hash the same bytes: 2 MiB as two 1 MiB messages.
func BenchmarkBlocks2(b *testing.B) {
	pa, pb := make([]byte, 1<<20), make([]byte, 1<<20)
	b.SetBytes(2 << 20)
	var da, db Digest
	for b.Loop() {
		da.Reset()
		db.Reset()
		Blocks2(&da, &db, pa, pb)
	}
}

func BenchmarkStdlib(b *testing.B) {
	pa, pb := make([]byte, 1<<20), make([]byte, 1<<20)
	b.SetBytes(2 << 20)
	for b.Loop() {
		sha256.Sum256(pa)
		sha256.Sum256(pb)
	}
}

// Where the CPU has the SHA extensions, the tests above ran the assembly; elsewhere they
// test the fallback alone, and this says so.
func TestKernelRuns(t *testing.T) {
	if !haveX2 {
		t.Skip("no SHA extensions here (or not amd64): the tests ran the crypto/sha256 fallback, not the two-message kernel")
	}
	var a, b Digest
	a.Reset()
	b.Reset()
	msg := make([]byte, 3*maxAsm+BlockSize) // more than one assembly call
	for i := range msg {
		msg[i] = byte(i)
	}
	blocks2(&a.h, &b.h, &msg[0], &msg[0], len(msg)/BlockSize)
	a.n, b.n = uint64(len(msg)), uint64(len(msg))
	if got, want := a.Sum(nil), stdSum(msg); got != want || b.Sum(nil) != want {
		t.Fatalf("blocks2: %s, crypto/sha256 says %s", got, want)
	}
	a.Reset()
	b.Reset()
	Blocks2(&a, &b, msg, msg)
	if got, want := a.Sum(nil), stdSum(msg); got != want {
		t.Fatalf("Blocks2 in pieces: %s, crypto/sha256 says %s", got, want)
	}
}
