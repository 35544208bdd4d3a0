package patches

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync/atomic"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// Options tune Apply.
type Options struct {
	// MaxOffset overrides the set's max-offset when not nil.
	MaxOffset *int
	// AllowApplied skips a patch that is already in the tree instead of failing.
	AllowApplied bool
	// CheckOnly computes everything and writes nothing.
	CheckOnly bool
}

// Status is what happened to one patch.
type Status string

// The patch statuses.
const (
	StatusApplied        Status = "applied"
	StatusAppliedOffset  Status = "applied-offset"
	StatusAlreadyApplied Status = "already-applied"
	StatusConflict       Status = "conflict"
	// StatusChecked: with CheckOnly, the patch would apply (its hunks say where).
	StatusChecked Status = "checked"
)

// Op is what a patch does to one file.
type Op string

// The file operations.
const (
	OpModify  Op = "modify"
	OpCreate  Op = "create"
	OpDelete  Op = "delete"
	OpRename  Op = "rename"
	OpCopy    Op = "copy"
	OpMode    Op = "mode"
	OpReplace Op = "replace"
)

// SetResult is the outcome of applying a set.
type SetResult struct {
	Set     string        `json:"set"`
	Patches []PatchResult `json:"patches"`
	// Written is true when the tree was changed.
	Written bool `json:"written"`
}

// PatchResult is the outcome of one patch.
type PatchResult struct {
	Name string `json:"name"`
	Kind Kind   `json:"kind"`
	// Digest is the sha256 of the bytes applied: the patch file, the computed
	// diff, the upstream patch file, or the replacement file.
	Digest string       `json:"digest"`
	Status Status       `json:"status"`
	Files  []FileResult `json:"files,omitempty"`
}

// Moved says whether offset search placed any hunk away from its line.
func (r PatchResult) Moved() bool {
	for _, f := range r.Files {
		for _, h := range f.Hunks {
			if h.Offset != 0 {
				return true
			}
		}
	}
	return false
}

// FileResult is what one patch did to one file.
type FileResult struct {
	Path string `json:"path"`
	// OldPath is the source of a rename or copy.
	OldPath string       `json:"old_path,omitempty"`
	Op      Op           `json:"op"`
	Hunks   []HunkResult `json:"hunks,omitempty"`
}

// Apply applies set to the tree at root: every patch in order, in memory first,
// then writes the result. It applies fully or not at all: on any error the tree
// is as it was. Upstream content comes from up (nil is fine for a set of
// KindFile patches only). On error the result says what each patch up to the
// failing one did (nothing of it is written).
func Apply(ctx context.Context, root string, set *Set, up Upstream, opts Options) (*SetResult, error) {
	maxOffset := set.MaxOffset
	if opts.MaxOffset != nil {
		maxOffset = *opts.MaxOffset
	}
	if maxOffset < 0 {
		return nil, fmt.Errorf("apply set %s: max offset %d is negative", set.Name, maxOffset)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("apply set %s: open tree: %w", set.Name, err)
	}
	defer r.Close()

	// Each patch is fetched, checked against its pin and parsed as it is applied, one at a
	// time: a patch set is never whole in memory. Nothing is written before every patch
	// has applied, and a bad pin, a malformed patch or a refused path anywhere in the set
	// is reported as such, before any conflict, as if all had been read first.
	ps := &PreparedSet{set: set, up: up}
	dirs := newDirs(r)
	defer dirs.close()
	st := &state{disk: newDisk(dirs), changes: map[string]*node{}}
	res, st, err := ps.run(ctx, st, maxOffset, opts)
	if err != nil {
		return res, err
	}
	if opts.CheckOnly {
		return res, nil
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("apply set %s: %w", set.Name, err)
	}
	ops := st.diff()
	w := newWriter(r, dirs)
	if err := w.apply(ops); err != nil {
		return res, fmt.Errorf("apply set %s: %w", set.Name, err)
	}
	res.Written = len(ops) > 0
	return res, nil
}

