package patches

import "embed"

// sets holds the shipped patch sets. A set with its own patch files needs its
// files matched here too (for example */*.patch): embed refuses a pattern that
// matches nothing, so add it with the first such set.
//
//go:embed */set.yaml */*.patch
var sets embed.FS

// Load reads the patch sets shipped in the binary.
func Load() (*Catalog, error) {
	return LoadFS(sets)
}
