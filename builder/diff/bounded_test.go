package diff

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// bigSize is the size of the large file of these tests: sparse on disk, and far more
// than the memory a comparison may take (maxAlloc).
const (
	bigSize  = 256 << 20
	maxAlloc = 48 << 20
)

// sparse writes a file of size bytes that holds only last as its last byte: no disk
// blocks but one.
func sparse(t *testing.T, name string, size int64, last byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{last}, size-1); err != nil {
		t.Fatal(err)
	}
}

// allocated runs f and returns the bytes the Go heap allocated meanwhile: a file read
// whole shows up here whatever the garbage collector did with it since.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Two prefixes, each with a large file that differs in its last byte: compared by
// sha256, streaming, and reported without being read into memory.
func TestCompareLargePrefixes(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	sparse(t, filepath.Join(a, "lib", "big.bin"), bigSize, 1)
	sparse(t, filepath.Join(b, "lib", "big.bin"), bigSize, 2)
	var (
		r   *Report
		err error
	)
	n := allocated(func() { r, err = Compare(context.Background(), a, b, Options{MaxExplain: 1 << 20}) })
	if err != nil {
		t.Fatal(err)
	}
	c := find(t, r, "lib/big.bin")
	if c.Note != TooLarge || len(c.OnlyA)+len(c.OnlyB)+len(c.Sections) != 0 || c.A.SHA256 == c.B.SHA256 {
		t.Errorf("%+v", c)
	}
	if n > maxAlloc {
		t.Errorf("comparing two %d-byte files allocated %d bytes", bigSize, n)
	}
}

// Two small artifacts that unpack to a large file each: memory stays bounded, and the
// unpacked trees are gone when Compare returns, whatever it returns.
func TestCompareLargeArtifacts(t *testing.T) {
	da, db := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	sparse(t, filepath.Join(da, "big.bin"), bigSize, 1)
	sparse(t, filepath.Join(db, "big.bin"), bigSize, 2)
	write(t, filepath.Join(da, "a-manifest.json"), "{}", 0o644)
	write(t, filepath.Join(db, "a-manifest.json"), "{}", 0o644)
	aa, ab := pack(t, da), pack(t, db)
	if st, err := os.Stat(aa); err != nil || st.Size() > 1<<20 {
		t.Fatalf("the artifact is not small: %v %v", st.Size(), err)
	}
	tmp := t.TempDir()
	left := func(what string) {
		t.Helper()
		if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
			t.Errorf("%s: left behind in the temporary directory: %v", what, ents)
		}
	}
	var (
		r   *Report
		err error
	)
	n := allocated(func() { r, err = Compare(context.Background(), aa, ab, Options{TempDir: tmp, MaxExplain: 1 << 20}) })
	if err != nil {
		t.Fatal(err)
	}
	if c := find(t, r, "big.bin"); c.Note != TooLarge {
		t.Errorf("%+v", c)
	}
	// and each artifact is decompressed in frames of 8 MiB, one per core in flight (at
	// most 8) and one being read: memory bounded by the cores, not by the file
	if frames := int64(2*(min(runtime.NumCPU(), 8)+1)) << 23; n > maxAlloc+uint64(frames) {
		t.Errorf("comparing two artifacts of a %d-byte file allocated %d bytes", bigSize, n)
	}
	left("after a comparison")

	// more than --max-extract: refused, naming the flag, nothing left
	_, err = Compare(context.Background(), aa, ab, Options{TempDir: tmp, MaxExtract: 1 << 20})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Path != aa || !strings.Contains(err.Error(), "--max-extract") {
		t.Errorf("over the bound: %v", err)
	}
	left("after the bound")

	// a manifest that declares more is refused as soon as it is read
	declared := &Declared{Name: "a-manifest.json", MaxSize: 1 << 10, Bytes: func([]byte) (int64, error) { return 1 << 40, nil }}
	n = allocated(func() { _, err = Compare(context.Background(), aa, ab, Options{TempDir: tmp, Declared: declared}) })
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "declares 1099511627776 bytes") || !strings.Contains(err.Error(), "--max-extract") {
		t.Errorf("declared too large: %v", err)
	}
	left("after a manifest that declares too much")

	// interrupted while unpacking (SIGINT cancels the context): nothing left
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	declared.Bytes = func([]byte) (int64, error) { cancel(); return 0, nil }
	if _, err = Compare(ctx, aa, ab, Options{TempDir: tmp, Declared: declared}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	left("after a cancellation")
}

// A side that cannot be read is bad input (exit 2), a machine that cannot unpack an
// artifact lacks something (exit 3); neither says "they differ".
func TestCompareExitCodes(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	write(t, filepath.Join(a, "x"), "x", 0o644)
	write(t, filepath.Join(b, "x"), "x", 0o644)
	if err := syscall.Mkfifo(filepath.Join(b, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Compare(context.Background(), a, b, Options{}); done <- err }()
	var err error
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("a FIFO in a prefix blocked the comparison")
	}
	var ie *InputError
	if !errors.As(err, &ie) || ie.ExitCode() != 2 || ie.Path != b {
		t.Errorf("a FIFO in B: %T %v", err, err)
	}
	art := pack(t, a)
	_, err = Compare(context.Background(), a, art, Options{TempDir: filepath.Join(t.TempDir(), "absent")})
	var ee *EnvError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("no temporary directory: %T %v", err, err)
	}
}

// A file that starts like ELF but is not one is compared by its strings, with a note:
// not an error that would end the comparison.
func TestCompareDamagedELF(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	write(t, filepath.Join(a, "lib.so"), "\x7fELF garbage /build/one", 0o644)
	write(t, filepath.Join(b, "lib.so"), "\x7fELF garbage /build/two", 0o644)
	r, err := Compare(context.Background(), a, b, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := find(t, r, "lib.so")
	if !strings.Contains(c.Note, "ELF sections cannot be compared") || len(c.OnlyA) != 1 || len(c.OnlyB) != 1 {
		t.Errorf("%+v", c)
	}
}
