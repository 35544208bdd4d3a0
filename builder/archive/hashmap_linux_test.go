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
