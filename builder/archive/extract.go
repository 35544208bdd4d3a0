package archive

import (
	"github.com/epbuild/epbuild/builder/archive/seekable"

	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Defaults for ExtractOptions limits: far above any real source archive or install (a CUDA
// toolkit unpacks to a few GiB and tens of thousands of files), far below a bomb.
const (
	DefaultMaxBytes   int64 = 16 << 30
	DefaultMaxEntries       = 1 << 20
)

// copyBufSize is the chunk size for file data; big chunks keep syscalls and
// decompressor calls off the profile.
const copyBufSize = 1 << 20

// ExtractOptions tunes ExtractFile. The zero value suits pinned archives.
type ExtractOptions struct {
	// Format overrides the format read from the file name.
	Format Format
	// StripComponents drops that many leading path components from every entry, as
	// tar --strip-components does; all entries must share them (one top directory).
	StripComponents int
	// MaxBytes caps the total size of regular file data; 0 means DefaultMaxBytes.
	MaxBytes int64
	// MaxEntries caps the number of entries read; 0 means DefaultMaxEntries.
	MaxEntries int
	// Hash computes every regular file's sha256 as its data streams by, and lists the
	// tree extracted in the report's Tree: a check of the tree against a manifest needs
	// no second read of what was written.
	Hash bool
	// Member, when set, hands one regular file's bytes to a function in the same pass
	// (tar formats only).
	Member *MemberHook
}

// ExtractReport counts what ExtractFile did.
type ExtractReport struct {
	Entries   int   // entries read from the archive, skipped ones included
	Bytes     int64 // regular file data written
	Files     int
	Dirs      int // directories created, implicit parents included
	Symlinks  int
	Hardlinks int
	// Tree is what the destination holds (with Hash, and always from Scan), sorted by
	// path: each entry's type and the mode extraction gave it, each regular file's size
	// and sha256 (a hard link is the file it links to), each symlink's target.
	Tree []Entry
}

const (
	fixUnsafe      = "the archive is unsafe; do not use it"
	fixCorrupt     = "the archive is truncated or damaged; fetch it again and check its sha256"
	fixLimit       = "raise the limit only if the archive is trusted"
	fixUnsupported = "such entries have no place in a source tree or an install; repack without them"
	fixStrip       = "extract without StripComponents, or with fewer"
)

// ExtractFile unpacks archivePath into dest, which must not exist yet. The tree is built in
// a temporary sibling of dest and renamed into place only when the whole archive was read
// and checked; on any error that sibling is removed and dest stays absent.
//
// Modes keep the owner's and the exec bits (setuid, setgid, sticky and group/other write are
// dropped; the owner always gets write so later stages can patch the tree); mtimes are kept.
func ExtractFile(ctx context.Context, archivePath, dest string, opts ExtractOptions) (*ExtractReport, error) {
	x, err := newExtractor(ctx, archivePath, opts)
	if err != nil {
		return nil, err
	}
	name := x.archive

	dest = filepath.Clean(dest)
	if _, err := os.Lstat(dest); err == nil {
		return nil, fmt.Errorf("extract %s: destination %s already exists; remove it or choose another", name, dest)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("extract %s: check destination: %w", name, err)
	}
	parent := filepath.Dir(dest)
	if st, err := os.Stat(parent); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("extract %s: the parent of destination %s is not a directory; create it first", name, dest)
	}
	tmp, err := os.MkdirTemp(parent, "."+filepath.Base(dest)+".partial-")
	if err != nil {
		return nil, fmt.Errorf("extract %s: create temporary directory next to %s: %w", name, dest, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(tmp)
		}
	}()
	root, err := os.OpenRoot(tmp)
	if err != nil {
		return nil, fmt.Errorf("extract %s: %w", name, err)
	}
	defer root.Close()

	x.root = root
	x.tree = tree{}
	x.dirs = map[string]dirMeta{}
	if x.opts.Format == FormatZip {
		err = x.zipFile(archivePath)
	} else {
		err = x.tarFile(archivePath)
	}
	// whatever happened, no writer writes into tmp once this returns
	if werr := x.closeWriters(); err == nil {
		err = werr
	}
	if err == nil {
		err = x.finish()
	}
	if err != nil {
		return nil, err
	}
	if x.opts.Hash {
		x.rep.Tree = x.listing()
	}
	if err := root.Close(); err != nil {
		return nil, fmt.Errorf("extract %s: %w", name, err)
	}
	// MkdirTemp made it 0700; the destination is an ordinary directory.
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("extract %s: %w", name, err)
	}
	if err := renameNoReplace(tmp, dest); err != nil {
		return nil, fmt.Errorf("extract %s: move the extracted tree to %s: %w", name, dest, err)
	}
	done = true
	rep := x.rep
	return &rep, nil
}

