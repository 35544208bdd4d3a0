package archive

import (
	"context"
	"hash"
	"os"
	"runtime"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// mapMin is the size from which a file is hashed through a mapping of the page cache
// rather than read into a buffer: the copy read(2) makes costs about a tenth of the CPU of
// hashing with SHA extensions (measured on 4 MiB files), while for small files mmap and
// munmap cost more than the copy.
const mapMin = 256 << 10

// mapChunk is how much is hashed between checks of ctx.
const mapChunk = 4 << 20

// hashMapped hashes the size bytes of f (whose size was size at an fstat) through a
// read-only mapping. ok is false when the file cannot be mapped or faulted (truncated
// while mapped): the caller reads it instead, from the start, and sees what reading sees.
func hashMapped(ctx context.Context, f *os.File, size int64, h hash.Hash) (ok bool, err error) {
	if size < mapMin || int64(int(size)) != size {
		return false, nil
	}
	m, merr := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if merr != nil {
		return false, nil
	}
	defer unix.Munmap(m)
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if _, fault := r.(runtime.Error); !fault {
				panic(r)
			}
			ok, err = false, nil
		}
	}()
	_ = unix.Madvise(m, unix.MADV_SEQUENTIAL)
	for off := 0; off < len(m); off += mapChunk {
		if err := ctx.Err(); err != nil {
			return true, err
		}
		h.Write(m[off:min(off+mapChunk, len(m))])
	}
	return true, nil
}
