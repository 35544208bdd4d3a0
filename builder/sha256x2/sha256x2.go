// Package sha256x2 hashes two independent messages at once. SHA-256 is one long chain of
// dependent rounds, so a single message leaves the CPU's SHA unit waiting on the round
// before; on amd64 with the SHA extensions, blocks of two messages interleaved in one
// instruction stream hash at about 1.5 to 1.7 times one message's speed on one core
// (measured on an AMD EPYC with SHA-NI). Elsewhere, and for what is left when one
// message ends, it hashes with crypto/sha256.
//
// The results are plain SHA-256 digests: TestAgainstStdlib and FuzzBlocks2 compare every
// path with crypto/sha256.
package sha256x2

import (
	"crypto/sha256"
	"encoding"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// BlockSize is SHA-256's block size; Blocks2 takes whole blocks.
const BlockSize = 64

// maxAsm is the most bytes of each message one assembly call hashes.
const maxAsm = 64 << 10

var iv = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// Digest is a SHA-256 state after whole blocks. The zero value is not ready: use Reset.
type Digest struct {
	h [8]uint32
	n uint64 // bytes hashed, a multiple of BlockSize
}

// Reset starts a new message.
func (d *Digest) Reset() { d.h, d.n = iv, 0 }

// Blocks2 hashes pa into a and pb into b. len(pa) must equal len(pb) and be a multiple of
// BlockSize.
func Blocks2(a, b *Digest, pa, pb []byte) {
	if len(pa) != len(pb) || len(pa)%BlockSize != 0 {
		panic(fmt.Sprintf("sha256x2: Blocks2 of %d and %d bytes; want equal lengths in whole blocks", len(pa), len(pb)))
	}
	if len(pa) == 0 {
		return
	}
	if haveX2 {
		// in pieces: an assembly function cannot be preempted, and a long call would
		// hold up the garbage collector's stops (crypto/sha256 does the same)
		for off := 0; off < len(pa); off += maxAsm {
			k := min(len(pa)-off, maxAsm)
			blocks2(&a.h, &b.h, &pa[off], &pb[off], k/BlockSize)
		}
		a.n += uint64(len(pa))
		b.n += uint64(len(pb))
		return
	}
	a.write(pa)
	b.write(pb)
}

// Blocks hashes p, whole blocks, into d alone.
func (d *Digest) Blocks(p []byte) {
	if len(p)%BlockSize != 0 {
		panic(fmt.Sprintf("sha256x2: Blocks of %d bytes; want whole blocks", len(p)))
	}
	d.write(p)
}

// Sum returns the hex SHA-256 of what d has hashed followed by tail (any length).
func (d *Digest) Sum(tail []byte) string {
	h := d.std()
	h.Write(tail)
	return hex.EncodeToString(h.Sum(nil))
}

// write hashes whole blocks through crypto/sha256.
func (d *Digest) write(p []byte) {
	h := d.std()
	h.Write(p)
	st, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic("sha256x2: crypto/sha256 state: " + err.Error())
	}
	for i := range d.h {
		d.h[i] = binary.BigEndian.Uint32(st[len(magic)+4*i:])
	}
	d.n += uint64(len(p))
}

// magic heads crypto/sha256's marshaled state: magic, eight big-endian state words, the
// 64-byte pending block, the big-endian byte count.
const magic = "sha\x03"

// std is a crypto/sha256 hash in d's state.
func (d *Digest) std() interface {
	Write([]byte) (int, error)
	Sum([]byte) []byte
} {
	st := make([]byte, 0, len(magic)+32+BlockSize+8)
	st = append(st, magic...)
	for _, w := range d.h {
		st = binary.BigEndian.AppendUint32(st, w)
	}
	st = append(st, make([]byte, BlockSize)...)
	st = binary.BigEndian.AppendUint64(st, d.n)
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(st); err != nil {
		panic("sha256x2: crypto/sha256 state: " + err.Error())
	}
	return h
}
