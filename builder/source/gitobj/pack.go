package gitobj

import (
	"bufio"
	"crypto/sha1"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/idxfile"
	"github.com/klauspost/compress/zlib"
)

// PackWriter writes a git pack and its index in one pass: every object whole (no deltas),
// fast zlib, each object's id checked against its content as it is written, and the index
// built from the offsets and CRCs as they go by, so nothing is read back. go-git's encoder
// plus its PackWriter compress at the default level and then inflate and hash everything
// again to index it, which made a copy from a mirror several times slower than git clone.
type PackWriter struct {
	dir  string
	f    *os.File
	bw   *bufio.Writer
	sum  hash.Hash // of the whole pack, for its trailer and name
	crc  hash.Hash32
	off  int64
	zw   *zlib.Writer
	idx  idxfile.Writer
	n    uint32
	want uint32
}

// NewPackWriter starts a pack of count objects in a temp file in dir.
func NewPackWriter(dir string, count int) (*PackWriter, error) {
	f, err := os.CreateTemp(dir, "tmp_pack_")
	if err != nil {
		return nil, err
	}
	w := &PackWriter{dir: dir, f: f, bw: bufio.NewWriterSize(f, 256<<10), sum: sha1.New(), crc: crc32.NewIEEE(), want: uint32(count)}
	w.zw, _ = zlib.NewWriterLevel(io.Discard, zlib.BestSpeed)
	var hdr [12]byte
	copy(hdr[:], "PACK")
	binary.BigEndian.PutUint32(hdr[4:], 2)
	binary.BigEndian.PutUint32(hdr[8:], uint32(count))
	w.write(hdr[:])
	w.idx.OnHeader(uint32(count))
	return w, nil
}

// write sends b to the file, the pack hash and the current object's CRC.
func (w *PackWriter) write(b []byte) {
	w.bw.Write(b)
	w.sum.Write(b)
	w.crc.Write(b)
	w.off += int64(len(b))
}

// packOut is w as the io.Writer its zlib stream goes to, not exported with w.
type packOut PackWriter

func (o *packOut) Write(b []byte) (int, error) { (*PackWriter)(o).write(b); return len(b), nil }

// addRaw appends one object as packed elsewhere: its header and zlib stream, unchanged
// (the caller has checked them).
func (w *PackWriter) addRaw(h plumbing.Hash, raw []byte) {
	pos := w.off
	w.crc.Reset()
	w.write(raw)
	w.idx.Add(h, uint64(pos), w.crc.Sum32())
	w.n++
}

// addStream appends one object read from r (size bytes) and checks that it hashes to h.
func (w *PackWriter) addStream(h plumbing.Hash, t plumbing.ObjectType, size int64, r io.Reader) error {
	pos := w.off
	w.crc.Reset()
	w.write(packHeader(t, size))
	oh := plumbing.NewHasher(t, size)
	w.zw.Reset((*packOut)(w))
	n, err := io.Copy(io.MultiWriter(w.zw, &oh), r)
	if err != nil {
		return fmt.Errorf("object %s: %w", h, err)
	}
	if err := w.zw.Close(); err != nil {
		return err
	}
	if n != size || oh.Sum() != h {
		return fmt.Errorf("object %s is corrupt: its content hashes to %s (%d of %d bytes)", h, oh.Sum(), n, size)
	}
	w.idx.Add(h, uint64(pos), w.crc.Sum32())
	w.n++
	return nil
}

// Finish writes the trailer and the index and returns their paths (named pack-<checksum>,
// as git names packs). It does not fsync them: the caller does, before they become
// visible. A failed Finish removes what it wrote.
func (w *PackWriter) Finish() (pack, idx string, err error) {
	defer func() {
		if err != nil {
			w.Abort()
		}
	}()
	if w.n != w.want {
		return "", "", fmt.Errorf("pack: %d objects written, %d announced", w.n, w.want)
	}
	var sum plumbing.Hash
	copy(sum[:], w.sum.Sum(nil))
	w.bw.Write(sum[:])
	if err := w.bw.Flush(); err != nil {
		return "", "", err
	}
	if err := w.f.Close(); err != nil {
		return "", "", err
	}
	if err := w.idx.OnFooter(sum); err != nil {
		return "", "", err
	}
	mi, err := w.idx.Index()
	if err != nil {
		return "", "", err
	}
	base := filepath.Join(w.dir, "pack-"+sum.String())
	fi, err := os.Create(base + ".idx")
	if err != nil {
		return "", "", err
	}
	bw := bufio.NewWriter(fi)
	if _, err := idxfile.NewEncoder(bw).Encode(mi); err != nil {
		fi.Close()
		return "", "", err
	}
	if err := bw.Flush(); err != nil {
		fi.Close()
		return "", "", err
	}
	if err := fi.Close(); err != nil {
		return "", "", err
	}
	if err := os.Rename(w.f.Name(), base+".pack"); err != nil {
		return "", "", err
	}
	return base + ".pack", base + ".idx", nil
}

// Abort abandons the pack and removes its temp file.
func (w *PackWriter) Abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}
