package archive

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Scan reads a tar archive (compressed as opts.Format says, else as name's suffix says)
// from r exactly as ExtractFile would extract it — every rule on names, links, types and
// limits — but writes nothing: the report's Tree is the tree the destination would hold,
// each regular file with the sha256 computed as its data streamed by. One pass, and
// memory bounded by the number of entries (MaxEntries), not by their size: this is how
// an artifact is checked where it does not need to be installed (push, pull). name
// names the archive in errors. Zip archives are not scanned (they are read by offset).
func Scan(ctx context.Context, r io.Reader, name string, opts ExtractOptions) (*ExtractReport, error) {
	x, err := newExtractor(ctx, name, opts)
	if err != nil {
		return nil, err
	}
	if x.opts.Format == FormatZip {
		return nil, fmt.Errorf("extract %s: Scan reads tar archives only", x.archive)
	}
	x.opts.Hash = true
	x.tree = tree{}
	x.dirs = map[string]dirMeta{}
	if err := x.tarReader(r); err != nil {
		return nil, err
	}
	if err := x.finish(); err != nil {
		return nil, err
	}
	rep := x.rep
	rep.Tree = x.listing()
	return &rep, nil
}

// MemberHook hands the bytes of one regular file of a tar archive to Found as soon as
// the archive has given them, in the same pass as the rest: the check of an artifact
// reads its manifest this way and bounds the rest of the archive by what the manifest
// declares.
type MemberHook struct {
	// Name is the member's clean slash path as stored (StripComponents does not apply).
	// Its first occurrence must be a regular file of at most MaxSize bytes.
	Name    string
	MaxSize int64
	// Found gets the member's bytes (once, at its first occurrence) and returns the
	// limits for the whole archive from there on; what was read before counts against
	// them, and a zero field keeps that limit. An error from Found ends the extraction
	// and is returned as it is.
	Found func(data []byte) (Limits, error)
}

// Limits replace ExtractOptions' MaxBytes and MaxEntries part-way through an archive.
type Limits struct {
	MaxBytes   int64
	MaxEntries int
}

// memberState follows the MemberHook's member through the extraction.
type memberState struct {
	reading bool // the entry being written is the member: its data is kept
	done    bool // Found was called
	data    bytes.Buffer
}

// memberEntry notes an entry that is the member (before StripComponents, as ReadMember
// matches it) and refuses a member that is not a regular file or is too large.
func (x *extractor) memberEntry(h *header, rel string) error {
	m := x.opts.Member
	if m == nil || x.member.done || rel != m.Name {
		return nil
	}
	if h.kind != hdrFile {
		return x.errf(h.name, ErrLayout, "", "is not a regular file")
	}
	if h.size < 0 || h.size > m.MaxSize {
		return x.errf(h.name, ErrLimit, fixLimit, "%d bytes, more than the %d allowed", h.size, m.MaxSize)
	}
	// the buffer grows as the data arrives: a header may claim more than the stream holds
	x.member.reading = true
	return nil
}

// memberRead hands the member's bytes to Found once its entry is complete, and applies
// the limits Found returns to what was read so far.
func (x *extractor) memberRead(h *header) error {
	if !x.member.reading {
		return nil
	}
	x.member.reading, x.member.done = false, true
	lim, err := x.opts.Member.Found(x.member.data.Bytes())
	x.member.data = bytes.Buffer{}
	if err != nil {
		return err
	}
	if lim.MaxBytes > 0 {
		x.opts.MaxBytes = lim.MaxBytes
		if x.rep.Bytes > x.opts.MaxBytes {
			return x.errf(h.name, ErrLimit, fixLimit, "the %d bytes up to here exceed MaxBytes (%d)", x.rep.Bytes, x.opts.MaxBytes)
		}
	}
	if lim.MaxEntries > 0 {
		x.opts.MaxEntries = lim.MaxEntries
		if x.rep.Entries > x.opts.MaxEntries {
			return x.errf(h.name, ErrLimit, fixLimit, "the %d entries up to here exceed MaxEntries (%d)", x.rep.Entries, x.opts.MaxEntries)
		}
	}
	return nil
}

// mkdirAt creates a directory of the destination (nothing in a scan).
func (x *extractor) mkdirAt(rel string) error {
	if x.root == nil {
		return nil
	}
	return x.root.Mkdir(rel, 0o700)
}

// teeWriter writes to w and to also; also never fails (a hash, a buffer).
func teeWriter(w, also io.Writer) io.Writer {
	if w == io.Discard {
		return also
	}
	return io.MultiWriter(w, also)
}

// listing is the tree as extracted, sorted by path.
func (x *extractor) listing() []Entry {
	out := make([]Entry, 0, len(x.tree))
	for p, n := range x.tree {
		e := Entry{Path: p}
		switch n.kind {
		case nodeDir:
			e.Type, e.Mode = TypeDir, x.dirs[p].mode
		case nodeSymlink:
			e.Type, e.Mode, e.Target = TypeSymlink, 0o777, n.target
		default:
			e.Type, e.Mode, e.Size, e.SHA256 = TypeFile, n.mode, n.size, n.sum
		}
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return out
}
