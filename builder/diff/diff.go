// Package diff says why two builds differ: it compares two artifacts or two installed
// prefixes (or one of each) entry by entry, and for a file whose bytes differ it names
// what differs inside: the ELF sections, and the first printable strings (a path, a
// timestamp) that one side holds and the other does not.
//
// Artifacts are read with the archive package's extractor (the one that installs them)
// into a temporary directory removed when Compare returns, however it returns (a
// cancelled context included), bounded by Options.MaxExtract; ELF files with the inspect
// package's reader. File contents are compared by their sha256, computed streaming; only
// a differing file of at most Options.MaxExplain bytes is read into memory to say what
// differs inside it.
package diff

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/inspect"
)

// Options tune Compare.
type Options struct {
	// Ignore leaves an entry of a directory (an installed prefix) out of the comparison:
	// what an install adds that no build made (its receipt, Python's bytecode caches).
	// An artifact is compared whole: bytecode in an artifact is a build's doing. A
	// directory left out takes its contents with it. Nil: nothing is left out.
	Ignore func(path string, e archive.Entry) bool
	// TempDir receives the unpacked artifacts while they are compared ("": os.TempDir()).
	TempDir string
	// Strings is how many differing strings to report per side and file (0: 3).
	Strings int
	// Normalize gives, for a file of a directory (an installed prefix), what install
	// changed back to what the artifact carried (env.sh, into which install writes the
	// install's directory), or nil to compare the file as it is.
	Normalize func(path string) func([]byte) ([]byte, error)
	// MaxExtract bounds the bytes of files unpacked from each artifact (0:
	// DefaultMaxExtract): an artifact holding more is refused, its partial tree removed.
	MaxExtract int64
	// MaxExplain is the largest file read into memory to name the ELF sections and the
	// strings that differ (0: DefaultMaxExplain); a larger differing file is reported by
	// its sha256 alone. It bounds Normalize's reads too.
	MaxExplain int64
	// Declared, when set, reads an artifact's manifest as the extraction reaches it: an
	// artifact whose manifest declares more than MaxExtract bytes is refused there.
	Declared *Declared
}

// Declared reads the size an artifact declares in its manifest.
type Declared struct {
	// Name is the manifest's path in the artifact; MaxSize the most bytes it may take.
	Name    string
	MaxSize int64
	// Bytes returns the bytes the artifact's files take, as the manifest says, or an
	// error for a manifest that cannot be read.
	Bytes func(manifest []byte) (int64, error)
}

// The defaults of Options' bounds.
const (
	DefaultMaxExtract int64 = 8 << 30
	DefaultMaxExplain int64 = 256 << 20
)

// TooLarge is the note on a file whose bytes differ but that is larger than MaxExplain.
const TooLarge = "differs (too large to compare sections)"

// The kinds of change to an entry.
const (
	Added   = "added"   // in B only
	Removed = "removed" // in A only
	Type    = "type"    // a file in one, a directory or a symlink in the other
	Content = "content"
	Mode    = "mode" // the exec bit, the only mode an artifact keeps
	Target  = "target"
)

// Report is the comparison of A with B.
type Report struct {
	A     string `json:"a"`
	B     string `json:"b"`
	Equal bool   `json:"equal"`
	// Entries counts the paths in A or B (ignored ones aside); Same those equal in both.
	Entries int `json:"entries"`
	Same    int `json:"same"`
	// Ignored counts the entries left out by Options.Ignore, in A and B together.
	Ignored int      `json:"ignored,omitempty"`
	Changes []Change `json:"changes"`
}

// Change is one path that differs.
type Change struct {
	Path string         `json:"path"`
	What []string       `json:"what"` // Added, Removed, Type, Content, Mode, Target
	A    *archive.Entry `json:"a,omitempty"`
	B    *archive.Entry `json:"b,omitempty"`
	// Sections are the ELF sections that differ, when both sides are ELF files.
	Sections []SectionChange `json:"sections,omitempty"`
	// OnlyA and OnlyB are the first printable strings of the differing bytes (the
	// differing sections of an ELF file, else the whole file) that the other side lacks.
	OnlyA []string `json:"only_a,omitempty"`
	OnlyB []string `json:"only_b,omitempty"`
	// Note says what else is known: an ELF file on one side only, headers that differ
	// while every section is equal.
	Note string `json:"note,omitempty"`
}

