package patches

import (
	"bytes"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// splitMessages cuts an mbox series into its messages, each starting at a
// line "From <40-hex> ". go-gitdiff parses a concatenated series without error
// into one merged patch, which would apply a file's later commits against its
// original text; each message must be parsed and applied on its own, in order.
// Text that is not an mbox is one message.
func splitMessages(data []byte) [][]byte {
	starts := messageStarts(data)
	if len(starts) <= 1 {
		return [][]byte{data}
	}
	// Text before the first message would be lost silently; keep it with the
	// first message, where the parser treats it as a preamble.
	starts[0] = 0
	msgs := make([][]byte, 0, len(starts))
	for i, s := range starts {
		end := len(data)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		msgs = append(msgs, data[s:end])
	}
	return msgs
}

// messageStarts finds the offsets of the lines "From <40-hex> ".
func messageStarts(data []byte) []int {
	var starts []int
	for i := 0; i < len(data); {
		j := bytes.Index(data[i:], []byte("From "))
		if j < 0 {
			break
		}
		at := i + j
		i = at + 5
		if at > 0 && data[at-1] != '\n' {
			continue
		}
		if len(data) < at+5+41 || data[at+5+40] != ' ' {
			continue
		}
		if isLowerHex(data[at+5 : at+5+40]) {
			starts = append(starts, at)
		}
	}
	return starts
}

func isLowerHex(b []byte) bool {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// parsePatch splits and parses a patch into its messages' files, and refuses
// any path epbuild will not write.
func parsePatch(name string, data []byte) ([][]*gitdiff.File, error) {
	msgs := splitMessages(data)
	parsed := parseMessages(msgs)
	out := make([][]*gitdiff.File, 0, len(msgs))
	total := 0
	for i := range msgs {
		files, err := parsed[i].files, parsed[i].err
		if err != nil {
			if len(msgs) > 1 {
				return nil, fmt.Errorf("patch %s: parse message %d of %d: %w", name, i+1, len(msgs), err)
			}
			return nil, fmt.Errorf("patch %s: parse: %w", name, err)
		}
		for _, f := range files {
			if err := checkFile(name, f); err != nil {
				return nil, err
			}
		}
		total += len(files)
		out = append(out, files)
	}
	if total == 0 {
		return nil, fmt.Errorf("patch %s: no file changes found (is it a diff?)", name)
	}
	return out, nil
}

// parsedMessage is one message parsed by go-gitdiff.
type parsedMessage struct {
	files []*gitdiff.File
	err   error
}

// parseMessages parses the messages of a series, several at once.
func parseMessages(msgs [][]byte) []parsedMessage {
	out := make([]parsedMessage, len(msgs))
	parse := func(i int) {
		out[i].files, _, out[i].err = gitdiff.Parse(bytes.NewReader(msgs[i]))
	}
	workers := min(runtime.GOMAXPROCS(0), len(msgs), maxParsers)
	if workers <= 1 {
		for i := range msgs {
			parse(i)
		}
		return out
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(msgs); i = int(next.Add(1) - 1) {
				parse(i)
			}
		})
	}
	wg.Wait()
	return out
}

// maxParsers bounds the messages parsed at once.
const maxParsers = 8

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