// CheckSeries checks sets in order on the tree at root as Apply with CheckOnly would,
// except that each set is tried on the tree the sets before it leave (in memory): a set
// written against another's result is checked where it will apply. Nothing is written.
// failed is the index of the set that did not apply, -1 when all did.
func CheckSeries(ctx context.Context, root string, sets []*Set, up Upstream, opts Options) (results []*SetResult, failed int, err error) {
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, 0, fmt.Errorf("check sets: open tree: %w", err)
	}
	defer r.Close()
	dirs := newDirs(r)
	defer dirs.close()
	opts.CheckOnly = true
	st := &state{disk: newDisk(dirs), changes: map[string]*node{}}
	for i, set := range sets {
		maxOffset := set.MaxOffset
		if opts.MaxOffset != nil {
			maxOffset = *opts.MaxOffset
		}
		if maxOffset < 0 {
			return results, i, fmt.Errorf("check set %s: max offset %d is negative", set.Name, maxOffset)
		}
		ps := &PreparedSet{set: set, up: up}
		res, next, err := ps.run(ctx, st, maxOffset, opts)
		if res != nil {
			results = append(results, res)
		}
		if err != nil {
			return results, i, err
		}
		st = next
	}
	return results, -1, nil
}

// PreparedSet is a set ready to be applied. Prepare makes one that holds every patch
// fetched, checked against its pin and parsed, to be tried on many trees (Check) at the
// cost of the set in memory; Apply makes one that holds nothing and reads each patch as
// it applies it. Both apply a patch the same way (applyStream).
type PreparedSet struct {
	set *Set
	up  Upstream
	// held is every patch of set, parsed (Prepare); nil: each patch is fetched, checked
	// and parsed as it is applied.
	held []prepared
}

// Prepare fetches, checks and parses every patch of set, in order, and keeps them: a bad
// pin, a malformed patch or a refused path stops it before any tree is tried.
func Prepare(ctx context.Context, set *Set, up Upstream) (*PreparedSet, error) {
	ps := &PreparedSet{set: set, up: up, held: make([]prepared, 0, len(set.Patches))}
	for _, p := range set.Patches {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("apply set %s: %w", set.Name, err)
		}
		pp, err := prepare(ctx, set, p, up)
		if err != nil {
			return nil, err
		}
		if p.Kind() != KindReplace {
			if pp.msgs, err = pp.parse(); err != nil {
				return nil, err
			}
		}
		ps.held = append(ps.held, pp)
	}
	return ps, nil
}

// patch returns the i-th patch of the set, fetched and checked (held, or fetched now).
func (ps *PreparedSet) patch(ctx context.Context, i int) (prepared, error) {
	if ps.held != nil {
		return ps.held[i], nil
	}
	return prepare(ctx, ps.set, ps.set.Patches[i], ps.up)
}

// run applies the patches in order to st, in memory, and returns the state
// they leave. On a conflict or an unallowed already-applied patch it stops
// there: the result says what each patch up to it did. A bad pin, a malformed
// patch or a refused path anywhere in the set is reported before a conflict,
// with no result.
func (ps *PreparedSet) run(ctx context.Context, st *state, maxOffset int, opts Options) (*SetResult, *state, error) {
	res := &SetResult{Set: ps.set.Name}
	for i := range ps.set.Patches {
		if err := ctx.Err(); err != nil {
			return nil, nil, fmt.Errorf("apply set %s: %w", ps.set.Name, err)
		}
		pp, err := ps.patch(ctx, i)
		if err != nil {
			return nil, nil, err
		}
		pr := PatchResult{Name: pp.patch.Name, Kind: pp.patch.Kind(), Digest: pp.digest}
		next, files, err := pp.apply(st, maxOffset, true)
		var ie *inputError
		if errors.As(err, &ie) {
			return nil, nil, ie.err
		}
		if err != nil {
			if err := ps.checkRest(ctx, i+1); err != nil {
				return nil, nil, err
			}
		}
		if err == nil {
			st = next
			pr.Files = files
			pr.Status = StatusApplied
			if pr.Moved() {
				pr.Status = StatusAppliedOffset
			}
			if opts.CheckOnly {
				pr.Status = StatusChecked
			}
			res.Patches = append(res.Patches, pr)
			continue
		}
		var conflict *ConflictError
		if !errors.As(err, &conflict) {
			pr.Status = StatusConflict
			res.Patches = append(res.Patches, pr)
			return res, nil, err
		}
		if pp.applied(st, maxOffset) {
			pr.Status = StatusAlreadyApplied
			res.Patches = append(res.Patches, pr)
			if !opts.AllowApplied {
				return res, nil, &AlreadyAppliedError{Patch: pp.patch.Name}
			}
			continue
		}
		pr.Status = StatusConflict
		res.Patches = append(res.Patches, pr)
		return res, nil, err
	}
	return res, st, nil
}