// SectionChange is one ELF section that differs.
type SectionChange struct {
	Name  string `json:"name"`
	What  string `json:"what"` // Added, Removed, Content
	ASize int64  `json:"a_size,omitempty"`
	BSize int64  `json:"b_size,omitempty"`
}

// InputError is an argument that is neither an artifact nor a directory, or an artifact
// that cannot be read: bad input (exit 2).
type InputError struct {
	Path string
	Err  error
}

func (e *InputError) Error() string { return fmt.Sprintf("diff %s: %v", e.Path, e.Err) }
func (e *InputError) Unwrap() error { return e.Err }

// ExitCode: bad input.
func (e *InputError) ExitCode() int { return 2 }

// EnvError is what the machine lacks to compare: a temporary directory, the space to
// unpack an artifact (exit 3).
type EnvError struct {
	Path string
	Err  error
}

func (e *EnvError) Error() string { return fmt.Sprintf("diff %s: %v", e.Path, e.Err) }
func (e *EnvError) Unwrap() error { return e.Err }

// ExitCode: the environment lacks something.
func (e *EnvError) ExitCode() int { return 3 }

// Compare compares a with b; each is an artifact (a .tar.zst epbuild wrote, or any archive
// the archive package reads) or a directory (an installed prefix).
func Compare(ctx context.Context, a, b string, opts Options) (*Report, error) {
	if opts.Strings <= 0 {
		opts.Strings = 3
	}
	if opts.MaxExtract <= 0 {
		opts.MaxExtract = DefaultMaxExtract
	}
	if opts.MaxExplain <= 0 {
		opts.MaxExplain = DefaultMaxExplain
	}
	ta, doneA, err := open(ctx, a, opts)
	if err != nil {
		return nil, err
	}
	defer doneA()
	tb, doneB, err := open(ctx, b, opts)
	if err != nil {
		return nil, err
	}
	defer doneB()
	ignA, ignB := opts.Ignore, opts.Ignore
	normA, normB := opts.Normalize, opts.Normalize
	if ta != a {
		ignA, normA = nil, nil
	}
	if tb != b {
		ignB, normB = nil, nil
	}
	return compareTrees(ctx, a, b, side{ta, ta != a, ignA, normA}, side{tb, tb != b, ignB, normB}, opts)
}

// open returns the tree to compare for path: the directory itself, or the artifact
// unpacked into a temporary directory that done removes. On an error nothing is left.
func open(ctx context.Context, path string, opts Options) (dir string, done func(), err error) {
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil, &InputError{Path: path, Err: errors.New("no such artifact or directory")}
	case err != nil:
		return "", nil, &InputError{Path: path, Err: fmt.Errorf("cannot read it: %w", err)}
	case st.IsDir():
		return path, func() {}, nil
	}
	if _, err := archive.DetectFormat(path); err != nil {
		return "", nil, &InputError{Path: path, Err: fmt.Errorf("neither a directory nor an artifact: %w", err)}
	}
	parent, err := os.MkdirTemp(opts.TempDir, "epbuild-diff-")
	if err != nil {
		return "", nil, &EnvError{Path: path, Err: fmt.Errorf("create a directory to unpack it: %w", err)}
	}
	done = func() { _ = makeWritable(parent); _ = os.RemoveAll(parent) }
	dir = filepath.Join(parent, "tree")
	xo := archive.ExtractOptions{MaxBytes: opts.MaxExtract}
	if d := opts.Declared; d != nil {
		xo.Member = &archive.MemberHook{Name: d.Name, MaxSize: d.MaxSize, Found: func(b []byte) (archive.Limits, error) {
			n, err := d.Bytes(b)
			if err != nil {
				return archive.Limits{}, &InputError{Path: path, Err: fmt.Errorf("read its %s: %w", d.Name, err)}
			}
			if n > opts.MaxExtract {
				return archive.Limits{}, &InputError{Path: path, Err: fmt.Errorf(
					"its %s declares %d bytes of files, more than the %d diff unpacks (--max-extract): raise --max-extract if the disk under %s holds it",
					d.Name, n, opts.MaxExtract, tempRoot(opts.TempDir))}
			}
			return archive.Limits{}, nil
		}}
	}
	if _, err := archive.ExtractFile(ctx, path, dir, xo); err != nil {
		done()
		var (
			ie *InputError
			xe *archive.ExtractError
		)
		switch {
		case errors.As(err, &ie):
			return "", nil, ie
		case ctx.Err() != nil:
			return "", nil, fmt.Errorf("diff %s: %w", path, ctx.Err())
		case errors.Is(err, archive.ErrLimit):
			return "", nil, &InputError{Path: path, Err: fmt.Errorf("%w (diff unpacks at most %d bytes of an artifact: --max-extract)", err, opts.MaxExtract)}
		case errors.As(err, &xe) && xe.Kind != nil:
			return "", nil, &InputError{Path: path, Err: err}
		}
		// the archive read fine as far as it went: writing the tree failed (space, quota)
		return "", nil, &EnvError{Path: path, Err: fmt.Errorf("unpack it under %s: %w", tempRoot(opts.TempDir), err)}
	}
	return dir, done, nil
}

