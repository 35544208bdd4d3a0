package gitobj

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/klauspost/compress/zlib"
)

// DB reads objects straight from a git object directory: its packs (version 2
// indexes, read by binary search, nothing decoded up front), loose objects and
// alternates. go-git decodes every pack index into maps and resolves each object through
// a scanner, which made reading one commit's tree out of a long history several times
// slower than git. It is safe for concurrent use; each goroutine reads through its own
// Reader.
type DB struct {
	packs []*packFile
	loose []string // object directories, searched for loose objects
	bases *baseCache
}

// packFile is one pack and its index, the index held in memory as it is on disk.
type packFile struct {
	path  string
	f     *os.File
	data  []byte // the pack mapped into memory; nil: read with ReadAt
	size  int64
	n     int
	fan   []byte // 256 big-endian counts
	names []byte // n ids, sorted
	crcs  []byte // n CRC-32s of the packed bytes
	offs  []byte // n 31-bit offsets, or indexes into large
	large []byte // 64-bit offsets

	revOnce sync.Once
	rev     []int32 // the objects' index positions in pack order, for hashAt
}

// Pack object types, as git numbers them (plumbing.ObjectType uses the same values).
const (
	packOFSDelta = 6
	packREFDelta = 7
)

// maxDeltaChain bounds a delta chain (git makes them at most 4095 long), so that a
// crafted pack cannot recurse forever.
const maxDeltaChain = 10000

// InlineLimit: objects up to this size are read whole; larger ones are streamed, to bound
// memory.
const InlineLimit = 4 << 20

// baseCacheBytes is how much resolved content the delta base cache keeps.
const baseCacheBytes = 32 << 20

