package pack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/recipes/userfile"
)

// ArtifactName is <recipe>-<short plan key>.tar.zst.
func ArtifactName(p *plan.Plan) string { return p.Recipe + "-" + p.Key[:12] + ".tar.zst" }

// ReadSum returns the sha256 recorded beside an artifact (NAME.sha256), computing and
// recording it if absent or unreadable (a sidecar that is not a small regular file is
// replaced, not read).
func ReadSum(path string) (string, error) {
	if b, err := userfile.ReadFile(path+".sha256", userfile.SumLimit); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 && len(f[0]) == 64 && hexString(f[0]) {
			return strings.ToLower(f[0]), nil
		}
	}
	sum, err := disk.FileSHA256(path)
	if err != nil {
		return "", err
	}
	_ = writeSidecar(path, sum)
	return sum, nil
}

func hexString(s string) bool {
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// PublishArtifact copies the stored artifact to dst atomically, unless dst already
// holds the same bytes, and writes (or repairs) dst.sha256. The copy is hashed as it is
// written: a store whose artifact and record disagree is not published.
func PublishArtifact(src, dst, sum string) error {
	if got, err := disk.FileSHA256(dst); err == nil && got == sum {
		return PublishError(writeSidecar(dst, sum), src, dst)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return PublishError(err, src, dst)
	}
	tmp := dst + ".tmp-" + strconv.Itoa(os.Getpid())
	got, err := disk.CopyHashed(src, tmp)
	if err == nil && got != sum {
		err = fmt.Errorf("the stored artifact %s has sha256 %s, its record says %s: the cache is damaged; rebuild it with --force=package", src, got, sum)
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
		return PublishError(err, src, dst)
	}
	return PublishError(writeSidecar(dst, sum), src, dst)
}

// PublishError says what failed, and names a full output directory as such (exit 3).
func PublishError(err error, src, dst string) error {
	if err == nil {
		return nil
	}
	var need int64
	if st, serr := os.Stat(src); serr == nil {
		need = st.Size()
	}
	return disk.NoSpaceOr(fmt.Errorf("write artifact %s: %w", dst, err), "write artifact "+dst, filepath.Dir(dst), need,
		"free space there, or write the artifact elsewhere with -o DIR; the build itself is cached")
}

// writeSidecar makes path.sha256 say sum, in sha256sum's format, replacing a missing or
// damaged one atomically (a reader sees the old file or the new one, never a part).
func writeSidecar(path, sum string) error {
	line := sum + "  " + filepath.Base(path) + "\n"
	side := path + ".sha256"
	if b, err := userfile.ReadFile(side, userfile.SumLimit); err == nil && string(b) == line {
		return nil
	}
	tmp := side + ".tmp-" + strconv.Itoa(os.Getpid())
	err := os.WriteFile(tmp, []byte(line), 0o644)
	if err == nil {
		err = os.Rename(tmp, side)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", side, err)
	}
	return nil
}

// PublishFetched moves a fetched artifact and what lies beside it into outDir, where a
// build writes them: the wheels first and the artifact last, so that whoever sees the
// artifact sees everything beside it. An SBOM the store lacks is made from the manifest,
// as the package stage makes it.
func PublishFetched(got *Fetched, outDir string, p *plan.Plan) (*Set, error) {
	res := &Set{SHA256: got.SHA256, Artifact: filepath.Join(outDir, ArtifactName(p))}
	res.SBOM = res.Artifact + SBOMSuffix
	if got.SBOM == "" {
		b, err := sbomBytes(got.Manifest, filepath.Base(got.Artifact), got.SHA256, got.Manifest.Epbuild, SBOMCredits{})
		if err != nil {
			return nil, fmt.Errorf("the SBOM of %s: %w", got.Artifact, err)
		}
		got.SBOM = got.Artifact + SBOMSuffix
		if err := os.WriteFile(got.SBOM, b, 0o644); err != nil {
			return nil, PublishError(err, got.Artifact, res.SBOM)
		}
	}
	if len(got.Wheels) > 0 {
		if err := os.MkdirAll(filepath.Join(outDir, WheelDir(p)), 0o755); err != nil {
			return nil, PublishError(err, got.Artifact, outDir)
		}
	}
	type move struct{ from, to string }
	var moves []move
	for _, w := range got.Wheels {
		to := filepath.Join(outDir, WheelDir(p), filepath.Base(w))
		moves = append(moves, move{w, to})
		res.Wheels = append(res.Wheels, to)
	}
	moves = append(moves, move{got.SBOM, res.SBOM}, move{got.Artifact + ".sha256", res.Artifact + ".sha256"}, move{got.Artifact, res.Artifact})
	for _, mv := range moves {
		if err := os.Rename(mv.from, mv.to); err != nil {
			if errors.Is(err, os.ErrNotExist) && mv.from == got.Artifact+".sha256" {
				err = writeSidecar(res.Artifact, got.SHA256)
			}
			if err != nil {
				return nil, PublishError(err, mv.from, mv.to)
			}
		}
	}
	return res, nil
}

// Fetched is an artifact a shared build cache fetched, with what lay beside it there.
type Fetched struct {
	Artifact string // the path of the .tar.zst, in the directory it was fetched into
	SHA256   string
	Manifest *manifest.Manifest
	SBOM     string   // "" when the store has none
	Wheels   []string // the wheels the store has, in the directory it was fetched into
	// From is what was fetched (reference and digest).
	From string
}