// newExtractor checks the options and fills in the defaults.
func newExtractor(ctx context.Context, archivePath string, opts ExtractOptions) (*extractor, error) {
	name := filepath.Base(archivePath)
	x := &extractor{ctx: ctx, archive: name, opts: opts}
	if opts.Format == "" {
		f, err := DetectFormat(name)
		if err != nil {
			return nil, fmt.Errorf("extract %s: %w", name, err)
		}
		x.opts.Format = f
	} else if !opts.Format.valid() {
		return nil, fmt.Errorf("extract %s: unknown format %q", name, opts.Format)
	}
	if opts.StripComponents < 0 {
		return nil, fmt.Errorf("extract %s: StripComponents is %d; it must be 0 or more", name, opts.StripComponents)
	}
	if x.opts.MaxBytes <= 0 {
		x.opts.MaxBytes = DefaultMaxBytes
	}
	if x.opts.MaxEntries <= 0 {
		x.opts.MaxEntries = DefaultMaxEntries
	}
	if x.opts.Member != nil && x.opts.Format == FormatZip {
		return nil, fmt.Errorf("extract %s: a member hook reads tar archives only", name)
	}
	return x, nil
}

// ReadMember returns the regular file member (a clean slash path; StripComponents does
// not apply) of a tar archive, writing nothing: install reads an artifact's manifest
// this way before it decides how much to extract. The entries before the member count
// against opts.MaxBytes and MaxEntries; maxSize bounds the member itself. A missing
// member is an fs.ErrNotExist error.
func ReadMember(ctx context.Context, archivePath, member string, maxSize int64, opts ExtractOptions) ([]byte, error) {
	x, err := newExtractor(ctx, archivePath, opts)
	if err != nil {
		return nil, err
	}
	if x.opts.Format == FormatZip {
		return nil, fmt.Errorf("extract %s: ReadMember reads tar archives only", x.archive)
	}
	f, err := os.Open(archivePath)
	if err != nil {
		return nil, x.ioErr("", err)
	}
	defer f.Close()
	return x.readMember(f, member, maxSize)
}

// readMember is ReadMember of the open archive f: of a seekable one (artifact format 2)
// it decompresses the frames up to the member's end only.
func (x *extractor) readMember(f io.Reader, member string, maxSize int64) ([]byte, error) {
	r, closeFn, err := x.decompressor(f)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	tr := tar.NewReader(r)
	for {
		if err := x.ctx.Err(); err != nil {
			return nil, x.ioErr("", err)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("extract %s: no entry %s: %w", x.archive, member, fs.ErrNotExist)
		}
		if err != nil && !(errors.Is(err, tar.ErrInsecurePath) && hdr != nil) {
			return nil, x.errf("", ErrCorrupt, fixCorrupt, "read a tar header while looking for %s: %w", member, err)
		}
		if err := x.count(hdr.Name); err != nil {
			return nil, err
		}
		if rel, err := cleanName(hdr.Name); err == nil && rel == member {
			if hdr.Typeflag != tar.TypeReg {
				return nil, x.errf(hdr.Name, ErrLayout, "", "is not a regular file")
			}
			if hdr.Size < 0 || hdr.Size > maxSize {
				return nil, x.errf(hdr.Name, ErrLimit, fixLimit, "%d bytes, more than the %d allowed", hdr.Size, maxSize)
			}
			// grown as the data arrives: a header may claim more than the stream holds
			var b bytes.Buffer
			if _, err := io.CopyN(&b, tr, hdr.Size); err != nil {
				return nil, x.errf(hdr.Name, ErrCorrupt, fixCorrupt, "read data: %w", err)
			}
			return b.Bytes(), nil
		}
		// skipped, but decompressed all the same: it counts
		if hdr.Size > x.opts.MaxBytes-x.rep.Bytes {
			return nil, x.errf(hdr.Name, ErrLimit, fixLimit, "%d bytes before %s would take the total past MaxBytes (%d)", hdr.Size, member, x.opts.MaxBytes)
		}
		x.rep.Bytes += max(hdr.Size, 0)
	}
}

