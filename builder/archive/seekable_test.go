package archive

import (
	"github.com/epbuild/epbuild/builder/archive/seekable"

	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// tarNames lists the entries of a tar.zst held in memory, in archive order, read by one
// streaming decoder (as `zstd -d` reads it).
func tarNames(t testing.TB, art []byte) []string {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(art))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
}

// packFramed packs artifactTree as the package stage does, in frames of size bytes on
// workers workers.
func packFramed(t testing.TB, tree string, size, workers int) []byte {
	t.Helper()
	var buf bytes.Buffer
	_, err := Pack(context.Background(), tree, &buf, PackOptions{ModTime: time.Unix(1700000000, 0), Level: zstd.SpeedDefault,
		Extra:   []File{{Name: "env.sh", Mode: 0o755, Data: []byte("export X=1\n")}},
		Late:    &LateFile{Name: "manifest.json", Mode: 0o644, Data: manifestOf},
		Workers: workers, frameSize: size,
	})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestFramesSameBytesAnyWorkers: the bytes do not depend on how many frames are
// compressed at once, with the real frame size (the golden artifact) and with many small
// frames.
func TestFramesSameBytesAnyWorkers(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	artifactTree(t, tree)
	for _, w := range []int{1, 3} {
		if got := sum(packFramed(t, tree, 0, w)); got != goldenArtifact {
			t.Errorf("%d workers: sha256 %s, want %s", w, got, goldenArtifact)
		}
	}
	one := packFramed(t, tree, 64<<10, 1)
	for _, w := range []int{2, 5} {
		if got := packFramed(t, tree, 64<<10, w); !bytes.Equal(got, one) {
			t.Errorf("64 KiB frames: %d workers give other bytes than 1 (%d and %d bytes)", w, len(got), len(one))
		}
	}
}

// TestSeekTableLayout reads the seek table of a packed archive as the format's
// specification lays it out: a skippable frame (magic 0x184D2A5E, its size), one entry of
// compressed and decompressed size per frame, the footer (frame count, descriptor,
// magic 0x8F92EAB1). Each frame decompresses on its own to its decompressed size, every
// frame but the last holds seekable.FrameSize bytes, and the frames are the whole archive before
// the table.
func TestSeekTableLayout(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	artifactTree(t, tree)
	const size = 256 << 10
	art := packFramed(t, tree, size, 2)
	foot := art[len(art)-9:]
	if m := binary.LittleEndian.Uint32(foot[5:]); m != 0x8F92EAB1 {
		t.Fatalf("footer magic %#x", m)
	}
	if foot[4] != 0 {
		t.Errorf("descriptor %#x, want 0 (no checksums)", foot[4])
	}
	n := int(binary.LittleEndian.Uint32(foot[:4]))
	tableLen := 8 + 8*n + 9
	table := art[len(art)-tableLen:]
	if m, l := binary.LittleEndian.Uint32(table), binary.LittleEndian.Uint32(table[4:]); m != 0x184D2A5E || int(l) != 8*n+9 {
		t.Fatalf("skippable frame header: magic %#x, size %d; want 0x184D2A5E, %d", m, l, 8*n+9)
	}
	if n < 10 {
		t.Fatalf("%d frames, want many of %d bytes", n, size)
	}
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var whole []byte
	off := 0
	for i := range n {
		c := int(binary.LittleEndian.Uint32(table[8+8*i:]))
		d := int(binary.LittleEndian.Uint32(table[12+8*i:]))
		out, err := dec.DecodeAll(art[off:off+c], nil)
		if err != nil || len(out) != d {
			t.Fatalf("frame %d: %d bytes (%v), table says %d", i, len(out), err, d)
		}
		if i < n-1 && d != size {
			t.Errorf("frame %d: %d bytes, want %d", i, d, size)
		}
		whole = append(whole, out...)
		off += c
	}
	if off != len(art)-tableLen {
		t.Errorf("frames end at %d, the table starts at %d", off, len(art)-tableLen)
	}
	stream, err := dec.DecodeAll(art, nil)
	if err != nil || !bytes.Equal(stream, whole) {
		t.Errorf("one decoder over the whole archive: %d bytes (%v), the frames hold %d", len(stream), err, len(whole))
	}
}

// TestFormat2ForTarAndZstd: `zstd -d` and `tar --zstd -xf` read a format-2 archive as the
// tar it holds.
func TestFormat2ForTarAndZstd(t *testing.T) {
	for _, tool := range []string{"zstd", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
	tmp := t.TempDir()
	tree := filepath.Join(tmp, "tree")
	artifactTree(t, tree)
	art := filepath.Join(tmp, "a.tar.zst")
	if err := os.WriteFile(art, packFramed(t, tree, 256<<10, 2), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, tmp, "zstd", "-q", "-d", "-o", filepath.Join(tmp, "a.tar"), art)
	run(t, tmp, "tar", "-tf", filepath.Join(tmp, "a.tar"))
	out := filepath.Join(tmp, "x")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, tmp, "tar", "--zstd", "-xf", art, "-C", out)
	if err := os.Remove(filepath.Join(out, "manifest.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(out, "env.sh")); err != nil {
		t.Fatal(err)
	}
	diffEntries(t, "tar --zstd -xf", hashTree(t, out), hashTree(t, tree))
}

// countingFile counts the bytes read from an archive file.
type countingFile struct {
	f *os.File
	n int64
}

func (c *countingFile) Read(p []byte) (int, error) {
	n, err := c.f.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *countingFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.f.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

func (c *countingFile) Stat() (fs.FileInfo, error) { return c.f.Stat() }

// TestManifestFromFirstFrame: reading the manifest of a format-2 artifact reads the seek
// table and the first frame, nothing more of the file.
func TestManifestFromFirstFrame(t *testing.T) {
	tmp := t.TempDir()
	tree := filepath.Join(tmp, "tree")
	artifactTree(t, tree)
	const size = 64 << 10
	b := packFramed(t, tree, size, 2)
	art := filepath.Join(tmp, "a.tar.zst")
	if err := os.WriteFile(art, b, 0o644); err != nil {
		t.Fatal(err)
	}
	frames, err := seekable.ReadTable(bytes.NewReader(b), int64(len(b)))
	if err != nil || len(frames) < 20 {
		t.Fatalf("seek table: %d frames (%v)", len(frames), err)
	}
	f, err := os.Open(art)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cf := &countingFile{f: f}
	x, err := newExtractor(context.Background(), art, ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := x.readMember(cf, "manifest.json", 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if len(mb) < 1000 || len(mb) > size-1024 {
		t.Fatalf("manifest: %d bytes, want one that fits the first frame", len(mb))
	}
	tableLen := int64(len(b)) - frames[len(frames)-1].Off - frames[len(frames)-1].Size
	if max := frames[0].Size + tableLen + seekFooterSize; cf.n > max {
		t.Errorf("read %d bytes of %d for the manifest, want at most %d (the table and the first frame)", cf.n, len(b), max)
	}
}

// TestOneReaderBothFormats: a format-1 artifact (one zstd stream, no seek table) and a
// format-2 one of the same tar extract, scan and give their manifest alike; so does a
// format-2 one whose seek table is not one (a reserved bit set), read as one stream.
func TestOneReaderBothFormats(t *testing.T) {
	tmp := t.TempDir()
	tree := filepath.Join(tmp, "tree")
	artifactTree(t, tree)
	v2 := packFramed(t, tree, 128<<10, 2)
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := dec.DecodeAll(v2, nil)
	dec.Close()
	if err != nil {
		t.Fatal(err)
	}
	var v1 bytes.Buffer
	zw, err := zstd.NewWriter(&v1, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(raw)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	notTable := bytes.Clone(v2)
	notTable[len(notTable)-5] |= 0x04
	if f, _ := seekable.ReadTable(bytes.NewReader(notTable), int64(len(notTable))); f != nil {
		t.Fatal("a seek table with a reserved bit set was taken")
	}
	ctx := context.Background()
	var want []Entry
	for _, c := range []struct {
		name string
		b    []byte
	}{{"format2", v2}, {"format1", v1.Bytes()}, {"format2-not-seekable", notTable}} {
		art := filepath.Join(tmp, c.name+".tar.zst")
		if err := os.WriteFile(art, c.b, 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := ExtractFile(ctx, art, filepath.Join(tmp, c.name), ExtractOptions{Hash: true})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		scan, err := Scan(ctx, bytes.NewReader(c.b), art, ExtractOptions{})
		if err != nil {
			t.Fatalf("%s: scan: %v", c.name, err)
		}
		diffEntries(t, c.name+" scan", scan.Tree, rep.Tree)
		if want == nil {
			want = rep.Tree
		} else {
			diffEntries(t, c.name, rep.Tree, want)
		}
		mb, err := ReadMember(ctx, art, "manifest.json", 1<<20, ExtractOptions{})
		if err != nil || !bytes.Contains(mb, []byte(`"files"`)) {
			t.Errorf("%s: manifest: %q (%v)", c.name, mb, err)
		}
	}
}

// TestFramesDamaged: a frame that does not decompress, or to another size than its seek
// table says, fails the extraction as a corrupt archive and leaves nothing.
func TestFramesDamaged(t *testing.T) {
	tmp := t.TempDir()
	tree := filepath.Join(tmp, "tree")
	artifactTree(t, tree)
	good := packFramed(t, tree, 128<<10, 2)
	frames, err := seekable.ReadTable(bytes.NewReader(good), int64(len(good)))
	if err != nil || len(frames) < 8 {
		t.Fatalf("seek table: %d frames (%v)", len(frames), err)
	}
	flipped := bytes.Clone(good)
	flipped[frames[5].Off+frames[5].Size/2] ^= 0x55
	resized := bytes.Clone(good)
	tableOff := frames[len(frames)-1].Off + frames[len(frames)-1].Size
	entry := resized[tableOff+8+8*6+4:] // frame 6's decompressed size
	binary.LittleEndian.PutUint32(entry, binary.LittleEndian.Uint32(entry)-512)
	for _, c := range []struct {
		name string
		b    []byte
	}{{"flipped", flipped}, {"resized", resized}} {
		art := filepath.Join(tmp, c.name+".tar.zst")
		if err := os.WriteFile(art, c.b, 0o644); err != nil {
			t.Fatal(err)
		}
		dest := filepath.Join(tmp, c.name)
		_, err := ExtractFile(context.Background(), art, dest, ExtractOptions{Hash: true})
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: got %v, want ErrCorrupt", c.name, err)
		}
		absent(t, dest)
	}
}

// failAfter fails every write once n bytes were written.
type failAfter struct{ n int }

var errDiskFull = errors.New("disk full")

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		k := f.n
		f.n = 0
		return k, errDiskFull
	}
	f.n -= len(p)
	return len(p), nil
}

// TestFramesWriteFails: a write of the frames that fails fails the pack with its error,
// wherever it happens, and stops the workers.
func TestFramesWriteFails(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	artifactTree(t, tree)
	for _, n := range []int{0, 100 << 10, 2 << 20} {
		_, err := Pack(context.Background(), tree, &failAfter{n: n}, PackOptions{Workers: 2, frameSize: 64 << 10,
			Late: &LateFile{Name: "manifest.json", Mode: 0o644, Data: manifestOf}})
		if !errors.Is(err, errDiskFull) {
			t.Errorf("failing after %d bytes: got %v, want the write's error", n, err)
		}
	}
}

// seekFooterSize is the seek table's footer in the format's specification:
// Number_Of_Frames (4), Seek_Table_Descriptor (1), Seekable_Magic_Number (4).
const seekFooterSize = 9