// Open opens the object directory dir (a repository's "objects").
func Open(dir string) (*DB, error) {
	db := &DB{bases: newBaseCache(baseCacheBytes)}
	if err := db.add(dir, 0); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// OpenPacks opens the packs in packDir alone.
func OpenPacks(packDir string) (*DB, error) {
	db := &DB{bases: newBaseCache(baseCacheBytes)}
	if err := db.addPacks(packDir); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Union reads the objects of a and b as one database, a's first; it shares their open
// packs, so it is not closed itself: close a and b once done with it.
func Union(a, b *DB) *DB {
	return &DB{packs: append(slices.Clone(a.packs), b.packs...), loose: append(slices.Clone(a.loose), b.loose...), bases: a.bases}
}

func (db *DB) addPacks(packDir string) error {
	packs, err := filepath.Glob(filepath.Join(packDir, "pack-*.pack"))
	if err != nil {
		return err
	}
	for _, name := range packs {
		p, err := openPack(name)
		if errors.Is(err, fs.ErrNotExist) {
			continue // a pack without its index is not published yet (git ignores it too)
		}
		if err != nil {
			return err
		}
		db.packs = append(db.packs, p)
	}
	return nil
}

func (db *DB) add(dir string, depth int) error {
	if depth > 5 {
		return fmt.Errorf("objects %s: alternates nested too deep", dir)
	}
	db.loose = append(db.loose, dir)
	if err := db.addPacks(filepath.Join(dir, "pack")); err != nil {
		return err
	}
	b, err := os.ReadFile(filepath.Join(dir, "info", "alternates"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l == "" || l[0] == '#' {
			continue
		}
		if !filepath.IsAbs(l) {
			l = filepath.Join(dir, l)
		}
		if err := db.add(l, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the packs.
func (db *DB) Close() error {
	var errs []error
	for _, p := range db.packs {
		errs = append(errs, unmapPack(p.data), p.f.Close())
	}
	return errors.Join(errs...)
}

func openPack(name string) (*packFile, error) {
	idxName := strings.TrimSuffix(name, ".pack") + ".idx"
	idx, err := os.ReadFile(idxName)
	if err != nil {
		return nil, err
	}
	p := &packFile{path: name}
	if len(idx) < 8+1024+40 || string(idx[:4]) != "\377tOc" || binary.BigEndian.Uint32(idx[4:]) != 2 {
		return nil, fmt.Errorf("pack index %s: not a version 2 index", idxName)
	}
	p.fan = idx[8 : 8+1024]
	p.n = int(binary.BigEndian.Uint32(p.fan[1020:]))
	rest := len(idx) - (8 + 1024 + 40)
	if p.n > rest/28 || (rest-28*p.n)%8 != 0 {
		return nil, fmt.Errorf("pack index %s: truncated or not SHA-1", idxName)
	}
	b := idx[8+1024:]
	p.names, b = b[:20*p.n], b[20*p.n:]
	p.crcs, b = b[:4*p.n], b[4*p.n:]
	p.offs, b = b[:4*p.n], b[4*p.n:]
	p.large = b[:len(b)-40]
	if p.f, err = os.Open(name); err != nil {
		return nil, err
	}
	var hdr [12]byte
	fi, err := p.f.Stat()
	if err == nil {
		p.size = fi.Size()
		_, err = p.f.ReadAt(hdr[:], 0)
	}
	if err == nil && (string(hdr[:4]) != "PACK" || int(binary.BigEndian.Uint32(hdr[8:])) != p.n || p.size < 32) {
		err = fmt.Errorf("pack %s: bad header, or %d objects where its index has %d", name, binary.BigEndian.Uint32(hdr[8:]), p.n)
	}
	if err != nil {
		p.f.Close()
		return nil, err
	}
	p.data = mapPack(p.f, p.size)
	return p, nil
}

// lookup returns the index of h in p, or -1.
func (p *packFile) lookup(h plumbing.Hash) int {
	lo := 0
	if h[0] > 0 {
		lo = int(binary.BigEndian.Uint32(p.fan[4*(int(h[0])-1):]))
	}
	hi := int(binary.BigEndian.Uint32(p.fan[4*int(h[0]):]))
	if hi > p.n || lo > hi {
		return -1
	}
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		switch c := bytes.Compare(p.names[20*m:20*m+20], h[:]); {
		case c == 0:
			return m
		case c < 0:
			lo = m + 1
		default:
			hi = m
		}
	}
	return -1
}

func (p *packFile) offset(i int) (int64, error) {
	v := binary.BigEndian.Uint32(p.offs[4*i:])
	if v&0x80000000 == 0 {
		return int64(v), nil
	}
	j := int(v & 0x7fffffff)
	if 8*j+8 > len(p.large) {
		return 0, fmt.Errorf("pack index of %s: bad large offset", p.path)
	}
	return int64(binary.BigEndian.Uint64(p.large[8*j:])), nil
}

func (p *packFile) crc(i int) uint32 { return binary.BigEndian.Uint32(p.crcs[4*i:]) }

// hashAt returns the id of the object whose entry starts at off. The reverse index it
// searches is built on first use (what git keeps in a .rev file).
func (p *packFile) hashAt(off int64) (plumbing.Hash, bool) {
	p.revOnce.Do(func() {
		offs := make([]int64, p.n)
		rev := make([]int32, p.n)
		for i := range p.n {
			o, err := p.offset(i)
			if err != nil {
				return // a bad index: no reverse lookups
			}
			offs[i], rev[i] = o, int32(i)
		}
		sort.Slice(rev, func(a, b int) bool { return offs[rev[a]] < offs[rev[b]] })
		p.rev = rev
	})
	k := sort.Search(len(p.rev), func(k int) bool {
		o, _ := p.offset(int(p.rev[k]))
		return o >= off
	})
	if k == len(p.rev) {
		return plumbing.ZeroHash, false
	}
	if o, _ := p.offset(int(p.rev[k])); o != off {
		return plumbing.ZeroHash, false
	}
	var h plumbing.Hash
	i := int(p.rev[k])
	copy(h[:], p.names[20*i:20*i+20])
	return h, true
}

// find says where h is packed (nil: not in a pack).
func (db *DB) find(h plumbing.Hash) (*packFile, int) {
	for _, p := range db.packs {
		if i := p.lookup(h); i >= 0 {
			return p, i
		}
	}
	return nil, -1
}

// Packed says whether the object h is in one of db's packs.
func (db *DB) Packed(h plumbing.Hash) bool {
	p, _ := db.find(h)
	return p != nil
}

// Has says whether the object h is in db.
func (db *DB) Has(h plumbing.Hash) bool {
	if p, _ := db.find(h); p != nil {
		return true
	}
	for _, d := range db.loose {
		if _, err := os.Stat(loosePath(d, h)); err == nil {
			return true
		}
	}
	return false
}

func loosePath(dir string, h plumbing.Hash) string {
	s := h.String()
	return filepath.Join(dir, s[:2], s[2:])
}

// Reader reads objects out of a DB for one goroutine at a time, reusing its
// inflater and buffers.
type Reader struct {
	db      *DB
	zr      io.ReadCloser
	zw      *zlib.Writer
	br      bytes.Reader
	buf     []byte // packed bytes
	scratch []byte // content handed out until the next call
	delta   []byte // a delta being applied
	// deltaEnd is where the zlib stream of the last delta that readAt applied at depth 0
	// ends.
	deltaEnd int64
	// inPack, when set, names the objects of the pack that rawObject copies into: a
	// delta whose base goes there too is copied as it is, not resolved and compressed
	// again.
	inPack func(plumbing.Hash) bool
}

// Reader returns a new Reader of db, for one goroutine.
func (db *DB) Reader() *Reader { return &Reader{db: db} }

// DB is the database r reads.
func (r *Reader) DB() *DB { return r.db }

// KeepDeltas makes r read objects for a pack that holds those for which inPack is true: a
// delta whose base goes there too is copied as it is, not resolved and compressed again.
func (r *Reader) KeepDeltas(inPack func(plumbing.Hash) bool) { r.inPack = inPack }

// packEntry is an object's header in a pack.
type packEntry struct {
	hdr  [40]byte // as packed, hdr[:data-off]
	typ  plumbing.ObjectType
	size int64 // of the content (of the delta, for deltas)
	off  int64 // of the header
	data int64 // of the zlib stream
	base int64 // OFS delta: the offset of the base
	ref  plumbing.Hash
}

func (r *Reader) entry(p *packFile, off int64) (e packEntry, err error) {
	e.off = off
	b := &e.hdr
	if off < 12 || off >= p.size-20 {
		return e, fmt.Errorf("pack %s: object offset %d out of range", p.path, off)
	}
	var n int
	if p.data != nil {
		n = copy(b[:], p.data[off:])
	} else if n, err = p.f.ReadAt(b[:], off); n == 0 && err != nil {
		return e, fmt.Errorf("pack %s: %w", p.path, err)
	}
	bad := fmt.Errorf("pack %s: bad object header at %d", p.path, off)
	i := 0
	next := func() (byte, bool) {
		if i >= n {
			return 0, false
		}
		i++
		return b[i-1], true
	}
	c, _ := next()
	e.typ = plumbing.ObjectType(c >> 4 & 7)
	e.size = int64(c & 15)
	for shift := 4; c&0x80 != 0; shift += 7 {
		var ok bool
		if c, ok = next(); !ok || shift > 56 {
			return e, bad
		}
		e.size |= int64(c&0x7f) << shift
	}
	switch e.typ {
	case plumbing.CommitObject, plumbing.TreeObject, plumbing.BlobObject, plumbing.TagObject:
	case packOFSDelta:
		c, ok := next()
		if !ok {
			return e, bad
		}
		d := int64(c & 0x7f)
		for c&0x80 != 0 {
			if c, ok = next(); !ok || d >= 1<<55 {
				return e, bad
			}
			d = (d+1)<<7 | int64(c&0x7f)
		}
		if e.base = off - d; d == 0 || e.base < 12 {
			return e, bad
		}
	case packREFDelta:
		if i+20 > n {
			return e, bad
		}
		copy(e.ref[:], b[i:i+20])
		i += 20
	default:
		return e, bad
	}
	e.data = off + int64(i)
	return e, nil
}

func (r *Reader) inflater(src io.Reader) (io.Reader, error) {
	if r.zr == nil {
		zr, err := zlib.NewReader(src)
		if err != nil {
			return nil, err
		}
		r.zr = zr
		return zr, nil
	}
	if err := r.zr.(zlib.Resetter).Reset(src, nil); err != nil {
		return nil, err
	}
	return r.zr, nil
}

// inflate reads the zlib stream at off that holds size bytes and returns them (in dst when
// it has room), and where the stream ends (the zlib checksum checked).
func (r *Reader) inflate(p *packFile, off, size int64, dst []byte) ([]byte, int64, error) {
	avail := p.size - 20 - off
	if p.data != nil {
		if avail <= 0 {
			return nil, 0, fmt.Errorf("pack %s: object data at %d runs past the end", p.path, off)
		}
		buf := p.data[off : p.size-20]
		data, err := r.inflateFrom(buf, size, dst)
		if err != nil {
			return nil, 0, fmt.Errorf("pack %s: object data at %d: %w", p.path, off, err)
		}
		return data, off + int64(len(buf)-r.br.Len()), nil
	}
	est := size + size/8 + 64
	for {
		if est > avail {
			est = avail
		}
		if est <= 0 {
			return nil, 0, fmt.Errorf("pack %s: object data at %d runs past the end", p.path, off)
		}
		if int64(cap(r.buf)) < est {
			r.buf = make([]byte, est)
		}
		buf := r.buf[:est]
		if n, err := p.f.ReadAt(buf, off); n < len(buf) {
			return nil, 0, fmt.Errorf("pack %s: %w", p.path, err)
		}
		data, err := r.inflateFrom(buf, size, dst)
		if err == nil {
			return data, off + int64(len(buf)-r.br.Len()), nil
		}
		if r.br.Len() == 0 && est < avail && (errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)) {
			est *= 2 // the estimate was short: read more
			continue
		}
		return nil, 0, fmt.Errorf("pack %s: object data at %d: %w", p.path, off, err)
	}
}

// inflateFrom inflates the zlib stream at the start of buf that holds size bytes (into dst
// when it has room) and checks that it ends there; r.br is left past its end.
func (r *Reader) inflateFrom(buf []byte, size int64, dst []byte) ([]byte, error) {
	r.br.Reset(buf)
	data := dst[:0]
	if int64(cap(dst)) < size {
		data = make([]byte, size)
	}
	data = data[:size]
	zr, err := r.inflater(&r.br)
	if err == nil {
		_, err = io.ReadFull(zr, data)
	}
	if err == nil {
		var one [1]byte
		if k, e := zr.Read(one[:]); k != 0 {
			err = errors.New("more data than its header says")
		} else if e != io.EOF {
			err = e
		}
	}
	return data, err
}

// Read returns the type and content of the object h. The content is valid until the next
// call on r.
func (r *Reader) Read(h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	if p, i := r.db.find(h); p != nil {
		off, err := p.offset(i)
		if err != nil {
			return 0, nil, err
		}
		return r.readAt(p, off, 0, false)
	}
	return r.readLoose(h)
}

// scratchFor returns r's scratch buffer, grown to hold size bytes when that is not large.
func (r *Reader) scratchFor(size int64) []byte {
	if int64(cap(r.scratch)) < size && size <= InlineLimit {
		r.scratch = make([]byte, size)
	}
	return r.scratch
}

// readAt returns the object at off in p, its deltas resolved; in r's scratch buffer unless
// keep.
func (r *Reader) readAt(p *packFile, off int64, depth int, keep bool) (plumbing.ObjectType, []byte, error) {
	e, err := r.entry(p, off)
	if err != nil {
		return 0, nil, err
	}
	if e.typ != packOFSDelta && e.typ != packREFDelta {
		var dst []byte
		if !keep {
			dst = r.scratchFor(e.size)
		}
		data, _, err := r.inflate(p, e.data, e.size, dst)
		return e.typ, data, err
	}
	if depth > maxDeltaChain {
		return 0, nil, fmt.Errorf("pack %s: delta chain at %d too long", p.path, off)
	}
	bp, boff := p, e.base
	if e.typ == packREFDelta {
		var i int
		if bp, i = r.db.find(e.ref); bp != nil {
			if boff, err = bp.offset(i); err != nil {
				return 0, nil, err
			}
		}
	}
	var bt plumbing.ObjectType
	var base []byte
	if bp == nil {
		bt, base, err = r.readLoose(e.ref)
	} else if c, ok := r.db.bases.get(bp, boff); ok {
		bt, base = c.typ, c.data
	} else if bt, base, err = r.readAt(bp, boff, depth+1, true); err == nil {
		r.db.bases.put(bp, boff, bt, base)
	}
	if err != nil {
		return 0, nil, err
	}
	delta, dend, err := r.inflate(p, e.data, e.size, r.delta)
	if err != nil {
		return 0, nil, err
	}
	if depth == 0 {
		r.deltaEnd = dend
	}
	if cap(delta) <= InlineLimit {
		r.delta = delta
	}
	var dst []byte
	if !keep {
		dst = r.scratch
	}
	data, err := applyDelta(dst, base, delta)
	if err != nil {
		return 0, nil, fmt.Errorf("pack %s: delta at %d: %w", p.path, off, err)
	}
	if !keep && cap(data) <= InlineLimit {
		r.scratch = data
	}
	return bt, data, nil
}

func (r *Reader) readLoose(h plumbing.Hash) (plumbing.ObjectType, []byte, error) {
	for _, d := range r.db.loose {
		f, err := os.Open(loosePath(d, h))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, nil, err
		}
		defer f.Close()
		t, size, br, err := r.looseHeader(f, h)
		if err != nil {
			return 0, nil, err
		}
		data, err := io.ReadAll(io.LimitReader(br, size+1))
		if err == nil && int64(len(data)) != size {
			err = fmt.Errorf("%d bytes where its header says %d", len(data), size)
		}
		if err != nil {
			return 0, nil, fmt.Errorf("loose object %s: %w", h, err)
		}
		return t, data, nil
	}
	return 0, nil, fmt.Errorf("object %s: %w", h, plumbing.ErrObjectNotFound)
}

// looseHeader reads the header of the loose object h in f ("blob 123\x00"): its type and
// size, and the reader of its content that follows.
func (r *Reader) looseHeader(f *os.File, h plumbing.Hash) (plumbing.ObjectType, int64, *bufio.Reader, error) {
	zr, err := r.inflater(bufio.NewReader(f))
	if err != nil {
		return 0, 0, nil, fmt.Errorf("loose object %s: %w", h, err)
	}
	br := bufio.NewReader(zr)
	// a header is a type name, a space and a decimal size: far below a bufio buffer
	hdr, err := br.ReadSlice(0)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("loose object %s: bad header: %w", h, err)
	}
	var ts string
	var size int64
	if _, err := fmt.Sscanf(string(hdr[:len(hdr)-1]), "%s %d", &ts, &size); err != nil || size < 0 {
		return 0, 0, nil, fmt.Errorf("loose object %s: bad header %q", h, hdr)
	}
	t, err := plumbing.ParseObjectType(ts)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("loose object %s: %w", h, err)
	}
	return t, size, br, nil
}

// Size returns the size of the content of h from its headers alone: a pack entry's, the
// two sizes a delta's stream begins with (the base's and its result's), a loose object's
// header. Nothing past them is inflated, so a huge object can be refused before it is
// read.
func (r *Reader) Size(h plumbing.Hash) (int64, error) {
	p, i := r.db.find(h)
	if p == nil {
		for _, d := range r.db.loose {
			f, err := os.Open(loosePath(d, h))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return 0, err
			}
			defer f.Close()
			_, size, _, err := r.looseHeader(f, h)
			return size, err
		}
		return 0, fmt.Errorf("object %s: %w", h, plumbing.ErrObjectNotFound)
	}
	off, err := p.offset(i)
	if err != nil {
		return 0, err
	}
	e, err := r.entry(p, off)
	if err != nil {
		return 0, err
	}
	if e.typ != packOFSDelta && e.typ != packREFDelta {
		return e.size, nil
	}
	var src io.Reader = io.NewSectionReader(p.f, e.data, p.size-20-e.data)
	if p.data != nil {
		src = bytes.NewReader(p.data[e.data : p.size-20])
	}
	zr, err := r.inflater(src)
	if err != nil {
		return 0, fmt.Errorf("pack %s: delta at %d: %w", p.path, off, err)
	}
	// two varints of at most 10 bytes each
	var hdr [20]byte
	n, err := io.ReadFull(zr, hdr[:min(int64(len(hdr)), e.size)])
	if err != nil && err != io.ErrUnexpectedEOF {
		return 0, fmt.Errorf("pack %s: delta at %d: %w", p.path, off, err)
	}
	b := hdr[:n]
	var size uint64
	for range 2 {
		size = 0
		ok := false
		for shift := 0; shift < 64 && len(b) > 0; shift += 7 {
			c := b[0]
			b = b[1:]
			size |= uint64(c&0x7f) << shift
			if c&0x80 == 0 {
				ok = true
				break
			}
		}
		if !ok {
			return 0, fmt.Errorf("pack %s: delta at %d: bad header", p.path, off)
		}
	}
	if size > 1<<62 {
		return 0, fmt.Errorf("pack %s: delta at %d: bad header", p.path, off)
	}
	return int64(size), nil
}

