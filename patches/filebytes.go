package patches

import (
	"context"
	"fmt"
	"io"
)

// FileBytes reads a patch file of the set (a KindFile patch) whole, within the set's
// size limit and checked against its pin: the bytes an SBOM ships as the patch's diff.
func (s *Set) FileBytes(ctx context.Context, p Patch) ([]byte, error) {
	if p.Kind() != KindFile {
		return nil, fmt.Errorf("patch %s: not a file of the set", p.Name)
	}
	r, done, err := s.openOwnFile(ctx, p)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	if derr := done(); err == nil {
		err = derr
	}
	if err != nil {
		return nil, fmt.Errorf("patch %s: read %s: %w", p.Name, p.File, err)
	}
	return b, nil
}
