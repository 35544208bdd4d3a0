package manifest

import (
	"fmt"

	"github.com/epbuild/epbuild/builder/archive"
)

// BadArtifactError is an artifact that failed its checks before anything was installed:
// damaged, truncated, not matching its manifest, or not an epbuild artifact. Bad input,
// exit 2; the prefix was not touched.
type BadArtifactError struct {
	Artifact string
	Err      error
}

func (e *BadArtifactError) Error() string {
	return fmt.Sprintf("install %s: the artifact is unusable, nothing was installed: %v", e.Artifact, e.Err)
}

func (e *BadArtifactError) Unwrap() error { return e.Err }

// ExitCode: bad input.
func (e *BadArtifactError) ExitCode() int { return 2 }

// declaredBytes is the data an artifact may hold: its files' declared sizes and the
// manifest, plus tar's framing.
func DeclaredBytes(m *Manifest, raw []byte) int64 {
	n := int64(len(raw)) + TarSlack
	for _, e := range m.Files {
		if e.Type == archive.TypeFile {
			n += max(e.Size, 0)
		}
	}
	return n
}

func CountFiles(m *Manifest) int {
	n := 0
	for _, e := range m.Files {
		if e.Type == archive.TypeFile {
			n++
		}
	}
	return n
}