func tempRoot(dir string) string {
	if dir == "" {
		return os.TempDir()
	}
	return dir
}

// side is one side of a comparison: where its files are, and what of an installed prefix
// is left out or read back to the artifact's form.
type side struct {
	dir string
	// unpacked: dir is an artifact unpacked by open, not what the user named
	unpacked  bool
	ignore    func(string, archive.Entry) bool
	normalize func(string) func([]byte) ([]byte, error)
}

func compareTrees(ctx context.Context, nameA, nameB string, tA, tB side, opts Options) (*Report, error) {
	ta, tb := tA.dir, tB.dir
	ea, ignA, err := entries(ctx, tA, opts.MaxExplain)
	if err != nil {
		return nil, sideError(ctx, nameA, tA, err)
	}
	eb, ignB, err := entries(ctx, tB, opts.MaxExplain)
	if err != nil {
		return nil, sideError(ctx, nameB, tB, err)
	}
	rep := &Report{A: nameA, B: nameB, Ignored: ignA + ignB, Changes: []Change{}}
	paths := map[string]bool{}
	for p := range ea {
		paths[p] = true
	}
	for p := range eb {
		paths[p] = true
	}
	sorted := make([]string, 0, len(paths))
	for p := range paths {
		sorted = append(sorted, p)
	}
	sort.Strings(sorted)
	rep.Entries = len(sorted)
	for _, p := range sorted {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		a, inA := ea[p]
		b, inB := eb[p]
		c := Change{Path: p}
		switch {
		case !inA:
			c.What, c.B = []string{Added}, &b
		case !inB:
			c.What, c.A = []string{Removed}, &a
		case a.Type != b.Type:
			c.What, c.A, c.B = []string{Type}, &a, &b
		default:
			if a.Type == archive.TypeSymlink && a.Target != b.Target {
				c.What = append(c.What, Target)
			}
			if a.Type == archive.TypeFile && (a.SHA256 != b.SHA256 || a.Size != b.Size) {
				c.What = append(c.What, Content)
			}
			if a.Mode != b.Mode {
				c.What = append(c.What, Mode)
			}
			if len(c.What) == 0 {
				rep.Same++
				continue
			}
			c.A, c.B = &a, &b
			if slices.Contains(c.What, Content) {
				explain(&c, filepath.Join(ta, filepath.FromSlash(p)), filepath.Join(tb, filepath.FromSlash(p)), opts)
			}
		}
		rep.Changes = append(rep.Changes, c)
	}
	rep.Equal = len(rep.Changes) == 0
	return rep, nil
}

