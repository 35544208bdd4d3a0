//go:build !amd64 || purego

package sha256x2

const haveX2 = false

func blocks2(a, b *[8]uint32, pa, pb *byte, n int) { panic("sha256x2: no blocks2 here") }
