package inspect

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// needTool skips when a real component the test drives is missing.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s not found on PATH: this test drives the real tool", name)
	}
	return p
}

// run runs a command in dir and fails the test with its output on error.
func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fbEntry describes one fat binary entry to write, with the header values
// nvcc 13.0.88 wrote in the probe (see the layout comment in fatbin.go).
// The numbers are spelled out here rather than taken from the reader's
// constants, so that a wrong constant there fails these tests.
type fbEntry struct {
	ptx      bool
	sm       uint32
	variant  Variant // sets the entry-flag bit for "a"/"f"; base sets none
	noBits   bool    // write no variant bit even for "a"/"f" (older toolkits)
	compress string  // "", "zstd" or "lz" (opaque bytes flagged 0x2000)
	payload  []byte  // cubin image or PTX text
}

func align8(n int) int { return (n + 7) &^ 7 }

// buildFatbin lays out containers the way nvcc does: 16-byte container
// header, then entries, each a header (64 bytes for cubins below sm_100,
// 80 for PTX, 96 for sm_100+ cubins, the last two with an options block at
// 0x40) followed by its payload padded to 8 bytes.
func buildFatbin(t *testing.T, containers ...[]fbEntry) []byte {
	t.Helper()
	le := binary.LittleEndian
	var out []byte
	for _, c := range containers {
		var body []byte
		for _, e := range c {
			kind, hsize, major, minor := uint16(2), 64, uint16(1), uint16(8)
			flags := uint64(0x11) // 64-bit, Linux host
			if e.ptx {
				kind, hsize, major, minor = 1, 80, 9, 0
			} else if e.sm >= 100 {
				hsize = 96
			}
			if e.sm >= 100 {
				flags |= 0x1000000
			}
			if !e.noBits {
				switch e.variant {
				case VariantArch:
					flags |= 0x100000
				case VariantFamily:
					flags |= 0x200000
				}
			}
			data := e.payload
			var compSize, rawSize int
			switch e.compress {
			case "zstd":
				enc, err := zstd.NewWriter(nil)
				if err != nil {
					t.Fatal(err)
				}
				data = enc.EncodeAll(e.payload, nil)
				enc.Close()
				compSize, rawSize = len(data), len(e.payload)
				flags |= 0x8000
			case "lz":
				compSize, rawSize = len(data), len(data)*3
				flags |= 0x2000
			}
			h := make([]byte, hsize)
			le.PutUint16(h[0:], kind)
			le.PutUint16(h[2:], 0x0101)
			le.PutUint32(h[4:], uint32(hsize))
			le.PutUint64(h[8:], uint64(align8(len(data))))
			le.PutUint32(h[16:], uint32(compSize))
			le.PutUint16(h[24:], minor)
			le.PutUint16(h[26:], major)
			le.PutUint32(h[28:], e.sm)
			le.PutUint64(h[40:], flags)
			le.PutUint64(h[56:], uint64(rawSize))
			if hsize > 64 {
				le.PutUint32(h[20:], 0x40) // options block
				le.PutUint32(h[64:], 0x48)
				if !e.ptx {
					le.PutUint32(h[68:], 0x10)
					le.PutUint32(h[72:], 0x00090200)
					le.PutUint32(h[76:], 0x080b0400)
				}
			}
			body = append(body, h...)
			body = append(body, data...)
			body = append(body, make([]byte, align8(len(data))-len(data))...)
		}
		hdr := make([]byte, 16)
		le.PutUint32(hdr[0:], 0xBA55ED50)
		le.PutUint16(hdr[4:], 1)
		le.PutUint16(hdr[6:], 16)
		le.PutUint64(hdr[8:], uint64(len(body)))
		out = append(out, hdr...)
		out = append(out, body...)
	}
	return out
}