// Stream opens the content of h for reading without holding it in memory when it is
// stored whole in a pack; otherwise it reads it all.
func (r *Reader) Stream(h plumbing.Hash) (plumbing.ObjectType, int64, io.Reader, error) {
	if p, i := r.db.find(h); p != nil {
		off, err := p.offset(i)
		if err != nil {
			return 0, 0, nil, err
		}
		e, err := r.entry(p, off)
		if err != nil {
			return 0, 0, nil, err
		}
		if e.typ != packOFSDelta && e.typ != packREFDelta {
			var src io.Reader = bufio.NewReaderSize(io.NewSectionReader(p.f, e.data, p.size-20-e.data), 64<<10)
			if p.data != nil {
				src = bytes.NewReader(p.data[e.data : p.size-20])
			}
			zr, err := r.inflater(src)
			if err != nil {
				return 0, 0, nil, fmt.Errorf("pack %s: object data at %d: %w", p.path, e.data, err)
			}
			return e.typ, e.size, &exactReader{r: zr, left: e.size, what: h}, nil
		}
	}
	t, data, err := r.Read(h)
	if err != nil {
		return 0, 0, nil, err
	}
	return t, int64(len(data)), bytes.NewReader(data), nil
}

// exactReader reads exactly left bytes and then checks that the stream ends there.
type exactReader struct {
	r    io.Reader
	left int64
	what plumbing.Hash
}

