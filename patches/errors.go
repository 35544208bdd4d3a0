package patches

import (
	"fmt"
	"strings"
)

// ConflictError says that a patch does not fit the tree: a hunk whose context
// is not where the patch says (nor within the allowed offset), or a file that
// is missing, already present, or of the wrong mode.
type ConflictError struct {
	Patch string
	File  string
	// Hunk is the 1-based hunk number in the file's diff; 0 when the conflict is
	// about the file itself (Reason says what).
	Hunk int
	// Line is the 1-based line of the original file where the patch expects the hunk.
	Line int
	// Expected are the hunk's old-side lines (context and deletions); Found the
	// tree's lines at Line, as many as there are (fewer at the end of the file).
	Expected []string
	Found    []string
	Reason   string
}

func (e *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "patch %s: %s: ", e.Patch, e.File)
	if e.Hunk > 0 {
		fmt.Fprintf(&b, "hunk %d at line %d: ", e.Hunk, e.Line)
	}
	b.WriteString(e.Reason)
	if i := firstDifference(e.Expected, e.Found); i >= 0 {
		fmt.Fprintf(&b, ": line %d: expected %s, found %s", e.Line+i, quoteLine(e.Expected, i), quoteLine(e.Found, i))
	}
	return b.String()
}

// Context renders the expected and found lines side by side in a form a
// person can compare: "-" lines are what the patch expects, "+" what the tree has.
func (e *ConflictError) Context() string {
	var b strings.Builder
	for i, l := range e.Expected {
		fmt.Fprintf(&b, "expected %5d  %s\n", e.Line+i, strings.TrimSuffix(l, "\n"))
	}
	for i, l := range e.Found {
		fmt.Fprintf(&b, "found    %5d  %s\n", e.Line+i, strings.TrimSuffix(l, "\n"))
	}
	return b.String()
}

func firstDifference(expected, found []string) int {
	if expected == nil && found == nil {
		return -1
	}
	for i := range expected {
		if i >= len(found) || expected[i] != found[i] {
			return i
		}
	}
	if len(found) > len(expected) {
		return len(expected)
	}
	return -1
}

func quoteLine(lines []string, i int) string {
	if i >= len(lines) {
		return "end of file"
	}
	return fmt.Sprintf("%q", strings.TrimSuffix(lines[i], "\n"))
}

// AlreadyAppliedError says that a patch is already in the tree: it does not
// apply, but its reverse applies cleanly.
type AlreadyAppliedError struct {
	Patch string
}

func (e *AlreadyAppliedError) Error() string {
	return fmt.Sprintf("patch %s: already applied (it does not apply, and its reverse applies cleanly)", e.Patch)
}

// UnsafePathError says that a patch names a path epbuild refuses to write:
// outside the tree, absolute, inside .git, or through a symlink.
type UnsafePathError struct {
	Patch  string
	Path   string
	Reason string
}

func (e *UnsafePathError) Error() string {
	return fmt.Sprintf("patch %s: %s: refused: %s", e.Patch, e.Path, e.Reason)
}

// PinError says that fetched content does not match its sha256 pin.
type PinError struct {
	Patch string
	// What names the content: a set file or repo@commit:path.
	What string
	Want string
	Got  string
}

func (e *PinError) Error() string {
	return fmt.Sprintf("patch %s: %s: sha256 is %s, pinned %s", e.Patch, e.What, e.Got, e.Want)
}
