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
	// FitLine, when not 0, is the 1-based line where the hunk's old side was
	// found elsewhere in the file, FitOffset lines from Line. NeedOffset is the
	// max offset with which every hunk of the file fits; 0 when some hunk fits
	// nowhere.
	FitLine, FitOffset, NeedOffset int
}

// contextLines is how many lines of expected and found text an error shows.
const contextLines = 3

// Error says where the patch does not fit and, on the following lines, what
// would work and the first lines that differ, as expected and as found.
func (e *ConflictError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "patch %s: %s: ", e.Patch, e.File)
	if e.Hunk > 0 {
		fmt.Fprintf(&b, "hunk %d at line %d: ", e.Hunk, e.Line)
	}
	b.WriteString(e.Reason)
	i := firstDifference(e.Expected, e.Found)
	if i >= 0 {
		fmt.Fprintf(&b, ": line %d: expected %s, found %s", e.Line+i, quoteLine(e.Expected, i), quoteLine(e.Found, i))
	}
	if s := e.Suggestion(); s != "" {
		b.WriteString("\n  ")
		b.WriteString(s)
	}
	if i >= 0 && e.FitLine != 0 {
		// Three lines from the first difference, as the patch expects them and
		// as the tree has them.
		for _, side := range []struct {
			name  string
			lines []string
		}{{"expected", e.Expected}, {"found   ", e.Found}} {
			for j := i; j < min(i+contextLines, len(side.lines)); j++ {
				fmt.Fprintf(&b, "\n  %s %5d  %s", side.name, e.Line+j, strings.TrimSuffix(side.lines[j], "\n"))
			}
		}
	}
	return b.String()
}

// Suggestion says what would make the hunk apply, when the search found a
// place for it: "hunk 1 fits at line 94 (offset -9): pass `--max-offset 11`,
// or pin a base where it applies cleanly". Empty when it fits nowhere.
func (e *ConflictError) Suggestion() string {
	if e.FitLine == 0 {
		return ""
	}
	s := fmt.Sprintf("hunk %d fits at line %d (offset %+d)", e.Hunk, e.FitLine, e.FitOffset)
	if e.NeedOffset == 0 {
		return s + ", but not every hunk of " + e.File + " fits anywhere: pin a base where it applies cleanly"
	}
	return s + fmt.Sprintf(": pass `--max-offset %d` (or max-offset: %d in the set), or pin a base where it applies cleanly", e.NeedOffset, e.NeedOffset)
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