func (e *exactReader) Read(b []byte) (int, error) {
	if e.left == 0 {
		var one [1]byte
		if n, err := e.r.Read(one[:]); n != 0 || err != io.EOF {
			if err == nil || n != 0 {
				err = errors.New("more data than its header says")
			}
			return 0, fmt.Errorf("object %s: %w", e.what, err)
		}
		return 0, io.EOF
	}
	if int64(len(b)) > e.left {
		b = b[:e.left]
	}
	n, err := e.r.Read(b)
	e.left -= int64(n)
	if err == io.EOF && e.left > 0 {
		err = fmt.Errorf("object %s: %w", e.what, io.ErrUnexpectedEOF)
	} else if err == io.EOF {
		err = nil
	}
	return n, err
}

// rawObject reads the object h for copying into another pack: raw is what to append to
// that pack (fresh memory, or the mapped pack's: valid while the DB is open), data
// the content (valid until the next call on r), checked to hash to h. An object stored
// whole in a pack is copied as it is packed (its bytes checked against the index's CRC
// too), and so is a delta on an object of the other pack (see rawDelta); others (deltas,
// loose objects) are compressed again, whole.
func (r *Reader) rawObject(h plumbing.Hash) (t plumbing.ObjectType, data, raw []byte, err error) {
	p, i := r.db.find(h)
	if p == nil {
		t, data, err = r.readLoose(h)
	} else {
		var off int64
		if off, err = p.offset(i); err != nil {
			return 0, nil, nil, err
		}
		var e packEntry
		if e, err = r.entry(p, off); err != nil {
			return 0, nil, nil, err
		}
		if e.typ == packOFSDelta || e.typ == packREFDelta {
			if t, data, err = r.readAt(p, off, 0, false); err == nil {
				raw, err = r.rawDelta(p, i, e)
			}
		} else {
			t = e.typ
			var end int64
			if data, end, err = r.inflate(p, e.data, e.size, r.scratchFor(e.size)); err == nil {
				if p.data != nil {
					raw = p.data[off:end:end]
				} else {
					hl := int(e.data - off)
					raw = make([]byte, end-off)
					copy(raw, e.hdr[:hl])
					copy(raw[hl:], r.buf[:end-e.data])
				}
				if crc32.ChecksumIEEE(raw) != p.crc(i) {
					err = fmt.Errorf("pack %s: object %s does not match the CRC in its index", p.path, h)
				}
			}
		}
	}
	if err != nil {
		return 0, nil, nil, err
	}
	if got := plumbing.ComputeHash(t, data); got != h {
		return 0, nil, nil, fmt.Errorf("object %s is corrupt: its content hashes to %s", h, got)
	}
	if raw == nil {
		raw = r.deflate(t, data)
	}
	return t, data, raw, nil
}