// cubinImage writes a minimal cubin: an ELF64 header with EM_CUDA, the
// given EI_ABIVERSION and e_flags, and, when tkArgs is set, a
// .note.nv.tkinfo note laid out as ptxas 13.0 writes it (six u32 offsets,
// then NUL-terminated object name, tool, version, branch and arguments).
func cubinImage(abi byte, eflags uint32, tkArgs string) []byte {
	le := binary.LittleEndian
	shstr := []byte("\x00.shstrtab\x00.note.nv.tkinfo\x00")
	var note []byte
	if tkArgs != "" {
		strs := []string{"", "ptxas", "Cuda compilation tools, release 13.0, V13.0.88", "Build cuda_13.0.r13.0/compiler.0_0", tkArgs}
		desc := make([]byte, 24)
		le.PutUint32(desc[0:], 2)
		var pool []byte
		for i, s := range strs {
			le.PutUint32(desc[4+4*i:], uint32(len(pool)))
			pool = append(pool, s...)
			pool = append(pool, 0)
		}
		desc = append(desc, pool...)
		desc = append(desc, make([]byte, align4(len(desc))-len(desc))...)
		name := []byte("NVIDIA Corp\x00")
		note = make([]byte, 12)
		le.PutUint32(note[0:], uint32(len(name)))
		le.PutUint32(note[4:], uint32(len(desc)))
		le.PutUint32(note[8:], 2000)
		note = append(note, name...)
		note = append(note, desc...)
	}
	var b bytes.Buffer
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF")
	// ELFOSABI: 0x41 with the CUDA 13 ABI version 8, 0x33 with 7 (as in
	// cubins nvcc 12 and earlier embed).
	osabi := byte(0x41)
	if abi < 8 {
		osabi = 0x33
	}
	hdr[4], hdr[5], hdr[6], hdr[7], hdr[8] = 2, 1, 1, osabi, abi
	le.PutUint16(hdr[16:], 2)   // ET_EXEC
	le.PutUint16(hdr[18:], 190) // EM_CUDA
	le.PutUint32(hdr[20:], 1)
	le.PutUint32(hdr[48:], eflags)
	le.PutUint16(hdr[52:], 64)
	le.PutUint16(hdr[58:], 64)
	nsec := 2
	if note != nil {
		nsec = 3
	}
	shstrOff := 64
	noteOff := align8(shstrOff + len(shstr))
	shoff := align8(noteOff + len(note))
	le.PutUint64(hdr[40:], uint64(shoff))
	le.PutUint16(hdr[60:], uint16(nsec))
	le.PutUint16(hdr[62:], 1)
	b.Write(hdr)
	b.Write(shstr)
	b.Write(make([]byte, noteOff-b.Len()))
	b.Write(note)
	b.Write(make([]byte, shoff-b.Len()))
	sh := func(name, typ uint32, off, size int, align uint64) {
		s := make([]byte, 64)
		le.PutUint32(s[0:], name)
		le.PutUint32(s[4:], typ)
		le.PutUint64(s[24:], uint64(off))
		le.PutUint64(s[32:], uint64(size))
		le.PutUint64(s[48:], align)
		b.Write(s)
	}
	sh(0, 0, 0, 0, 0)
	sh(1, 3, shstrOff, len(shstr), 1) // .shstrtab, SHT_STRTAB
	if note != nil {
		sh(11, 7, noteOff, len(note), 4) // .note.nv.tkinfo, SHT_NOTE
	}
	return b.Bytes()
}

func align4(n int) int { return (n + 3) &^ 3 }

// ptxText is the start of a PTX module as nvcc 13.0 emits it.
func ptxText(target string) []byte {
	return []byte("//\n// Generated by NVIDIA NVVM Compiler\n//\n// Compiler Build ID: CL-0\n// Cuda compilation tools, release 13.0, V13.0.88\n// Based on NVVM 7.0.1\n//\n\n.version 9.0\n.target " +
		target + "\n.address_size 64\n\n\t// .globl\tkern\n\n.visible .entry kern(\n\t.param .u64 kern_param_0\n)\n{\n\tret;\n\n}\n\x00")
}

// sharedObjectWith builds, with gcc, a shared object whose section named
// section holds data (and a function, so it is an ordinary library).
func sharedObjectWith(t *testing.T, dir, name, section string, data []byte) string {
	t.Helper()
	return sharedObjectWithSections(t, dir, name, map[string][]byte{section: data})
}

func sharedObjectWithSections(t *testing.T, dir, name string, sections map[string][]byte) string {
	t.Helper()
	gcc := needTool(t, "gcc")
	var asm strings.Builder
	for i, section := range slices.Sorted(maps.Keys(sections)) {
		bin := filepath.Join(dir, fmt.Sprintf("%s.%d.bin", name, i))
		writeFile(t, bin, sections[section])
		asm.WriteString(asmIncbin(section, bin))
	}
	writeFile(t, filepath.Join(dir, name+".S"), []byte(asm.String()))
	writeFile(t, filepath.Join(dir, name+".c"), []byte("int "+strings.ReplaceAll(name, "-", "_")+"_host(void) { return 1; }\n"))
	out := filepath.Join(dir, name+".so")
	run(t, dir, gcc, "-shared", "-fPIC", "-o", out, name+".c", name+".S")
	return out
}

func asmIncbin(section, bin string) string {
	return "\t.section " + section + ",\"a\"\n\t.balign 8\n\t.incbin \"" + bin + "\"\n\t.section .note.GNU-stack,\"\",@progbits\n"
}
