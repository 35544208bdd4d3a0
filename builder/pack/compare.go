package pack

import (
	"context"
	"path"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/diff"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/manifest"
)

// Diff compares two artifacts or installed prefixes (or one of each): `epbuild diff`. In
// an installed prefix, what install adds and no build made is left out: the receipt, the
// bin/ directory with its copy of epbuild (Receipt.Added) and Python's bytecode caches
// (as verify-install leaves them out). An artifact is unpacked
// only up to maxExtract bytes (0: diff.DefaultMaxExtract), and refused as soon as its
// manifest declares more.
func Diff(ctx context.Context, a, b string, maxExtract int64) (*diff.Report, error) {
	return diff.Compare(ctx, a, b, diff.Options{Ignore: installAdded, Normalize: installWritten, MaxExtract: maxExtract,
		Declared: &diff.Declared{Name: manifest.ManifestName, MaxSize: manifest.MaxManifestSize, Bytes: func(b []byte) (int64, error) {
			m, err := manifest.DecodeManifest(b, manifest.ManifestName)
			if err != nil {
				return 0, err
			}
			return manifest.DeclaredBytes(m, b) - manifest.TarSlack, nil
		}}})
}

// installWritten reads back what install wrote into a file of the artifact: env.sh
// names the install's directory and id, which the artifact's copy leaves empty.
func installWritten(rel string) func([]byte) ([]byte, error) {
	if rel != manifest.EnvName {
		return nil
	}
	return func(b []byte) ([]byte, error) {
		tmpl, _, err := envsh.UnbakeEnv(string(b))
		return []byte(tmpl), err
	}
}

func installAdded(rel string, e archive.Entry) bool {
	return rel == manifest.ReceiptName || rel == manifest.BinEpbuild || rel == manifest.BinDir && e.Type == archive.TypeDir ||
		e.Type == archive.TypeDir && path.Base(rel) == "__pycache__"
}
