package archive

import (
	"archive/tar"
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
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// File is a generated file that Pack adds to the tree (manifest.json, env.sh).
type File struct {
	Name string      // relative slash path inside the tree (under Prefix)
	Mode fs.FileMode // only the exec bits matter: any gives 0755, none 0644
	Data []byte
}

// PackOptions tunes Pack. Every field is part of the output's identity: the same tree and
// the same options give the same bytes.
type PackOptions struct {
	// Prefix puts every entry under this top directory (e.g. "deepep-1.2.1"); empty: none.
	Prefix string
	// ModTime is stamped on every entry, truncated to whole seconds (sub-second times would
	// add PAX records). Zero means the Unix epoch. Callers pass SOURCE_DATE_EPOCH.
	ModTime time.Time
	// Level is the zstd level; 0 means zstd.SpeedDefault. Pinned by the caller because the
	// level changes the bytes.
	Level zstd.EncoderLevel
	// Extra files are merged into the sorted order; missing parent directories are added.
	Extra []File
}

// PackReport describes what Pack wrote.
type PackReport struct {
	Entries    []Entry // sorted by path, as in the archive, without Prefix
	Bytes      int64   // regular file data, uncompressed
	Compressed int64   // bytes written to w
}

// classed gives an error a class for errors.Is while keeping its own message.
type classed struct {
	kind error
	err  error
}

func (c *classed) Error() string        { return c.err.Error() }
func (c *classed) Unwrap() error        { return c.err }
func (c *classed) Is(target error) bool { return target == c.kind }

func classify(kind error, format string, args ...any) error {
	return &classed{kind: kind, err: fmt.Errorf(format, args...)}
}

// item is an Entry plus where its bytes come from.
type item struct {
	Entry
	src  string // file on disk; empty for directories, symlinks and extra files
	data []byte // extra files only
}

// Pack writes srcDir as a reproducible tar.zst to w: entries sorted by path in byte order,
// directories included, owner 0:0 without names, one mtime, modes reduced to 0755/0644,
// symlinks kept verbatim (absolute or escaping targets refused), and single-threaded zstd so
// that the bytes do not depend on the machine. Each file's sha256 is computed in the same
// read that feeds the archive.
func Pack(ctx context.Context, srcDir string, w io.Writer, opts PackOptions) (*PackReport, error) {
	prefix, err := cleanName(opts.Prefix)
	if err != nil {
		return nil, fmt.Errorf("pack %s: prefix %q: %w", srcDir, opts.Prefix, err)
	}
	mtime := time.Unix(0, 0)
	if !opts.ModTime.IsZero() {
		mtime = time.Unix(opts.ModTime.Unix(), 0)
	}
	if mtime.Unix() < 0 {
		return nil, fmt.Errorf("pack %s: ModTime %s is before 1970; use SOURCE_DATE_EPOCH or a later time", srcDir, opts.ModTime)
	}
	level := opts.Level
	if level == 0 {
		level = zstd.SpeedDefault
	}

	items, err := scanTree(ctx, srcDir, true)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", srcDir, err)
	}
	items, err = mergeExtra(items, opts.Extra)
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", srcDir, err)
	}

	cw := &countWriter{w: w}
	zw, err := zstd.NewWriter(cw, zstd.WithEncoderLevel(level), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("pack %s: start zstd encoder: %w", srcDir, err)
	}
	tw := tar.NewWriter(zw)
	hdr := func(name string, it *Entry) *tar.Header {
		h := &tar.Header{Name: name, Mode: int64(it.Mode), ModTime: mtime}
		switch it.Type {
		case TypeDir:
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		case TypeSymlink:
			h.Typeflag = tar.TypeSymlink
			h.Linkname = it.Target
		default:
			h.Typeflag = tar.TypeReg
			h.Size = it.Size
		}
		return h
	}
	if prefix != "" {
		parts := strings.Split(prefix, "/")
		for i := range parts {
			d := Entry{Type: TypeDir, Mode: 0o755}
			if err := tw.WriteHeader(hdr(strings.Join(parts[:i+1], "/"), &d)); err != nil {
				return nil, fmt.Errorf("pack %s: write prefix %q: %w", srcDir, prefix, err)
			}
		}
		prefix += "/"
	}

	rep := &PackReport{}
	err = streamItems(ctx, items, func(i int) error {
		return tw.WriteHeader(hdr(prefix+items[i].Path, &items[i].Entry))
	}, func(b []byte) error {
		_, err := tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", srcDir, err)
	}
	rep.Entries = make([]Entry, len(items))
	for i := range items {
		rep.Entries[i] = items[i].Entry
		rep.Bytes += items[i].Size
	}
	rep.Compressed = cw.n
	return rep, nil
}