// rawDelta returns the delta e (the object at index i of p, just applied by readAt) as a
// REF_DELTA entry for the pack that r.inPack names, its zlib stream copied as it is, when
// its base goes into that pack from the very entry the delta names; nil otherwise. Only
// mapped packs: the stream is read where it lies. A base in that pack from elsewhere (the
// same object in another source pack) could close a cycle of deltas.
func (r *Reader) rawDelta(p *packFile, i int, e packEntry) ([]byte, error) {
	if r.inPack == nil || p.data == nil {
		return nil, nil
	}
	base, ok := e.ref, true
	if e.typ == packOFSDelta {
		base, ok = p.hashAt(e.base)
	}
	if !ok || !r.inPack(base) {
		return nil, nil
	}
	if e.typ == packREFDelta {
		bp, bi := r.db.find(base)
		if bp != p {
			return nil, nil
		}
		if boff, err := p.offset(bi); err != nil || boff == e.off {
			return nil, nil
		}
	} else if bp, bi := r.db.find(base); bp != p {
		return nil, nil
	} else if boff, err := p.offset(bi); err != nil || boff != e.base {
		return nil, nil
	}
	packed := p.data[e.off:r.deltaEnd]
	if crc32.ChecksumIEEE(packed) != p.crc(i) {
		return nil, fmt.Errorf("pack %s: object at %d does not match the CRC in its index", p.path, e.off)
	}
	stream := p.data[e.data:r.deltaEnd]
	hdr := packHeader(packREFDelta, e.size)
	raw := make([]byte, 0, len(hdr)+20+len(stream))
	raw = append(append(append(raw, hdr...), base[:]...), stream...)
	return raw, nil
}