// checkRest reads, checks and parses the patches of the set from the from-th on, for the
// first bad pin, malformed patch or refused path: a failure to apply an earlier patch is
// reported only when there is none. A held set was checked whole by Prepare.
func (ps *PreparedSet) checkRest(ctx context.Context, from int) error {
	if ps.held != nil {
		return nil
	}
	for _, p := range ps.set.Patches[from:] {
		pp, err := prepare(ctx, ps.set, p, ps.up)
		if err != nil {
			return err
		}
		if p.Kind() == KindReplace {
			continue // prepare checked it
		}
		var ie *inputError
		if _, _, err := pp.apply(nil, 0, false); errors.As(err, &ie) {
			return ie.err
		}
	}
	return nil
}

// prepared is a patch with its content fetched: in memory, or a file of the set opened
// as it is applied; and, when held, parsed.
type prepared struct {
	patch Patch
	body
	msgs [][]*gitdiff.File // the patch parsed (a held set); nil: parsed as it is applied
}

func prepare(ctx context.Context, set *Set, p Patch, up Upstream) (prepared, error) {
	b, err := set.content(ctx, p, up)
	if err != nil {
		return prepared{}, err
	}
	if p.Kind() == KindReplace {
		if reason := unsafeReason(p.Replace.Target); reason != "" {
			return prepared{}, &UnsafePathError{Patch: p.Name, Path: p.Replace.Target, Reason: reason}
		}
	}
	return prepared{patch: p, body: b}, nil
}

// pieces returns what applyStream reads the patch from: its parsed messages when held,
// else its text, cut as it is read. done, called after the last piece, says whether the
// text matched its pin.
func (pp prepared) pieces() (src pieceSource, done func() error, err error) {
	if pp.msgs != nil {
		return &parsedPieces{msgs: pp.msgs}, func() error { return nil }, nil
	}
	r, done, err := pp.reader()
	if err != nil {
		return nil, nil, err
	}
	return newChunker(r), done, nil
}

// apply applies the patch to st, reading it as it goes (with apply false, it only reads
// and parses it). A bad pin, then an input error (see applyStream), comes back as an
// *inputError.
func (pp prepared) apply(st *state, maxOffset int, apply bool) (*state, []FileResult, error) {
	if pp.patch.Kind() == KindReplace {
		return pp.replace(st)
	}
	src, done, err := pp.pieces()
	if err != nil {
		return nil, nil, &inputError{err}
	}
	next, files, err := applyStream(st, pp.patch.Name, src, maxOffset, apply)
	if derr := done(); derr != nil {
		return nil, nil, &inputError{derr}
	}
	return next, files, err
}

// parse returns the patch parsed whole: held, or read and parsed now.
func (pp prepared) parse() ([][]*gitdiff.File, error) {
	if pp.msgs != nil {
		return pp.msgs, nil
	}
	r, done, err := pp.reader()
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(r)
	if derr := done(); derr != nil {
		return nil, derr
	}
	if err != nil {
		return nil, fmt.Errorf("patch %s: read: %w", pp.patch.Name, err)
	}
	return parsePatch(pp.patch.Name, data)
}

// applied says whether the patch is already in the tree: its reverse applies cleanly.
func (pp prepared) applied(st *state, maxOffset int) bool {
	if pp.patch.Kind() == KindReplace {
		n, err := lookup(st, pp.patch.Name, pp.patch.Replace.Target)
		return err == nil && n.kind == regular && n.data == pp.data
	}
	// The messages are undone last first: the whole patch is read.
	msgs, err := pp.parse()
	if err != nil {
		return false
	}
	rev := reversePatch(msgs)
	if rev == nil {
		return false
	}
	_, _, err = applyStream(st, pp.patch.Name, &parsedPieces{msgs: rev}, maxOffset, true)
	return err == nil
}

