package archive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"os"
	"path/filepath"
	"testing"
)

// truncatingHash truncates a file at its first Write: the next chunk of the mapping lies
// past the end of the file and faults.
type truncatingHash struct {
	hash.Hash
	f    *os.File
	done bool
}

func (t *truncatingHash) Write(p []byte) (int, error) {
	if !t.done {
		t.done = true
		if err := t.f.Truncate(100); err != nil {
			panic(err)
		}
	}
	return t.Hash.Write(p)
}

// TestHashMappedTruncated: a file truncated while it is hashed through a mapping faults;
// hashMapped reports that it could not hash it (no crash), and hashOpen then reads the
// file as it is now, as reading it from the start would have.
func TestHashMappedTruncated(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big")
	data := make([]byte, 3*mapChunk)
	for i := range data {
		data[i] = byte(i * 7)
	}
	writeFile(t, p, string(data), 0o644)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	ok, err := hashMapped(context.Background(), f, fi.Size(), &truncatingHash{Hash: sha256.New(), f: mustOpenRW(t, p)})
	if ok || err != nil {
		t.Fatalf("hashMapped of a file truncated under it: ok %v, err %v; want not ok, no error", ok, err)
	}
	// the whole file again, then truncated in the middle of hashOpen's mapping
	writeFile(t, p, string(data), 0o644)
	fi, err = f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	sum, n, err := hashOpen(context.Background(), f, fi, &truncatingHash{Hash: sha256.New(), f: mustOpenRW(t, p)}, make([]byte, 1<<20))
	want := sha256.Sum256(data[:100])
	if err != nil || n != 100 || sum != hex.EncodeToString(want[:]) {
		t.Errorf("hashOpen of a truncated file: %s, %d bytes, %v; want the sha256 of its first 100 bytes", sum, n, err)
	}
	// untouched: the mapping's sum is the file's
	writeFile(t, p, string(data), 0o644)
	sum, n, err = HashFile(context.Background(), p, sha256.New(), make([]byte, 1<<20))
	want = sha256.Sum256(data)
	if err != nil || n != int64(len(data)) || sum != hex.EncodeToString(want[:]) {
		t.Errorf("HashFile: %s, %d bytes, %v; want %x", sum, n, err, want)
	}
}

func mustOpenRW(t *testing.T, p string) *os.File {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestHashFilesTruncated: files truncated while mapped, in a lane hashed alone and in a
// pair, fault; HashFiles hashes them again as reading sees them, and the file beside in
// the pair still gets its own digest.
func TestHashFilesTruncated(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 3*mapChunk)
	for i := range data {
		data[i] = byte(i * 7)
	}
	small, big1, big2 := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	writeFile(t, small, string(data[:wholeMax+64]), 0o644)
	writeFile(t, big1, string(data), 0o644)
	writeFile(t, big2, string(data), 0o644)
	// One worker: small and big1 go in the two lanes; when small is done, big1 is cut
	// under its mapping, and big2 joins it in the pair.
	got := sumsOf(t, 1, []string{small, big1, big2}, func(p string, r FileSum) {
		if p == small {
			if err := os.Truncate(big1, 100); err != nil {
				t.Error(err)
			}
		}
	})
	if r := got[big1]; r.Err != nil || r.N != 100 || r.SHA256 != hexSum(data[:100]) {
		t.Errorf("truncated in a pair: %+v; want the sha256 of its first 100 bytes", r)
	}
	if r := got[big2]; r.Err != nil || r.N != int64(len(data)) || r.SHA256 != hexSum(data) {
		t.Errorf("beside a truncated file: %+v; want its own digest", r)
	}
	if r := got[small]; r.SHA256 != hexSum(data[:wholeMax+64]) {
		t.Errorf("small: %+v", r)
	}
	// Alone: the last lane left is cut when the other file is done.
	writeFile(t, big1, string(data), 0o644)
	got = sumsOf(t, 1, []string{small, big1}, func(p string, r FileSum) {
		if p == small {
			if err := os.Truncate(big1, 100); err != nil {
				t.Error(err)
			}
		}
	})
	if r := got[big1]; r.Err != nil || r.N != 100 || r.SHA256 != hexSum(data[:100]) {
		t.Errorf("truncated alone: %+v; want the sha256 of its first 100 bytes", r)
	}
}
