package source

import (
	"bytes"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/diff"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/patches"
)

// DiffSpec names an upstream change: the diff from Base to Head in Repo. Ref, if set, is a
// ref (refs/pull/466/head) that must point at Head. The patches package owns the type, so
// that a *Fetcher is a patches.Upstream.
type DiffSpec = patches.DiffSpec

// FileSpec names one upstream file: Path at Commit in Repo.
type FileSpec = patches.FileSpec

var _ patches.Upstream = (*Fetcher)(nil)

// Diff returns the git-style unified diff from s.Base to s.Head, computed from the cached
// objects (fetched as needed). The output is what `git diff --full-index --no-renames
// --binary Base Head` prints: full blob ids, so that the patch names exactly what it
// applies to, renames as delete plus add, and binary files as literal binary patches.
// Text hunks equal git's where the two diff algorithms agree (they can place an ambiguous
// hunk differently; both apply to the same result); binary payloads differ in their zlib
// bytes.
func (f *Fetcher) Diff(ctx context.Context, s DiffSpec) ([]byte, error) {
	base, err := parseGit(Git{URL: s.Repo, Commit: s.Base})
	if err != nil {
		return nil, err
	}
	head, err := parseGit(Git{URL: s.Repo, Commit: s.Head, Ref: s.Ref})
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("diff %s %s..%s", s.Repo, base.commit, head.commit)
	unlock, err := f.cache.Lock(ctx, cache.KindGit, base.key)
	if err != nil {
		return nil, fetchErr(err, "%s", what)
	}
	defer unlock()
	// One fetch brings both commits, each object once; what the cache has already (the
	// base, after its checkout) is not copied again.
	both := *head
	both.also = []plumbing.Hash{base.commit}
	if err := f.fetchGitLocked(ctx, &both); err != nil {
		return nil, err
	}
	st := openStorage(f.cache.GitDir(base.key))
	defer st.Close()
	var trees [2]*object.Tree
	for i, h := range []plumbing.Hash{base.commit, head.commit} {
		c, err := object.GetCommit(st, h)
		if err != nil {
			return nil, fetchErr(err, "%s: read commit %s", what, h)
		}
		if trees[i], err = c.Tree(); err != nil {
			return nil, fetchErr(err, "%s: read the tree of %s", what, h)
		}
	}
	changes, err := object.DiffTreeWithOptions(ctx, trees[0], trees[1], &object.DiffTreeOptions{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	patch, err := changes.PatchContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	var out bytes.Buffer
	for _, fp := range patch.FilePatches() {
		var b bytes.Buffer
		if err := diff.NewUnifiedEncoder(&b, diff.DefaultContextLines).Encode(filePatch{fp}); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		var old, new []byte
		from, to := fp.Files()
		if from != nil {
			if old, err = blobBytes(st, from.Hash()); err != nil {
				return nil, fetchErr(err, "%s: read %s", what, from.Path())
			}
		}
		if fp.IsBinary() {
			if to != nil {
				if new, err = blobBytes(st, to.Hash()); err != nil {
					return nil, fetchErr(err, "%s: read %s", what, to.Path())
				}
			}
			if err := binaryPatch(&out, b.Bytes(), old, new); err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			continue
		}
		if err := gitHunkHeadings(&out, b.Bytes(), old); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	return out.Bytes(), nil
}

// filePatch is a one-file diff.Patch, so that each file is encoded on its own.
type filePatch struct{ fp diff.FilePatch }

func (p filePatch) FilePatches() []diff.FilePatch { return []diff.FilePatch{p.fp} }
func (p filePatch) Message() string               { return "" }

func blobBytes(st storer.EncodedObjectStorer, h plumbing.Hash) ([]byte, error) {
	o, err := st.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return nil, err
	}
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

var hunkRE = regexp.MustCompile(`^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@`)

// gitHunkHeadings copies one file's diff to out, replacing each hunk header's heading with
// the one git prints: the nearest line above the hunk, in the old file, that starts with a
// letter, '_' or '$', cut to 80 bytes and right-trimmed; searched back only to the previous
// hunk's start, else the previous heading stays (xdiff's default funcname rule).
func gitHunkHeadings(out *bytes.Buffer, fileDiff, old []byte) error {
	lines := bytes.SplitAfter(old, []byte("\n"))
	if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	heading := []byte(nil)
	prev := -1
	for _, l := range bytes.SplitAfter(fileDiff, []byte("\n")) {
		m := hunkRE.FindSubmatch(l)
		if m == nil {
			out.Write(l)
			continue
		}
		start, _ := strconv.Atoi(string(m[1]))
		s1 := start - 1 // 0-based first line of the hunk; git prints start-1 when the count is 0
		if len(m[2]) > 0 && string(m[2]) == "0" {
			s1 = start
		}
		for i := s1 - 1; i > prev && i >= 0 && i < len(lines); i-- {
			if h := funcname(lines[i]); h != nil {
				heading = h
				break
			}
		}
		prev = s1 - 1
		out.Write(m[0])
		if len(heading) > 0 {
			out.WriteByte(' ')
			out.Write(heading)
		}
		out.WriteByte('\n')
	}
	return nil
}

// binaryPatch copies a binary file's diff header and, in place of "Binary files … differ",
// writes git's binary patch: a literal of the new content and one of the old (reverse).
func binaryPatch(out *bytes.Buffer, fileDiff, old, new []byte) error {
	for _, l := range bytes.SplitAfter(fileDiff, []byte("\n")) {
		if !bytes.HasPrefix(l, []byte("Binary files ")) {
			out.Write(l)
			continue
		}
		out.WriteString("GIT binary patch\n")
		for _, b := range [][]byte{new, old} {
			if err := binaryLiteral(out, b); err != nil {
				return err
			}
		}
	}
	return nil
}

// base85 is git's base85 alphabet.
const base85 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz!#$%&()*+-;<=>?@^_`{|}~"

// binaryLiteral writes "literal <size>", the zlib-compressed data in git's base85 lines of
// up to 52 bytes (the first character gives the line's byte count), and a blank line.
func binaryLiteral(out *bytes.Buffer, data []byte) error {
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	fmt.Fprintf(out, "literal %d\n", len(data))
	for b := z.Bytes(); len(b) > 0; {
		n := min(len(b), 52)
		if n <= 26 {
			out.WriteByte(byte('A' + n - 1))
		} else {
			out.WriteByte(byte('a' + n - 27))
		}
		for i := 0; i < n; i += 4 {
			var acc uint32
			for k := 0; k < 4; k++ {
				acc <<= 8
				if i+k < n {
					acc |= uint32(b[i+k])
				}
			}
			var enc [5]byte
			for k := 4; k >= 0; k-- {
				enc[k] = base85[acc%85]
				acc /= 85
			}
			out.Write(enc[:])
		}
		out.WriteByte('\n')
		b = b[n:]
	}
	out.WriteByte('\n')
	return nil
}

func funcname(l []byte) []byte {
	if len(l) == 0 {
		return nil
	}
	c := l[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$') {
		return nil
	}
	if len(l) > 80 {
		l = l[:80]
	}
	return bytes.TrimRight(l, " \t\n\v\f\r")
}

// File returns the content of s.Path at s.Commit in s.Repo, fetching the commit as needed.
func (f *Fetcher) File(ctx context.Context, s FileSpec) ([]byte, error) {
	p, err := parseGit(Git{URL: s.Repo, Commit: s.Commit})
	if err != nil {
		return nil, err
	}
	unlock, err := f.cache.Lock(ctx, cache.KindGit, p.key)
	if err != nil {
		return nil, fetchErr(err, "read %s:%s", p, s.Path)
	}
	defer unlock()
	if err := f.fetchGitLocked(ctx, p); err != nil {
		return nil, err
	}
	st := openStorage(f.cache.GitDir(p.key))
	defer st.Close()
	c, err := object.GetCommit(st, p.commit)
	if err != nil {
		return nil, fetchErr(err, "read %s:%s", p, s.Path)
	}
	file, err := c.File(s.Path)
	if errors.Is(err, object.ErrFileNotFound) {
		return nil, badPin(nil, "read %s:%s: no such file at that commit", p, s.Path)
	}
	if err != nil {
		return nil, fetchErr(err, "read %s:%s", p, s.Path)
	}
	r, err := file.Reader()
	if err != nil {
		return nil, fetchErr(err, "read %s:%s", p, s.Path)
	}
	defer r.Close()
	return io.ReadAll(r)
}
