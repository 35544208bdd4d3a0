//go:build !unix

package gitobj

import "os"

// mapPack does not map off Unix: packs are read with ReadAt.
func mapPack(f *os.File, size int64) []byte { return nil }

func unmapPack(b []byte) error { return nil }