// sideError says why one side could not be read: bad input where it is what the user
// named (a file it cannot read, a FIFO), the machine's doing where it is an artifact
// this package unpacked.
func sideError(ctx context.Context, name string, t side, err error) error {
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("diff %s: %w", name, ctx.Err())
	case t.unpacked:
		return &EnvError{Path: name, Err: err}
	}
	return &InputError{Path: name, Err: fmt.Errorf("cannot read it: %w", err)}
}

// entries hashes a tree, leaving out what ignore names (and what lies under an ignored
// directory), and hashing what normalize names in the form it gives (a file larger than
// max is hashed as it is: normalizing reads it whole).
func entries(ctx context.Context, t side, max int64) (map[string]archive.Entry, int, error) {
	dir, ignore := t.dir, t.ignore
	list, err := archive.HashTree(ctx, dir)
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]archive.Entry, len(list))
	var skipped []string
	n := 0
	for _, e := range list {
		if ignore != nil && (ignore(e.Path, e) || under(e.Path, skipped)) {
			if e.Type == archive.TypeDir {
				skipped = append(skipped, e.Path+"/")
			}
			n++
			continue
		}
		if t.normalize != nil && e.Type == archive.TypeFile && e.Size <= max {
			if norm := t.normalize(e.Path); norm != nil {
				b, err := readAtMost(filepath.Join(dir, filepath.FromSlash(e.Path)), max)
				if err == nil {
					b, err = norm(b)
				}
				if err != nil {
					return nil, 0, fmt.Errorf("%s: %w", e.Path, err)
				}
				sum := sha256.Sum256(b)
				e.Size, e.SHA256 = int64(len(b)), hex.EncodeToString(sum[:])
			}
		}
		out[e.Path] = e
	}
	return out, n, nil
}

func under(p string, dirs []string) bool {
	for _, d := range dirs {
		if len(p) > len(d) && p[:len(d)] == d {
			return true
		}
	}
	return false
}

// readAtMost reads a file of at most max bytes; one that grew past max since it was
// hashed is an error, not an allocation.
func readAtMost(name string, max int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes", name, max)
	}
	return b, nil
}

// readBoth reads the two files compared, each at most max bytes.
func readBoth(a, b string, max int64) ([]byte, []byte, error) {
	ba, err := readAtMost(a, max)
	if err != nil {
		return nil, nil, err
	}
	bb, err := readAtMost(b, max)
	if err != nil {
		return nil, nil, err
	}
	return ba, bb, nil
}

