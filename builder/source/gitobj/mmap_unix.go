//go:build unix

package gitobj

import (
	"os"
	"syscall"
)

// mapPack maps a pack read-only, so that objects are parsed and inflated where they lie:
// no read call per object (a checkout read five per blob) and no copy of the packed bytes.
// Packs are never rewritten in place (git writes a new one and removes the old), so the
// mapping stays valid while the file is open. nil: not mapped, read with ReadAt.
func mapPack(f *os.File, size int64) []byte {
	if size <= 0 || int64(int(size)) != size {
		return nil
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil
	}
	return b
}

func unmapPack(b []byte) error {
	if b == nil {
		return nil
	}
	return syscall.Munmap(b)
}