// deflate packs content whole: the pack header and a fast zlib stream.
func (r *Reader) deflate(t plumbing.ObjectType, data []byte) []byte {
	b := bytes.NewBuffer(make([]byte, 0, len(data)/2+64))
	b.Write(packHeader(t, int64(len(data))))
	if r.zw == nil {
		r.zw, _ = zlib.NewWriterLevel(b, zlib.BestSpeed)
	} else {
		r.zw.Reset(b)
	}
	r.zw.Write(data) // a bytes.Buffer does not fail
	r.zw.Close()
	return b.Bytes()
}

// packHeader encodes an object's type and size as a pack entry starts.
func packHeader(t plumbing.ObjectType, size int64) []byte {
	var hdr []byte
	c := byte(t)<<4 | byte(size&0x0f)
	for s := size >> 4; s > 0; s >>= 7 {
		hdr = append(hdr, c|0x80)
		c = byte(s & 0x7f)
	}
	return append(hdr, c)
}

var errBadDelta = errors.New("malformed delta")

// applyDelta applies a git delta to base; the result goes into dst when it has room.
func applyDelta(dst, base, delta []byte) ([]byte, error) {
	leb := func() (uint64, bool) {
		var v uint64
		for shift := 0; shift < 64; shift += 7 {
			if len(delta) == 0 {
				return 0, false
			}
			c := delta[0]
			delta = delta[1:]
			v |= uint64(c&0x7f) << shift
			if c&0x80 == 0 {
				return v, true
			}
		}
		return 0, false
	}
	srcSize, ok := leb()
	if !ok || srcSize != uint64(len(base)) {
		return nil, errBadDelta
	}
	size, ok := leb()
	if !ok || size > 1<<40 {
		return nil, errBadDelta
	}
	out := dst[:0]
	if uint64(cap(dst)) < size {
		out = make([]byte, 0, size)
	}
	for len(delta) > 0 {
		cmd := delta[0]
		delta = delta[1:]
		switch {
		case cmd&0x80 != 0: // copy from the base
			var off, n uint64
			for i := 0; i < 7; i++ {
				if cmd&(1<<i) == 0 {
					continue
				}
				if len(delta) == 0 {
					return nil, errBadDelta
				}
				if i < 4 {
					off |= uint64(delta[0]) << (8 * i)
				} else {
					n |= uint64(delta[0]) << (8 * (i - 4))
				}
				delta = delta[1:]
			}
			if n == 0 {
				n = 0x10000
			}
			if off+n > uint64(len(base)) || uint64(len(out))+n > size {
				return nil, errBadDelta
			}
			out = append(out, base[off:off+n]...)
		case cmd != 0: // insert cmd bytes from the delta
			n := int(cmd)
			if len(delta) < n || uint64(len(out)+n) > size {
				return nil, errBadDelta
			}
			out = append(out, delta[:n]...)
			delta = delta[n:]
		default:
			return nil, errBadDelta
		}
	}
	if uint64(len(out)) != size {
		return nil, errBadDelta
	}
	return out, nil
}