type dirMeta struct {
	mode  fs.FileMode
	mtime time.Time
}

type hdrKind uint8

const (
	hdrFile hdrKind = iota + 1
	hdrDir
	hdrSymlink
	hdrHardlink
)

// header is the part of a tar or zip header extraction acts on.
type header struct {
	name  string // as stored, for messages
	kind  hdrKind
	perm  fs.FileMode
	size  int64
	mtime time.Time
	link  string // symlink target or hard link source name
}

type extractor struct {
	ctx     context.Context
	archive string
	opts    ExtractOptions
	root    *os.Root // nil: a scan, which writes nothing and keeps only the tree
	tree    tree
	dirs    map[string]dirMeta // every directory, with the mode and mtime to set at the end
	prefix  []string           // what is known so far of the components StripComponents drops
	lastDir string             // parent most recently checked, to skip re-checking siblings
	buf     []byte
	rep     ExtractReport
	sum     hash.Hash // with Hash: reset for each regular file
	member  memberState
	writers *fileWriters // small files' writing, with root; nil until the first
}

// settle waits for the files handed to the writers: before a name is touched on disk
// again and before the directories get their modes and times.
func (x *extractor) settle() error {
	if x.writers == nil {
		return nil
	}
	return x.writers.settle()
}

// closeWriters settles and stops the writers; nothing is written after it returns.
func (x *extractor) closeWriters() error {
	if x.writers == nil {
		return nil
	}
	w := x.writers
	x.writers = nil
	return w.close()
}

func (x *extractor) errf(entry string, kind error, fix, format string, args ...any) error {
	return &ExtractError{Archive: x.archive, Entry: entry, Kind: kind, Err: fmt.Errorf(format, args...), Fix: fix}
}

// ioErr wraps a failure of the destination file system (or a cancellation): not the
// archive's fault, so no class and no fix.
func (x *extractor) ioErr(entry string, err error) error {
	return &ExtractError{Archive: x.archive, Entry: entry, Err: err}
}

func (x *extractor) tarFile(archivePath string) error {
	f, err := os.Open(archivePath)
	if err != nil {
		return x.ioErr("", err)
	}
	defer f.Close()
	return x.tarReader(f)
}

// tarReader extracts (or scans) the compressed tar stream f.
func (x *extractor) tarReader(f io.Reader) error {
	r, closeFn, err := x.decompressor(f)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := x.tarStream(r); err != nil {
		return err
	}
	if x.opts.Format == FormatTar {
		return nil
	}
	// Read the compressed stream to its end: gzip and xz check their CRCs only there, and a
	// bomb of trailing zeros is stopped by the byte budget.
	budget := x.opts.MaxBytes - x.rep.Bytes
	n, err := io.CopyN(io.Discard, r, budget+1)
	switch {
	case err == io.EOF:
		return nil
	case err != nil:
		return x.errf("", ErrCorrupt, fixCorrupt, "check the compressed stream's integrity (read to its end): %w", err)
	case n > budget:
		return x.errf("", ErrLimit, fixLimit, "trailing data after the end of the tar archive exceeds MaxBytes (%d)", x.opts.MaxBytes)
	}
	return nil
}

// seekableFile is an archive that is a file, not a stream: a seek table at its end can
// be read before its frames.
type seekableFile interface {
	io.Reader
	io.ReaderAt
	Stat() (fs.FileInfo, error)
}