// explain fills in what differs inside two files of different content. What cannot be
// told (a file too large to read into memory, a damaged ELF file) is said in the note:
// the change itself is known from the sha256 already.
func explain(c *Change, a, b string, opts Options) {
	if c.A.Size > opts.MaxExplain || c.B.Size > opts.MaxExplain {
		c.Note = TooLarge
		return
	}
	ea, eb := inspect.IsELF(a), inspect.IsELF(b)
	if ea && eb {
		err := explainELF(c, a, b, opts)
		if err == nil {
			return
		}
		c.Sections, c.Note = nil, "the ELF sections cannot be compared: "+err.Error()
	} else if ea != eb {
		c.Note = "an ELF file on one side only"
	}
	ba, bb, err := readBoth(a, b, opts.MaxExplain)
	if err != nil {
		c.Note = joinNote(c.Note, "the bytes cannot be read back: "+err.Error())
		return
	}
	c.OnlyA, c.OnlyB = differingStrings(ba, bb, opts.Strings)
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// explainELF names the sections that differ and the strings in their bytes that the
// other side lacks.
func explainELF(c *Change, a, b string, opts Options) error {
	sa, err := inspect.ELFSections(a)
	if err != nil {
		return err
	}
	sb, err := inspect.ELFSections(b)
	if err != nil {
		return err
	}
	// sections are matched by name; a name that occurs twice (object files) by its rank
	key := func(list []inspect.Section) (map[string]inspect.Section, []string) {
		m, seen := map[string]inspect.Section{}, map[string]int{}
		var order []string
		for _, s := range list {
			k := s.Name
			if seen[s.Name] > 0 {
				k = fmt.Sprintf("%s#%d", s.Name, seen[s.Name])
			}
			seen[s.Name]++
			m[k] = s
			order = append(order, k)
		}
		return m, order
	}
	ma, orderA := key(sa)
	mb, orderB := key(sb)
	var bytesA, bytesB [][]byte
	read := func(path string, s inspect.Section, into *[][]byte) error {
		if s.SHA256 == "" {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("diff: %w", err)
		}
		defer f.Close()
		buf := make([]byte, s.Size)
		if _, err := io.ReadFull(io.NewSectionReader(f, s.Offset, s.Size), buf); err != nil {
			return fmt.Errorf("diff: read section %s of %s: %w", s.Name, path, err)
		}
		*into = append(*into, buf)
		return nil
	}
	for _, k := range orderA {
		x := ma[k]
		y, ok := mb[k]
		switch {
		case !ok:
			c.Sections = append(c.Sections, SectionChange{Name: k, What: Removed, ASize: x.Size})
			if err := read(a, x, &bytesA); err != nil {
				return err
			}
		case x.SHA256 != y.SHA256 || x.Size != y.Size:
			c.Sections = append(c.Sections, SectionChange{Name: k, What: Content, ASize: x.Size, BSize: y.Size})
			if err := read(a, x, &bytesA); err != nil {
				return err
			}
			if err := read(b, y, &bytesB); err != nil {
				return err
			}
		}
	}
	for _, k := range orderB {
		if _, ok := ma[k]; !ok {
			y := mb[k]
			c.Sections = append(c.Sections, SectionChange{Name: k, What: Added, BSize: y.Size})
			if err := read(b, y, &bytesB); err != nil {
				return err
			}
		}
	}
	if len(c.Sections) == 0 {
		// the bytes differ outside every section: the ELF or program headers, padding
		c.Note = "every section is equal: the ELF headers, program headers or the bytes between sections differ"
		ba, bb, err := readBoth(a, b, opts.MaxExplain)
		if err != nil {
			return err
		}
		bytesA, bytesB = [][]byte{ba}, [][]byte{bb}
	}
	c.OnlyA, c.OnlyB = differingStrings(bytes.Join(bytesA, []byte{0}), bytes.Join(bytesB, []byte{0}), opts.Strings)
	return nil
}

// minString is the shortest run of printable characters counted as a string (as
// `strings -n 6`): shorter runs are mostly bytes of code that happen to be printable.
const minString = 6

// printable splits b into its runs of printable ASCII (tab included) of minString
// characters or more, in order.
func printable(b []byte) []string {
	var out []string
	start := -1
	for i := 0; i <= len(b); i++ {
		ok := i < len(b) && (b[i] >= 0x20 && b[i] < 0x7f || b[i] == '\t')
		switch {
		case ok && start < 0:
			start = i
		case !ok && start >= 0:
			if i-start >= minString {
				out = append(out, string(b[start:i]))
			}
			start = -1
		}
	}
	return out
}

// differingStrings returns the first n strings of a that b does not hold, and the first n
// of b that a does not hold, each without repeats.
func differingStrings(a, b []byte, n int) (onlyA, onlyB []string) {
	sa, sb := printable(a), printable(b)
	first := func(list []string, other []string) []string {
		have := make(map[string]bool, len(other))
		for _, s := range other {
			have[s] = true
		}
		var out []string
		seen := map[string]bool{}
		for _, s := range list {
			if !have[s] && !seen[s] {
				seen[s] = true
				out = append(out, clip(s))
				if len(out) == n {
					break
				}
			}
		}
		return out
	}
	return first(sa, sb), first(sb, sa)
}

// maxShown is the most of one string a report shows: a PTX line or a JSON document can
// be long, and its start is what tells it apart.
const maxShown = 240

func clip(s string) string {
	if len(s) > maxShown {
		return s[:maxShown] + "..."
	}
	return s
}

// makeWritable lets RemoveAll delete an unpacked tree with read-only directories.
func makeWritable(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
}