// baseCache keeps resolved delta bases, so that the deltas of one chain are not resolved
// again for each object built on it.
type baseCache struct {
	mu    sync.Mutex
	max   int
	used  int
	m     map[baseKey]baseEntry
	order []baseKey
}

type baseKey struct {
	p   *packFile
	off int64
}

type baseEntry struct {
	typ  plumbing.ObjectType
	data []byte
}

func newBaseCache(max int) *baseCache {
	return &baseCache{max: max, m: make(map[baseKey]baseEntry)}
}

func (c *baseCache) get(p *packFile, off int64) (baseEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[baseKey{p, off}]
	return e, ok
}

func (c *baseCache) put(p *packFile, off int64, t plumbing.ObjectType, data []byte) {
	if len(data) > c.max/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := baseKey{p, off}
	if _, ok := c.m[k]; ok {
		return
	}
	for c.used+len(data) > c.max && len(c.order) > 0 {
		old := c.order[0]
		c.order = c.order[1:]
		c.used -= len(c.m[old].data)
		delete(c.m, old)
	}
	c.m[k] = baseEntry{typ: t, data: data}
	c.order = append(c.order, k)
	c.used += len(data)
}

// WholeSize returns the size of h when it is stored whole in a pack.
func (r *Reader) WholeSize(h plumbing.Hash) (int64, bool) {
	p, i := r.db.find(h)
	if p == nil {
		return 0, false
	}
	off, err := p.offset(i)
	if err != nil {
		return 0, false
	}
	e, err := r.entry(p, off)
	if err != nil || e.typ == packOFSDelta || e.typ == packREFDelta {
		return 0, false
	}
	return e.size, true
}