// decompressor wraps f in the archive's decompressor. A tar.zst file with a seek table
// (artifact format 2) is decompressed frame by frame on every core; one without (format
// 1, any other zstd archive) or a stream is read by one streaming decoder, which reads
// format 2 as well (it skips the seek table).
func (x *extractor) decompressor(f io.Reader) (io.Reader, func(), error) {
	if sf, ok := f.(seekableFile); ok && x.opts.Format == FormatTarZst {
		st, err := sf.Stat()
		if err != nil {
			return nil, nil, x.ioErr("", err)
		}
		frames, err := seekable.ReadTable(sf, st.Size())
		if err != nil {
			return nil, nil, x.ioErr("", fmt.Errorf("read the seek table: %w", err))
		}
		if frames != nil {
			fr, err := seekable.NewReader(x.ctx, sf, frames, 0)
			if err != nil {
				return nil, nil, x.errf("", ErrCorrupt, fixCorrupt, "start zstd decoder: %w", err)
			}
			return fr, fr.Close, nil
		}
	}
	br := bufio.NewReaderSize(f, 256<<10)
	switch x.opts.Format {
	case FormatTarGz:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, x.errf("", ErrCorrupt, fixCorrupt, "read gzip header: %w", err)
		}
		return zr, func() { zr.Close() }, nil
	case FormatTarXz:
		zr, err := xz.NewReader(br)
		if err != nil {
			return nil, nil, x.errf("", ErrCorrupt, fixCorrupt, "read xz header: %w", err)
		}
		return zr, func() {}, nil
	case FormatTarZst:
		zr, err := zstd.NewReader(br, zstd.WithDecoderMaxWindow(seekable.MaxWindow))
		if err != nil {
			return nil, nil, x.errf("", ErrCorrupt, fixCorrupt, "start zstd decoder: %w", err)
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

// countReader counts bytes handed to the tar reader, to tell a proper end-of-archive marker
// from a stream that simply stops.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (x *extractor) tarStream(r io.Reader) error {
	cr := &countReader{r: r}
	tr := tar.NewReader(cr)
	last := ""
	var afterData int64
	for {
		if err := x.ctx.Err(); err != nil {
			return x.ioErr("", err)
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			// archive/tar returns EOF at a clean block boundary even without the two zero
			// blocks that end an archive; only 1024 bytes read since the last entry's data
			// (its padding included) prove the marker was there.
			if cr.n-afterData < 1024 {
				if last == "" {
					return x.errf("", ErrCorrupt, fixCorrupt, "empty or truncated tar stream: no end-of-archive marker")
				}
				return x.errf("", ErrCorrupt, fixCorrupt, "tar stream ends after entry %q without the end-of-archive marker", last)
			}
			return nil
		}
		// With GODEBUG=tarinsecurepath=0 the reader flags unsafe names itself; handle() checks
		// them with a better message either way.
		if err != nil && !(errors.Is(err, tar.ErrInsecurePath) && hdr != nil) {
			if last == "" {
				return x.errf("", ErrCorrupt, fixCorrupt, "read the first tar header: %w", err)
			}
			return x.errf("", ErrCorrupt, fixCorrupt, "read the tar header after entry %q: %w", last, err)
		}
		last = hdr.Name
		h := header{
			name:  hdr.Name,
			perm:  fs.FileMode(hdr.Mode & 0o777),
			size:  hdr.Size,
			mtime: hdr.ModTime,
			link:  hdr.Linkname,
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeGNUSparse:
			h.kind = hdrFile
		case tar.TypeDir:
			h.kind = hdrDir
		case tar.TypeSymlink:
			h.kind = hdrSymlink
		case tar.TypeLink:
			h.kind = hdrHardlink
		case tar.TypeXGlobalHeader:
			// Metadata only (git archive stores the commit id here); counted against the limit.
			if err := x.count(hdr.Name); err != nil {
				return err
			}
			afterData = cr.n
			continue
		case tar.TypeChar, tar.TypeBlock:
			return x.errf(hdr.Name, ErrUnsupported, fixUnsupported, "device node")
		case tar.TypeFifo:
			return x.errf(hdr.Name, ErrUnsupported, fixUnsupported, "named pipe (fifo)")
		default:
			return x.errf(hdr.Name, ErrUnsupported, fixUnsupported, "tar entry type %q", hdr.Typeflag)
		}
		if err := x.handle(&h, tr); err != nil {
			return err
		}
		afterData = cr.n
	}
}

func (x *extractor) zipFile(archivePath string) error {
	zr, err := zip.OpenReader(archivePath)
	if err != nil && !(errors.Is(err, zip.ErrInsecurePath) && zr != nil) {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return x.ioErr("", err)
		}
		return x.errf("", ErrCorrupt, fixCorrupt, "read the zip directory: %w", err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if err := x.ctx.Err(); err != nil {
			return x.ioErr("", err)
		}
		mode := f.Mode()
		h := header{name: f.Name, perm: mode.Perm(), mtime: f.Modified}
		if f.UncompressedSize64 > 1<<62 {
			return x.errf(f.Name, ErrCorrupt, fixCorrupt, "size %d is impossible", f.UncompressedSize64)
		}
		h.size = int64(f.UncompressedSize64)
		switch {
		case mode.IsDir():
			h.kind = hdrDir
		case mode&fs.ModeSymlink != 0:
			h.kind = hdrSymlink
		case mode.IsRegular():
			h.kind = hdrFile
		default:
			return x.errf(f.Name, ErrUnsupported, fixUnsupported, "%s", typeName(mode.Type()))
		}
		if err := x.zipEntry(f, &h); err != nil {
			return err
		}
	}
	return nil
}

func (x *extractor) zipEntry(f *zip.File, h *header) error {
	if h.kind == hdrDir {
		return x.handle(h, nil)
	}
	rc, err := f.Open()
	if err != nil {
		if errors.Is(err, zip.ErrAlgorithm) {
			return x.errf(f.Name, ErrUnsupported, "repack the zip with deflate or store", "compression method %d", f.Method)
		}
		return x.errf(f.Name, ErrCorrupt, fixCorrupt, "open entry: %w", err)
	}
	defer rc.Close()
	if h.kind == hdrSymlink {
		// A zip symlink stores its target as the entry's data.
		const maxTarget = 4096
		b, err := io.ReadAll(io.LimitReader(rc, maxTarget+1))
		if err != nil {
			return x.errf(f.Name, ErrCorrupt, fixCorrupt, "read symlink target: %w", err)
		}
		if len(b) > maxTarget {
			return x.errf(f.Name, ErrUnsafe, fixUnsafe, "symlink target longer than %d bytes", maxTarget)
		}
		h.link = string(b)
		h.size = 0
		return x.handle(h, nil)
	}
	return x.handle(h, rc)
}

func (x *extractor) count(name string) error {
	x.rep.Entries++
	if x.rep.Entries > x.opts.MaxEntries {
		return x.errf(name, ErrLimit, fixLimit, "more than MaxEntries (%d) entries", x.opts.MaxEntries)
	}
	return nil
}

// handle places one entry; data is the entry's content for regular files.
func (x *extractor) handle(h *header, data io.Reader) error {
	if err := x.count(h.name); err != nil {
		return err
	}
	rel, err := cleanName(h.name)
	if err != nil {
		return x.errf(h.name, ErrUnsafe, fixUnsafe, "%w", err)
	}
	if err := x.memberEntry(h, rel); err != nil {
		return err
	}
	rel, skip, err := x.strip(h, rel)
	if err != nil || skip {
		return err
	}
	if rel == "" {
		if h.kind != hdrDir {
			return x.errf(h.name, ErrUnsafe, fixUnsafe, "names the destination itself but is not a directory")
		}
		return nil
	}
	switch h.kind {
	case hdrDir:
		return x.mkdir(h, rel)
	case hdrFile:
		return x.writeFile(h, rel, data)
	case hdrSymlink:
		return x.symlink(h, rel)
	default:
		return x.hardlink(h, rel)
	}
}

// strip drops StripComponents leading components. Entries at or above the dropped level
// are skipped; they must be directories, and all entries must agree on the dropped names.
func (x *extractor) strip(h *header, rel string) (string, bool, error) {
	n := x.opts.StripComponents
	if n == 0 {
		return rel, false, nil
	}
	parts := splitPath(rel)
	if err := x.agree(h, parts); err != nil {
		return "", false, err
	}
	if len(parts) <= n {
		if h.kind != hdrDir {
			return "", false, x.errf(h.name, ErrLayout, fixStrip,
				"is at a level StripComponents=%d drops, and only directories may be there", n)
		}
		return "", true, nil
	}
	return strings.Join(parts[n:], "/"), false, nil
}

func (x *extractor) agree(h *header, parts []string) error {
	n := x.opts.StripComponents
	k := min(len(parts), n)
	for i := 0; i < k && i < len(x.prefix); i++ {
		if parts[i] != x.prefix[i] {
			return x.errf(h.name, ErrLayout, fixStrip,
				"does not share the top directory %q that StripComponents=%d drops", strings.Join(x.prefix, "/"), n)
		}
	}
	if k > len(x.prefix) {
		x.prefix = append(x.prefix, parts[len(x.prefix):k]...)
	}
	return nil
}

// prepare makes rel's parents exist as real directories and clears an earlier non-directory
// entry of the same name, so that nothing is ever written through a link. It reports whether
// rel already exists as a directory.
func (x *extractor) prepare(h *header, rel string) (bool, error) {
	if dir := path.Dir(rel); dir != "." && dir != x.lastDir {
		parts := strings.Split(dir, "/")
		for i := range parts {
			p := strings.Join(parts[:i+1], "/")
			n, ok := x.tree[p]
			if !ok {
				if err := x.mkdirAt(p); err != nil {
					return false, x.ioErr(h.name, err)
				}
				x.tree[p] = node{kind: nodeDir}
				x.dirs[p] = dirMeta{mode: 0o755}
				x.rep.Dirs++
				continue
			}
			if n.kind != nodeDir {
				what := "a file"
				if n.kind == nodeSymlink {
					what = "a symlink"
				}
				return false, x.errf(h.name, ErrUnsafe, fixUnsafe,
					"parent %q is %s extracted earlier; refusing to write through it", p, what)
			}
		}
		x.lastDir = dir
	}
	n, ok := x.tree[rel]
	if !ok {
		return false, nil
	}
	if n.kind == nodeDir {
		if h.kind == hdrDir {
			return true, nil
		}
		return false, x.errf(h.name, ErrUnsafe, fixUnsafe, "would replace a directory extracted earlier")
	}
	// A later entry of the same name wins, as with tar; unlink first so a symlink is
	// replaced, not followed.
	if x.root != nil {
		if err := x.settle(); err != nil {
			return false, err
		}
		if err := x.root.Remove(rel); err != nil {
			return false, x.ioErr(h.name, err)
		}
	}
	delete(x.tree, rel)
	return false, nil
}

func (x *extractor) mkdir(h *header, rel string) error {
	exists, err := x.prepare(h, rel)
	if err != nil {
		return err
	}
	if !exists {
		if err := x.mkdirAt(rel); err != nil {
			return x.ioErr(h.name, err)
		}
		x.tree[rel] = node{kind: nodeDir}
		x.rep.Dirs++
	}
	// Applied at the end: a read-only directory must still take its children, and writing
	// children changes its mtime.
	x.dirs[rel] = dirMeta{mode: (h.perm & 0o755) | 0o700, mtime: h.mtime}
	return nil
}

func (x *extractor) writeFile(h *header, rel string, data io.Reader) error {
	if h.size < 0 {
		return x.errf(h.name, ErrCorrupt, fixCorrupt, "negative size %d", h.size)
	}
	if h.size > x.opts.MaxBytes-x.rep.Bytes {
		return x.errf(h.name, ErrLimit, fixLimit, "%d bytes would take the total past MaxBytes (%d)", h.size, x.opts.MaxBytes)
	}
	if _, err := x.prepare(h, rel); err != nil {
		return err
	}
	mode := (h.perm & 0o755) | 0o600
	if x.root != nil && h.size <= asyncMax {
		return x.writeFileAsync(h, rel, mode, data)
	}
	var (
		w io.Writer = io.Discard
		f *os.File
	)
	if x.root != nil {
		// O_EXCL: prepare cleared the name, so anything there now is not ours to write into.
		var err error
		if f, err = x.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return x.ioErr(h.name, err)
		}
		w = f
	}
	x.tree[rel] = node{kind: nodeFile, mode: mode}
	n, rerr, werr := x.copyEntry(w, h, data)
	if f != nil {
		if werr == nil {
			werr = f.Chmod(mode)
		}
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
	}
	switch {
	case werr != nil:
		return x.ioErr(h.name, werr)
	case rerr != nil:
		return x.errf(h.name, ErrCorrupt, fixCorrupt, "read data at byte %d of %d: %w", n, h.size, rerr)
	case n != h.size:
		return x.errf(h.name, ErrCorrupt, fixCorrupt, "data is %d bytes, the header says %d", n, h.size)
	}
	if x.opts.Hash {
		x.tree[rel] = node{kind: nodeFile, mode: mode, size: n, sum: hex.EncodeToString(x.sum.Sum(nil))}
	}
	if x.root != nil && !h.mtime.IsZero() {
		if err := x.root.Chtimes(rel, h.mtime, h.mtime); err != nil {
			return x.ioErr(h.name, err)
		}
	}
	x.rep.Files++
	x.rep.Bytes += n
	return x.memberRead(h)
}