// PackFile packs srcDir into the file dest (the artifact, e.g. deepep-<hash>.tar.zst),
// writing a temporary sibling that is synced and renamed into place only when complete, so a
// failed or interrupted pack never leaves a file that looks like an artifact.
func PackFile(ctx context.Context, srcDir, dest string, opts PackOptions) (*PackReport, error) {
	f, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-*")
	if err != nil {
		return nil, fmt.Errorf("pack %s: create a temporary file next to %s: %w", srcDir, dest, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	rep, err := Pack(ctx, srcDir, f, opts)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(0o644); err != nil {
		return nil, fmt.Errorf("pack %s: %w", srcDir, err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("pack %s: sync %s: %w", srcDir, f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("pack %s: close %s: %w", srcDir, f.Name(), err)
	}
	// Replacing an existing dest is fine: the name carries the content hash.
	if err := os.Rename(f.Name(), dest); err != nil {
		return nil, fmt.Errorf("pack %s: %w", srcDir, err)
	}
	done = true
	return rep, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// streamItems reads and hashes files in one goroutine while the caller's writer (tar+zstd,
// the slow part) runs in this one, passing 1 MiB chunks through a small fixed pool of buffers.
// It fills in each file's SHA256.
func streamItems(ctx context.Context, items []item, header func(i int) error, data func([]byte) error) error {
	const nbuf = 4
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type msg struct {
		idx int
		b   []byte // nil: start of item idx
		err error
	}
	msgs := make(chan msg, nbuf)
	free := make(chan []byte, nbuf)
	for range nbuf {
		free <- make([]byte, copyBufSize)
	}
	send := func(m msg) bool {
		select {
		case msgs <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(msgs)
		h := sha256.New()
		for i := range items {
			it := &items[i]
			if !send(msg{idx: i}) {
				return
			}
			if it.Type != TypeFile {
				continue
			}
			h.Reset()
			if it.src == "" {
				h.Write(it.data)
				if len(it.data) > 0 && !send(msg{idx: i, b: it.data}) {
					return
				}
			} else if err := readFile(ctx, it, h, free, func(b []byte) bool { return send(msg{idx: i, b: b}) }); err != nil {
				send(msg{idx: i, err: err})
				return
			}
			it.SHA256 = hex.EncodeToString(h.Sum(nil))
		}
	})
	var err error
	for m := range msgs {
		if err != nil {
			continue // draining after a failure so the reader can exit
		}
		switch {
		case m.err != nil:
			err = m.err
		case m.b == nil:
			if err = header(m.idx); err != nil {
				err = fmt.Errorf("entry %q: write header: %w", items[m.idx].Path, err)
			}
		default:
			if err = data(m.b); err != nil {
				err = fmt.Errorf("entry %q: write data: %w", items[m.idx].Path, err)
			}
			if items[m.idx].src != "" {
				free <- m.b[:cap(m.b)]
			}
		}
		if err != nil {
			cancel()
		}
	}
	wg.Wait()
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// readFile streams one file through h and emit, insisting that it still has the size the
// scan saw: a file changing under Pack would otherwise give a tar that lies.
func readFile(ctx context.Context, it *item, h hash.Hash, free chan []byte, emit func([]byte) bool) error {
	f, err := os.Open(it.src)
	if err != nil {
		return fmt.Errorf("entry %q: %w", it.Path, err)
	}
	defer f.Close()
	var total int64
	for {
		var buf []byte
		select {
		case buf = <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		n, rerr := io.ReadFull(f, buf)
		total += int64(n)
		if total > it.Size {
			free <- buf
			return fmt.Errorf("entry %q: file grew while being packed; do not modify the tree during packing", it.Path)
		}
		if n > 0 {
			h.Write(buf[:n])
			if !emit(buf[:n]) {
				return ctx.Err()
			}
		} else {
			free <- buf
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("entry %q: read: %w", it.Path, rerr)
		}
	}
	if total != it.Size {
		return fmt.Errorf("entry %q: file shrank while being packed (%d of %d bytes); do not modify the tree during packing", it.Path, total, it.Size)
	}
	return nil
}

// scanTree lists dir without following symlinks, sorted by path in byte order. With strict,
// symlinks must be relative and stay inside dir even through other symlinks.
func scanTree(ctx context.Context, dir string, strict bool) ([]item, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(root); err != nil {
		return nil, err
	} else if !st.IsDir() {
		return nil, fmt.Errorf("not a directory")
	}
	var items []item
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		it := item{Entry: Entry{Path: rel}}
		switch t := info.Mode().Type(); {
		case t == 0:
			it.Type, it.Size, it.src = TypeFile, info.Size(), p
		case t == fs.ModeDir:
			it.Type = TypeDir
		case t == fs.ModeSymlink:
			it.Type = TypeSymlink
			if it.Target, err = os.Readlink(p); err != nil {
				return err
			}
			if strict {
				if err := checkLinkTarget(rel, it.Target); err != nil {
					return classify(ErrUnsafe, "entry %q: %w; make the link relative and inside the tree", rel, err)
				}
			}
		default:
			return classify(ErrUnsupported, "entry %q: %s: only regular files, directories and symlinks can be packed; remove it from the tree", rel, typeName(t))
		}
		it.Mode = normalMode(it.Type, info.Mode().Perm())
		items = append(items, it)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.Path, b.Path) })
	if strict {
		if err := checkChains(items); err != nil {
			return nil, err
		}
	}
	return items, nil
}

func typeName(t fs.FileMode) string {
	switch {
	case t&fs.ModeNamedPipe != 0:
		return "named pipe (fifo)"
	case t&fs.ModeSocket != 0:
		return "socket"
	case t&fs.ModeDevice != 0:
		return "device node"
	}
	return "special file (" + t.String() + ")"
}

// checkChains applies the kernel-style resolution to every symlink of a sorted item list.
func checkChains(items []item) error {
	t := tree{}
	for _, it := range items {
		switch it.Type {
		case TypeDir:
			t[it.Path] = node{kind: nodeDir}
		case TypeSymlink:
			t[it.Path] = node{kind: nodeSymlink, target: it.Target}
		default:
			t[it.Path] = node{kind: nodeFile}
		}
	}
	for _, it := range items {
		if it.Type == TypeSymlink && t.linkEscapes(it.Path, it.Target) {
			return classify(ErrUnsafe, "entry %q: symlink target %q leads outside the tree through other symlinks", it.Path, it.Target)
		}
	}
	return nil
}

// mergeExtra adds generated files, and any parent directories they need, in sorted order.
func mergeExtra(items []item, extra []File) ([]item, error) {
	if len(extra) == 0 {
		return items, nil
	}
	have := make(map[string]EntryType, len(items)+len(extra))
	for _, it := range items {
		have[it.Path] = it.Type
	}
	for _, f := range extra {
		name, err := cleanName(f.Name)
		if err == nil && name == "" {
			err = errors.New("empty name")
		}
		if err != nil {
			return nil, fmt.Errorf("extra file %q: %w", f.Name, err)
		}
		if t, ok := have[name]; ok {
			return nil, fmt.Errorf("extra file %q: the tree already has a %s there; remove it from the tree or rename the extra file", name, t)
		}
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			t, ok := have[d]
			if !ok {
				have[d] = TypeDir
				items = append(items, item{Entry: Entry{Path: d, Type: TypeDir, Mode: 0o755}})
				continue
			}
			if t != TypeDir {
				return nil, fmt.Errorf("extra file %q: parent %q is a %s in the tree", name, d, t)
			}
		}
		have[name] = TypeFile
		items = append(items, item{
			Entry: Entry{Path: name, Type: TypeFile, Mode: normalMode(TypeFile, f.Mode.Perm()), Size: int64(len(f.Data))},
			data:  f.Data,
		})
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.Path, b.Path) })
	return items, nil
}

// HashTree lists dir like Pack would pack it (same paths, types, modes, sizes, sha256 and
// symlink targets, sorted the same way), hashing files on runtime.NumCPU() workers. Symlink
// targets are reported, not judged: this is for verifying what is there.
func HashTree(ctx context.Context, dir string) ([]Entry, error) {
	items, err := scanTree(ctx, dir, false)
	if err != nil {
		return nil, fmt.Errorf("hash tree %s: %w", dir, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan int)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	for range max(1, runtime.NumCPU()) {
		wg.Go(func() {
			buf := make([]byte, copyBufSize)
			h := sha256.New()
			for i := range jobs {
				it := &items[i]
				sum, n, err := HashFile(ctx, it.src, h, buf)
				if err != nil {
					fail(fmt.Errorf("entry %q: %w", it.Path, err))
					continue
				}
				if n != it.Size {
					fail(fmt.Errorf("entry %q: changed while being hashed (%d bytes, was %d)", it.Path, n, it.Size))
					continue
				}
				it.SHA256 = sum
			}
		})
	}
feed:
	for i := range items {
		if items[i].Type != TypeFile {
			continue
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return nil, fmt.Errorf("hash tree %s: %w", dir, firstErr)
	}
	out := make([]Entry, len(items))
	for i := range items {
		out[i] = items[i].Entry
	}
	return out, nil
}

// HashFile streams one file through h (reset first) with buf, checking ctx between
// chunks, and returns the hex digest and the bytes read.
func HashFile(ctx context.Context, name string, h hash.Hash, buf []byte) (string, int64, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h.Reset()
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return "", n, err
		}
		m, err := f.Read(buf)
		h.Write(buf[:m])
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", n, err
		}
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
