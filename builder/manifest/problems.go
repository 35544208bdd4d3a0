package manifest

import (
	"fmt"
	"io/fs"
	"sort"
)

// topFileMode is the mode of manifest.json and the receipt: the artifact carries the
// manifest as 0644 and install writes the receipt so, whatever the umask.
const TopFileMode fs.FileMode = 0o644

// File problem kinds, as they appear in check IDs (files.<kind>:<path>).
const (
	ProblemChanged    = "changed"
	ProblemMissing    = "missing"
	ProblemExtra      = "extra"
	ProblemMode       = "mode"
	ProblemType       = "type"
	ProblemUnreadable = "unreadable"
	// ProblemBytecode: a .pyc in a __pycache__ directory that is not the compiled form of
	// a source the manifest lists.
	ProblemBytecode = "bytecode"
)

// FileProblem is one way an installed tree differs from its manifest.
type FileProblem struct {
	Path     string `json:"path"`
	Kind     string `json:"kind"`
	Expected string `json:"expected,omitempty"`
	Found    string `json:"found,omitempty"`
}

func SortProblems(problems []FileProblem) {
	sort.Slice(problems, func(i, j int) bool {
		if problems[i].Path != problems[j].Path {
			return problems[i].Path < problems[j].Path
		}
		return problems[i].Kind < problems[j].Kind
	})
}

func DescribeContent(size int64, sum string) string {
	return fmt.Sprintf("%d bytes, sha256 %s", size, sum)
}

func SizeChange(got, want int64) string {
	if got < want {
		return fmt.Sprintf("%d bytes: truncated (%d bytes short)", got, want-got)
	}
	return fmt.Sprintf("%d bytes: %d bytes longer", got, got-want)
}