// writeFileAsync is writeFile of a small file: its bytes are read (and hashed) here,
// then created and written on disk by the writers.
func (x *extractor) writeFileAsync(h *header, rel string, mode fs.FileMode, data io.Reader) error {
	if x.writers == nil {
		x.writers = newFileWriters(x.root)
	}
	buf := &appendWriter{b: x.writers.buffer(int(h.size) + 1)}
	x.tree[rel] = node{kind: nodeFile, mode: mode}
	n, rerr, werr := x.copyEntry(buf, h, data)
	job := fileJob{name: h.name, rel: rel, mode: mode, mtime: h.mtime, data: buf.b, fail: x.ioErr}
	switch {
	case werr != nil:
		rerr = x.ioErr(h.name, werr) // a cancellation: copyData checks ctx
	case rerr != nil:
		rerr = x.errf(h.name, ErrCorrupt, fixCorrupt, "read data at byte %d of %d: %w", n, h.size, rerr)
	case n != h.size:
		rerr = x.errf(h.name, ErrCorrupt, fixCorrupt, "data is %d bytes, the header says %d", n, h.size)
	}
	if rerr != nil {
		x.writers.free <- buf.b[:0]
		return rerr
	}
	if err := x.writers.submit(job); err != nil {
		return err
	}
	if x.opts.Hash {
		x.tree[rel] = node{kind: nodeFile, mode: mode, size: n, sum: hex.EncodeToString(x.sum.Sum(nil))}
	}
	x.rep.Files++
	x.rep.Bytes += n
	return x.memberRead(h)
}