func (pp prepared) replace(st *state) (*state, []FileResult, error) {
	name, target := pp.patch.Name, pp.patch.Replace.Target
	n, err := lookup(st, name, target)
	if err != nil {
		return nil, nil, err
	}
	if c := fileConflict(name, target, n); c != nil {
		return nil, nil, c
	}
	if n.data == pp.data {
		// Nothing would change: the replacement is already there.
		return nil, nil, &ConflictError{Patch: name, File: target, Reason: "file already holds the replacement"}
	}
	next := st.fork()
	next.changes[target] = &node{kind: regular, data: pp.data, perm: n.perm}
	return next, []FileResult{{Path: target, Op: OpReplace}}, nil
}

// lookup reads a path of the state, turning a symlink on the way into a refusal.
func lookup(st *state, patch, p string) (*node, error) {
	n, err := st.get(p)
	var se *symlinkError
	if errors.As(err, &se) {
		reason := "target is a symlink"
		if se.at != p {
			reason = "path goes through the symlink " + se.at
		}
		return nil, &UnsafePathError{Patch: patch, Path: p, Reason: reason}
	}
	if err != nil {
		return nil, fmt.Errorf("patch %s: %w", patch, err)
	}
	return n, nil
}

// fileConflict says why an existing path cannot be patched as a file.
func fileConflict(patch, p string, n *node) *ConflictError {
	switch n.kind {
	case regular:
		return nil
	case absent:
		return &ConflictError{Patch: patch, File: p, Reason: "file does not exist"}
	case directory:
		return &ConflictError{Patch: patch, File: p, Reason: "is a directory"}
	default:
		return &ConflictError{Patch: patch, File: p, Reason: "is not a regular file"}
	}
}

// fileChange is one file diff computed against the state before its message.
type fileChange struct {
	result FileResult
	remove string // the old path a delete or rename removes
	target string // the path written ("" for a delete)
	fresh  bool   // target must not exist before (create, rename, copy)
	node   *node
}

// maxAppliers bounds the file diffs computed at once.
const maxAppliers = 8

// lowerTo sets v to x if x is lower.
func lowerTo(v *atomic.Int64, x int64) {
	for {
		cur := v.Load()
		if x >= cur || v.CompareAndSwap(cur, x) {
			return
		}
	}
}

// checkFresh checks that a file can be created at p: nothing there (or freed
// by the same message), and no parent directory that is a file.
func checkFresh(before, after *state, patch, p string, freed bool) error {
	n, err := lookup(before, patch, p)
	if err != nil {
		return err
	}
	switch {
	case n.kind == directory:
		return &ConflictError{Patch: patch, File: p, Reason: "a directory is in the way"}
	case n.kind != absent && !freed:
		return &ConflictError{Patch: patch, File: p, Reason: "file already exists"}
	}
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		d, err := lookup(after, patch, dir)
		if err != nil {
			return err
		}
		if d.kind != absent && d.kind != directory {
			return &ConflictError{Patch: patch, File: p, Reason: "its parent " + dir + " is not a directory"}
		}
	}
	return nil
}

