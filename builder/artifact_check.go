package builder

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// CheckArtifact runs install's checks on an artifact without installing it: its sha256
// against ARTIFACT.sha256 when there is one, then extraction into a temporary directory
// under scratch ("" means os.TempDir()) and every entry's sha256, mode and type against
// the manifest it carries. The temporary directory is removed whatever happens. It returns the manifest, its bytes
// and the artifact's sha256; a failed check is a *BadArtifactError (exit 2). Exporters of
// the artifact (the OCI push and pull) call it so that there is one artifact check.
func CheckArtifact(ctx context.Context, art, scratch string) (*Manifest, []byte, string, error) {
	sum, err := checkArtifactSum(art)
	if err != nil {
		return nil, nil, "", err
	}
	info, err := os.Stat(art)
	if err != nil {
		return nil, nil, "", &BadArtifactError{Artifact: art, Err: err}
	}
	// the manifest first, without writing anything: it bounds what extraction may write
	m, raw, err := readArtifactManifest(ctx, art, info.Size())
	if err != nil {
		return nil, nil, "", err
	}
	tmp, err := os.MkdirTemp(scratch, ".epbuild-check-")
	if err != nil {
		return nil, nil, "", fmt.Errorf("check %s: %w", art, err)
	}
	defer func() { _ = makeWritable(tmp); _ = os.RemoveAll(tmp) }()
	if err := stageArtifact(ctx, art, filepath.Join(tmp, "tree"), m, raw); err != nil {
		return nil, nil, "", err
	}
	return m, raw, sum, nil
}