// copyEntry copies an entry's data (one byte past its header's size, to see it is no
// longer) to w, through the hash and the member being read where they are wanted; the
// two writes of a file, on disk or through the writers, share it.
func (x *extractor) copyEntry(w io.Writer, h *header, data io.Reader) (n int64, rerr, werr error) {
	if x.opts.Hash {
		if x.sum == nil {
			x.sum = sha256.New()
		}
		x.sum.Reset()
		w = teeWriter(w, x.sum)
	}
	if x.member.reading {
		w = teeWriter(w, &x.member.data)
	}
	// Grow the buffer to the largest file seen, up to copyBufSize: small archives (and the
	// fuzzer) should not pay for zeroing a megabyte.
	if want := min(copyBufSize, max(h.size+1, 32<<10)); int64(len(x.buf)) < want {
		x.buf = make([]byte, want)
	}
	return x.copyData(w, io.LimitReader(data, h.size+1))
}

// appendWriter appends what it is given to b.
type appendWriter struct{ b []byte }

func (a *appendWriter) Write(p []byte) (int, error) {
	a.b = append(a.b, p...)
	return len(p), nil
}

// copyData copies r to w through the extractor's buffer, checking for cancellation between
// chunks; it tells read failures (the archive's fault) from write failures (ours).
func (x *extractor) copyData(w io.Writer, r io.Reader) (n int64, readErr, writeErr error) {
	idle := 0
	for {
		if err := x.ctx.Err(); err != nil {
			return n, nil, err
		}
		m, err := r.Read(x.buf)
		if m == 0 && err == nil {
			// A reader stuck at (0, nil) would spin forever; io.Copy gives up the same way.
			if idle++; idle > 100 {
				return n, io.ErrNoProgress, nil
			}
			continue
		}
		idle = 0
		if m > 0 {
			wm, werr := w.Write(x.buf[:m])
			n += int64(wm)
			if werr != nil {
				return n, nil, werr
			}
		}
		if err == io.EOF {
			return n, nil, nil
		}
		if err != nil {
			return n, err, nil
		}
	}
}