func applyFile(st *state, patch string, f *gitdiff.File, maxOffset int) (fileChange, error) {
	var c fileChange
	src := &node{kind: regular, perm: permFor(f.NewMode)}
	if f.IsNew {
		c.result = FileResult{Path: f.NewName, Op: OpCreate}
		c.fresh = true
	} else {
		n, err := lookup(st, patch, f.OldName)
		if err != nil {
			return c, err
		}
		if cerr := fileConflict(patch, f.OldName, n); cerr != nil {
			return c, cerr
		}
		src = n
		c.result = FileResult{Path: f.NewName, Op: OpModify}
		switch {
		case f.IsDelete:
			c.result = FileResult{Path: f.OldName, Op: OpDelete}
			c.remove = f.OldName
		case f.IsRename:
			c.result = FileResult{Path: f.NewName, OldPath: f.OldName, Op: OpRename}
			c.remove, c.fresh = f.OldName, true
		case f.IsCopy:
			c.result = FileResult{Path: f.NewName, OldPath: f.OldName, Op: OpCopy}
			c.fresh = true
		case len(f.TextFragments) == 0 && f.BinaryFragment == nil && modeChange(f):
			c.result.Op = OpMode
		}
	}
	shown := c.result.Path

	perm := src.perm
	if modeChange(f) {
		if isExec(f.OldMode) != (src.perm&0o100 != 0) {
			return c, &ConflictError{Patch: patch, File: shown, Reason: fmt.Sprintf("mode is %s, the patch expects %o", gitMode(src.perm), f.OldMode)}
		}
		perm = withExec(perm, isExec(f.NewMode))
	}

	data := src.data
	switch {
	case f.IsBinary:
		out, err := applyBinary(patch, shown, src.data, f)
		if err != nil {
			return c, err
		}
		data = out
	case len(f.TextFragments) > 0:
		out, hunks, fail := applyFragments(src.data, f.TextFragments, maxOffset)
		if fail != nil {
			return c, &ConflictError{Patch: patch, File: shown, Hunk: fail.hunk, Line: fail.line,
				Expected: fail.expected, Found: fail.found, Reason: fail.reason,
				FitLine: fail.fitLine, FitOffset: fail.fitOffset, NeedOffset: fail.need}
		}
		data = out
		c.result.Hunks = hunks
	}
	if f.IsDelete {
		if data != "" {
			return c, &ConflictError{Patch: patch, File: shown, Reason: "the patch deletes the file, but the file holds more than the patch removes"}
		}
		return c, nil
	}
	c.target = f.NewName
	c.node = &node{kind: regular, data: data, perm: perm}
	return c, nil
}

func modeChange(f *gitdiff.File) bool {
	return !f.IsNew && !f.IsDelete && f.OldMode != 0 && f.NewMode != 0 && f.OldMode != f.NewMode
}

// Git records modes as raw octal (0100644, 0100755); only the exec bit matters here.
func isExec(gitMode fs.FileMode) bool { return gitMode&0o111 != 0 }

func permFor(gitMode fs.FileMode) fs.FileMode {
	if isExec(gitMode) {
		return 0o755
	}
	return 0o644
}

func withExec(perm fs.FileMode, exec bool) fs.FileMode {
	if exec {
		return perm | (perm&0o444)>>2
	}
	return perm &^ 0o111
}

func gitMode(perm fs.FileMode) string {
	if perm&0o100 != 0 {
		return "100755"
	}
	return "100644"
}

// applyBinary applies a binary diff, checking the file against the blob ids the
// patch names: a binary delta does not check its base by itself.
func applyBinary(patch, p, src string, f *gitdiff.File) (string, error) {
	if !blobMatches(src, f.OldOIDPrefix) {
		return "", &ConflictError{Patch: patch, File: p, Reason: fmt.Sprintf("binary content is not blob %s, which the patch expects", f.OldOIDPrefix)}
	}
	var out bytes.Buffer
	a := gitdiff.NewBinaryApplier(&out, strings.NewReader(src))
	if err := a.ApplyFragment(f.BinaryFragment); err != nil {
		return "", &ConflictError{Patch: patch, File: p, Reason: "binary patch: " + err.Error()}
	}
	if err := a.Close(); err != nil {
		return "", &ConflictError{Patch: patch, File: p, Reason: "binary patch: " + err.Error()}
	}
	if !blobMatches(out.String(), f.NewOIDPrefix) {
		return "", &ConflictError{Patch: patch, File: p, Reason: fmt.Sprintf("binary result is not blob %s, which the patch promises", f.NewOIDPrefix)}
	}
	return out.String(), nil
}

// blobMatches says whether data's git blob id starts with prefix. An empty or
// all-zero prefix (no file) matches only what it can: nothing is checked.
func blobMatches(data, prefix string) bool {
	if strings.Trim(prefix, "0") == "" {
		return true
	}
	var h hash.Hash = sha1.New()
	if len(prefix) > 40 {
		h = sha256.New()
	}
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write([]byte(data))
	return strings.HasPrefix(hex.EncodeToString(h.Sum(nil)), strings.ToLower(prefix))
}
