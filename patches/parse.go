package patches

import (
	"bytes"
	"fmt"
	"io/fs"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// parsePatch parses a whole patch into its messages' files, and refuses any
// path epbuild will not write. (Apply parses a patch piece by piece as it
// applies it, see applyStream; this is the whole patch at once, to undo it.)
func parsePatch(name string, data []byte) ([][]*gitdiff.File, error) {
	c := newChunker(bytes.NewReader(data))
	var out [][]*gitdiff.File
	var first error
	firstMsg, total := 0, 0
	for {
		p, more, err := c.piece()
		if err != nil {
			return nil, fmt.Errorf("patch %s: read: %w", name, err)
		}
		if !more {
			break
		}
		for len(out) <= p.msg {
			out = append(out, nil)
		}
		if first != nil {
			continue // counting the messages, for the error
		}
		files, err := parsePiece(name, p)
		if err != nil {
			first, firstMsg = err, p.msg
			continue
		}
		out[p.msg] = append(out[p.msg], files...)
		total += len(files)
	}
	if first != nil {
		return nil, messageError(name, firstMsg, len(out), first)
	}
	if total == 0 {
		return nil, fmt.Errorf("patch %s: no file changes found (is it a diff?)", name)
	}
	return out, nil
}

// checkFile refuses paths outside the tree, absolute, or inside .git, and file
// types git can record but epbuild does not write (symlinks, submodules).
func checkFile(patch string, f *gitdiff.File) error {
	for _, p := range []string{f.OldName, f.NewName} {
		if p == "" {
			continue
		}
		if reason := unsafeReason(p); reason != "" {
			return &UnsafePathError{Patch: patch, Path: p, Reason: reason}
		}
	}
	shown := f.NewName
	if shown == "" {
		shown = f.OldName
	}
	if f.OldName == "" && f.NewName == "" {
		return fmt.Errorf("patch %s: a file diff names no file", patch)
	}
	for _, m := range []fs.FileMode{f.OldMode, f.NewMode} {
		switch m & 0o170000 {
		case 0, 0o100000:
		case 0o120000:
			return &UnsafePathError{Patch: patch, Path: shown, Reason: "symlink entries (mode 120000) are not applied"}
		case 0o160000:
			return &UnsafePathError{Patch: patch, Path: shown, Reason: "submodule entries (mode 160000) are not applied"}
		default:
			return fmt.Errorf("patch %s: %s: unsupported mode %o", patch, shown, m)
		}
	}
	if f.IsBinary && f.BinaryFragment == nil {
		return fmt.Errorf("patch %s: %s: binary change without data (make the patch with git diff --binary)", patch, shown)
	}
	return nil
}

// unsafeReason says why a path named by a patch is refused, or "" when it is a
// plain relative path inside the tree.
func unsafeReason(p string) string {
	switch {
	case strings.HasPrefix(p, "/"):
		return "absolute path"
	case strings.ContainsRune(p, 0):
		return "path contains a NUL byte"
	case strings.ContainsRune(p, '\\'):
		return "path contains a backslash"
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "..":
			return "path leaves the tree (..)"
		case c == "" || c == ".":
			return "path has an empty or '.' component"
		case strings.EqualFold(c, ".git"):
			// EqualFold: .GIT is the same directory on case-insensitive file systems.
			return "path is inside .git"
		}
	}
	return ""
}

// reverseFile returns the diff that undoes f, or nil when f cannot be reversed
// (a copy; a binary change without its reverse data).
func reverseFile(f *gitdiff.File) *gitdiff.File {
	if f.IsCopy || (f.IsBinary && f.ReverseBinaryFragment == nil) {
		return nil
	}
	r := &gitdiff.File{
		OldName:               f.NewName,
		NewName:               f.OldName,
		IsNew:                 f.IsDelete,
		IsDelete:              f.IsNew,
		IsRename:              f.IsRename,
		OldMode:               f.NewMode,
		NewMode:               f.OldMode,
		OldOIDPrefix:          f.NewOIDPrefix,
		NewOIDPrefix:          f.OldOIDPrefix,
		IsBinary:              f.IsBinary,
		BinaryFragment:        f.ReverseBinaryFragment,
		ReverseBinaryFragment: f.BinaryFragment,
	}
	if f.OldMode != 0 && f.NewMode == 0 && !f.IsDelete {
		// "index a..b 100644": one mode for both sides.
		r.OldMode, r.NewMode = f.OldMode, 0
	}
	for _, frag := range f.TextFragments {
		rf := &gitdiff.TextFragment{
			Comment:         frag.Comment,
			OldPosition:     frag.NewPosition,
			OldLines:        frag.NewLines,
			NewPosition:     frag.OldPosition,
			NewLines:        frag.OldLines,
			LinesAdded:      frag.LinesDeleted,
			LinesDeleted:    frag.LinesAdded,
			LeadingContext:  frag.LeadingContext,
			TrailingContext: frag.TrailingContext,
			Lines:           make([]gitdiff.Line, len(frag.Lines)),
		}
		for i, l := range frag.Lines {
			switch l.Op {
			case gitdiff.OpAdd:
				l.Op = gitdiff.OpDelete
			case gitdiff.OpDelete:
				l.Op = gitdiff.OpAdd
			}
			rf.Lines[i] = l
		}
		r.TextFragments = append(r.TextFragments, rf)
	}
	return r
}

// reversePatch undoes a whole patch: its messages in reverse order.
func reversePatch(msgs [][]*gitdiff.File) [][]*gitdiff.File {
	out := make([][]*gitdiff.File, 0, len(msgs))
	for i := len(msgs) - 1; i >= 0; i-- {
		files := make([]*gitdiff.File, 0, len(msgs[i]))
		for _, f := range msgs[i] {
			r := reverseFile(f)
			if r == nil {
				return nil
			}
			files = append(files, r)
		}
		out = append(out, files)
	}
	return out
}