func (x *extractor) symlink(h *header, rel string) error {
	if err := checkLinkTarget(rel, h.link); err != nil {
		return x.errf(h.name, ErrUnsafe, fixUnsafe, "%w", err)
	}
	if _, err := x.prepare(h, rel); err != nil {
		return err
	}
	x.tree[rel] = node{kind: nodeSymlink, target: h.link}
	if x.root == nil {
		x.rep.Symlinks++
		return nil
	}
	if err := x.root.Symlink(h.link, rel); err != nil {
		return x.ioErr(h.name, err)
	}
	if !h.mtime.IsZero() {
		if err := lchtimes(x.root, rel, h.mtime); err != nil {
			return x.ioErr(h.name, err)
		}
	}
	x.rep.Symlinks++
	return nil
}

func (x *extractor) hardlink(h *header, rel string) error {
	target, err := cleanName(h.link)
	if err == nil && x.opts.StripComponents > 0 {
		parts := splitPath(target)
		if len(parts) <= x.opts.StripComponents || !slices.Equal(parts[:x.opts.StripComponents], x.prefix) {
			err = errors.New("outside the part of the archive being extracted")
		} else {
			target = strings.Join(parts[x.opts.StripComponents:], "/")
		}
	}
	if err != nil {
		return x.errf(h.name, ErrUnsafe, fixUnsafe, "hard link target %q: %w", h.link, err)
	}
	if n, ok := x.tree[target]; !ok || n.kind != nodeFile {
		return x.errf(h.name, ErrUnsafe, fixUnsafe, "hard link target %q is not a regular file extracted earlier", h.link)
	}
	if target == rel {
		return x.errf(h.name, ErrUnsafe, fixUnsafe, "hard link to itself")
	}
	if _, err := x.prepare(h, rel); err != nil {
		return err
	}
	if x.root != nil {
		if err := x.settle(); err != nil {
			return err
		}
		if err := x.root.Link(target, rel); err != nil {
			return x.ioErr(h.name, err)
		}
	}
	// the same file: its mode, size and hash
	x.tree[rel] = x.tree[target]
	x.rep.Hardlinks++
	return nil
}

