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

// mapFile maps the size bytes of f (whose size was size at an fstat) read-only, or says
// it cannot (ok false). A file truncated while mapped faults on access: read the mapping
// only inside noFault.
func mapFile(f *os.File, size int64) (m []byte, unmap func(), ok bool) {
	if size < mapMin || int64(int(size)) != size {
		return nil, nil, false
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, nil, false
	}
	_ = unix.Madvise(m, unix.MADV_SEQUENTIAL)
	return m, func() { unix.Munmap(m) }, true
}

// noFault runs f, turning a fault on a mapping (a file truncated while mapped) into
// false.
func noFault(f func()) (ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			// a fault on a mapping, and nothing else (a bug's panic goes on)
			if _, fault := r.(interface {
				runtime.Error
				Addr() uintptr
			}); !fault {
				panic(r)
			}
			ok = false
		}
	}()
	f()
	return true
}

// hashMapped hashes the size bytes of f (whose size was size at an fstat) through a
// read-only mapping. ok is false when the file cannot be mapped or faulted (truncated
// while mapped): the caller reads it instead, from the start, and sees what reading sees.
func hashMapped(ctx context.Context, f *os.File, size int64, h hash.Hash) (ok bool, err error) {
	m, unmap, ok := mapFile(f, size)
	if !ok {
		return false, nil
	}
	defer unmap()
	ok = noFault(func() {
		for off := 0; off < len(m); off += mapChunk {
			if err = ctx.Err(); err != nil {
				return
			}
			h.Write(m[off:min(off+mapChunk, len(m))])
		}
	})
	if !ok {
		return false, nil
	}
	return true, err
}
