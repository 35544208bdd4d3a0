//go:build amd64 && !purego

package sha256x2

import "golang.org/x/sys/cpu"

//go:generate go run gen.go

// haveX2: the SHA extensions (CPUID leaf 7, EBX bit 29), and the SSSE3/SSE4.1/AVX forms the
// other instructions use, as crypto/sha256 asks for its own SHA-NI path.
var haveX2 = cpu.X86.HasAVX && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41 && hasSHA()

//go:noescape
func blocks2(a, b *[8]uint32, pa, pb *byte, n int)

func hasSHA() bool {
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 7 {
		return false
	}
	_, ebx, _, _ := cpuid(7, 0)
	return ebx&(1<<29) != 0
}

//go:noescape
func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