// TreeEntry is one entry of a tree object.
type TreeEntry struct {
	Name string
	Mode filemode.FileMode
	Hash plumbing.Hash
}

// ParseTree parses a tree object's content.
func ParseTree(data []byte) ([]TreeEntry, error) {
	var out []TreeEntry
	for len(data) > 0 {
		sp := bytes.IndexByte(data, ' ')
		if sp < 0 {
			return nil, errors.New("malformed tree")
		}
		mode, err := filemode.New(string(data[:sp]))
		if err != nil {
			return nil, fmt.Errorf("malformed tree: %w", err)
		}
		data = data[sp+1:]
		nul := bytes.IndexByte(data, 0)
		if nul < 0 || len(data) < nul+1+20 {
			return nil, errors.New("malformed tree")
		}
		e := TreeEntry{Name: string(data[:nul]), Mode: mode}
		copy(e.Hash[:], data[nul+1:])
		out = append(out, e)
		data = data[nul+1+20:]
	}
	return out, nil
}

// CommitTree returns the tree a commit's content names.
func CommitTree(data []byte) (plumbing.Hash, error) {
	return headerHash(data, "tree ")
}

// TagTarget returns the object an annotated tag's content names.
func TagTarget(data []byte) (plumbing.Hash, error) {
	return headerHash(data, "object ")
}

// headerHash reads the id on the first line of a commit or tag, which git writes first.
func headerHash(data []byte, key string) (plumbing.Hash, error) {
	l, _, ok := bytes.Cut(data, []byte{'\n'})
	if !ok || !bytes.HasPrefix(l, []byte(key)) || len(l) != len(key)+40 || !isHex(l[len(key):]) {
		return plumbing.ZeroHash, fmt.Errorf("malformed object: no %q line first", strings.TrimSpace(key))
	}
	return plumbing.NewHash(string(l[len(key):])), nil
}

func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}