// finish checks every symlink against the final tree (a later link can change where an
// earlier one leads) and then sets directory modes and mtimes, deepest first.
func (x *extractor) finish() error {
	links := make([]string, 0)
	for p, n := range x.tree {
		if n.kind == nodeSymlink {
			links = append(links, p)
		}
	}
	slices.Sort(links)
	for _, p := range links {
		if x.tree.linkEscapes(p, x.tree[p].target) {
			return x.errf(p, ErrUnsafe, fixUnsafe,
				"symlink target %q leads outside the destination through other symlinks", x.tree[p].target)
		}
	}
	if x.root == nil {
		return nil
	}
	if err := x.settle(); err != nil {
		return err
	}
	dirs := make([]string, 0, len(x.dirs))
	for p := range x.dirs {
		dirs = append(dirs, p)
	}
	// Reverse byte order puts every child before its parent.
	slices.Sort(dirs)
	slices.Reverse(dirs)
	for _, p := range dirs {
		m := x.dirs[p]
		if err := x.root.Chmod(p, m.mode); err != nil {
			return x.ioErr(p, err)
		}
		if !m.mtime.IsZero() {
			if err := x.root.Chtimes(p, m.mtime, m.mtime); err != nil {
				return x.ioErr(p, err)
			}
		}
	}
	return nil
}

// renameIfAbsent is the portable fallback for a no-replace rename: it leaves a small race
// window, acceptable where the kernel offers nothing better.
func renameIfAbsent(oldpath, newpath string) error {
	if _, err := os.Lstat(newpath); err == nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: fs.ErrExist}
	}
	return os.Rename(oldpath, newpath)
}
