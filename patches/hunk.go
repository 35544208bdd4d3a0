package patches

import (
	"fmt"
	"strings"

	"github.com/bluekeyes/go-gitdiff/gitdiff"
)

// HunkResult says where one hunk was applied.
type HunkResult struct {
	// Index is the 1-based hunk number in the file's diff.
	Index int `json:"index"`
	// Line is the 1-based line of the original file where the hunk's old side starts.
	Line int `json:"line"`
	// Offset is Line minus the line the patch gives; 0 unless offset search moved it.
	Offset int `json:"offset"`
}

func (h HunkResult) String() string {
	if h.Offset == 0 {
		return fmt.Sprintf("hunk %d applied at line %d", h.Index, h.Line)
	}
	return fmt.Sprintf("hunk %d applied at line %d, offset %+d", h.Index, h.Line, h.Offset)
}

// hunkFailure describes a hunk that does not fit; the caller adds the patch and file.
type hunkFailure struct {
	hunk     int
	line     int
	expected []string
	found    []string
	reason   string
	// fitLine (1-based, 0: nowhere) is where the hunk's old side is found
	// elsewhere in the file, fitOffset lines from line; need is the max offset
	// with which every hunk of the file fits (0: not every hunk fits anywhere).
	fitLine, fitOffset, need int
}

// splitLines cuts text into lines that keep their "\n"; a last line without one
// is kept as it is. The lines share the string's memory. starts holds where
// each line starts in s, and len(s) last.
func splitLines(s string) (lines []string, starts []int) {
	n := strings.Count(s, "\n") + 1
	lines = make([]string, 0, n)
	starts = make([]int, 0, n+1)
	for at := 0; at < len(s); {
		starts = append(starts, at)
		i := strings.IndexByte(s[at:], '\n')
		if i < 0 {
			lines = append(lines, s[at:])
			break
		}
		lines = append(lines, s[at:at+i+1])
		at += i + 1
	}
	return lines, append(starts, len(s))
}

// applyFragments applies a file's hunks to src, each where the patch says or,
// with maxOffset > 0, at the nearest place at most maxOffset lines away whose
// lines equal the hunk's old side exactly. No fuzz: every context line must
// match. Like git apply, a hunk that starts at line 1 must match at the start of
// the file and a hunk without trailing context at its end. Hunks must come in
// order and must not overlap.
func applyFragments(src string, frags []*gitdiff.TextFragment, maxOffset int) (string, []HunkResult, *hunkFailure) {
	lines, starts := splitLines(src)
	// The result's size is known: one allocation, not a doubling one.
	size := len(src)
	for _, f := range frags {
		for _, l := range f.Lines {
			if l.Old() {
				size -= len(l.Line)
			}
			if l.New() {
				size += len(l.Line)
			}
		}
	}
	var out strings.Builder
	out.Grow(max(size, 0))
	results := make([]HunkResult, 0, len(frags))
	cursor := 0
	old := make([]string, 0, 16)
	for i, f := range frags {
		old = old[:0]
		for _, l := range f.Lines {
			if l.Old() {
				old = append(old, l.Line)
			}
		}
		expected := int(f.OldPosition) - 1
		if f.OldLines == 0 {
			// "-5,0" inserts after line 5.
			expected = int(f.OldPosition)
		}
		matchStart := f.OldPosition <= 1
		matchEnd := f.TrailingContext == 0
		found := fit(lines, old, expected, cursor, maxOffset, matchStart, matchEnd)
		if found < 0 {
			fail := describeFailure(i+1, expected, lines, old, cursor, matchStart, matchEnd, maxOffset)
			// Say what would work: where the hunk fits, and the offset that
			// places every hunk of the file.
			if at := fit(lines, old, expected, cursor, len(lines)+len(old), matchStart, matchEnd); at >= 0 {
				fail.fitLine, fail.fitOffset = at+1, at-expected
				if maxOffset < len(lines) {
					if _, hunks, f2 := applyFragments(src, frags, len(lines)); f2 == nil {
						for _, h := range hunks {
							fail.need = max(fail.need, h.Offset, -h.Offset)
						}
					}
				}
			}
			return "", nil, fail
		}
		out.WriteString(src[starts[cursor]:starts[found]])
		for _, l := range f.Lines {
			if l.New() {
				out.WriteString(l.Line)
			}
		}
		cursor = found + len(old)
		results = append(results, HunkResult{Index: i + 1, Line: found + 1, Offset: found - expected})
	}
	out.WriteString(src[starts[cursor]:])
	return out.String(), results, nil
}

// fit returns the nearest position at most maxOffset lines from expected
// where old equals the file's lines (searched 0, -1, +1, -2, +2, ... as git
// apply does), not before cursor and honouring the start and end anchors;
// -1 if there is none.
func fit(lines, old []string, expected, cursor, maxOffset int, matchStart, matchEnd bool) int {
	// Past this distance every position is outside the file.
	limit := min(maxOffset, max(expected, len(lines)-expected)+1)
	for d := 0; d <= limit; d++ {
		for j, pos := range [2]int{expected - d, expected + d} {
			if d == 0 && j == 1 {
				continue
			}
			if pos < cursor || pos < 0 || pos+len(old) > len(lines) ||
				(matchStart && pos != 0) || (matchEnd && pos+len(old) != len(lines)) {
				continue
			}
			if equalLines(lines[pos:pos+len(old)], old) {
				return pos
			}
		}
	}
	return -1
}

func equalLines(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func describeFailure(hunk, expected int, lines, old []string, cursor int, matchStart, matchEnd bool, maxOffset int) *hunkFailure {
	lo := max(expected, 0)
	hi := min(lo+len(old), len(lines))
	lo = min(lo, hi)
	f := &hunkFailure{
		hunk:     hunk,
		line:     expected + 1,
		expected: append([]string(nil), old...),
		found:    append([]string(nil), lines[lo:hi]...),
		reason:   "context does not match",
	}
	if maxOffset > 0 {
		f.reason = "context does not match here nor within the allowed offset"
	}
	if equalLines(f.found, f.expected) && len(f.found) == len(f.expected) {
		// The lines are there, so a positional rule failed.
		switch {
		case expected < cursor:
			f.reason = "hunk overlaps the previous hunk"
		case matchStart && expected != 0:
			f.reason = "hunk must apply at the start of the file"
		case matchEnd:
			f.reason = "hunk must apply at the end of the file, and the file goes on"
		}
	}
	return f
}
