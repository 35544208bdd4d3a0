package builder

import (
	"context"
	"path"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/diff"
)

// Diff compares two artifacts or installed prefixes (or one of each): `epbuild diff`. In
// an installed prefix, what install adds and no build made is left out: the receipt and
// Python's bytecode caches (as verify-install leaves them out).
func Diff(ctx context.Context, a, b string) (*diff.Report, error) {
	return diff.Compare(ctx, a, b, diff.Options{Ignore: installAdded})
}

func installAdded(rel string, e archive.Entry) bool {
	return rel == ReceiptName || e.Type == archive.TypeDir && path.Base(rel) == "__pycache__"
}
