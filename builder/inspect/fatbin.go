package inspect

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// There is no published specification of the fat binary format. What this
// reader relies on, all little-endian:
//
// A fat binary section (.nv_fatbin in shared objects and executables,
// __nv_relfatbin in objects compiled with -rdc) is a run of containers,
// each 8-byte aligned, sometimes empty (nvcc emits a 0-byte container for a
// PTX-only device link), with zero padding between them.
//
// Container header, 16 bytes (CUDA's fatbinary.h, struct fatBinaryHeader):
//
//	0  u32 magic 0xBA55ED50
//	4  u16 version, 1
//	6  u16 header size, 16
//	8  u64 fat size: bytes of entries after the header
//
// Entry header ("header size" bytes: 64 for cubins before sm_100, 80 for
// PTX, 96 or 112 for sm_100+ cubins, which carry an options block at the
// options offset), then the payload:
//
//	0  u16 kind: 1 PTX, 2 cubin (ELF)
//	2  u16 0x0101 in every entry seen
//	4  u32 entry header size
//	8  u64 payload size, padded to 8; the next entry starts header size + this later
//	16 u32 compressed size (0 when not compressed)
//	20 u32 options offset from the entry start (0 when none)
//	24 u16 code version minor; 26 u16 major (cubin 1.8, PTX ISA 9.0)
//	28 u32 SM number: 90, 100, 103
//	32 u32 object name offset; 36 u32 its length
//	40 u64 flags
//	48 u64 zero
//	56 u64 uncompressed size (0 when not compressed)
//
// Flags: 0x1 64-bit, 0x10 Linux host, 0x2000 compressed with NVIDIA's LZ
// scheme (older toolkits), 0x8000 compressed with zstd (CUDA 13),
// 0x100000 architecture-specific ("a"), 0x200000 family-specific ("f").
// 0x1000000 is set on every sm_100+ entry seen; its meaning is unknown and
// it is ignored.
//
// Sources: CUDA's fatbinary.h / fatbinary_section.h for the container
// header; the entry layout as read by jiegec/fatbinary (after
// n-eiling/cuda-fatbin-decompression) and GrigoryEvko/nvopen-tools'
// fatbin/FORMAT_SPECIFICATION.md (bit 15 = compression); and our own probe
// with nvcc/cuobjdump 13.0.88 on the H200 machine: sm_90, sm_90a, sm_100,
// sm_100a, sm_100f and sm_103f cubins and compute_90/90a/100a/100f PTX,
// compressed and not. The a/f bits are the only header difference between
// sm_100, sm_100a and sm_100f images; the cubins' own ELF e_flags are
// identical (0x05005a04 for sm_90 and sm_90a alike), so on CUDA 13 e_flags
// cannot tell the variants apart. Older cubins (EI_ABIVERSION 7) mark "a"
// in e_flags (EF_CUDA_ACCELERATORS_V1, 0x800, as LLVM's ELF.h names it).
// cuobjdump's full dump names entries from these header fields as well; the
// cross-check test agrees with it entry for entry on nvcc 13 outputs, the
// NVSHMEM 3.4.5 wheel and torch 2.11's libtorch_cuda.so (2789 entries).
const (
	fatbinMagic        = 0xBA55ED50
	fatbinHeaderSize   = 16
	entryHeaderMinSize = 64

	entryKindPTX   = 1
	entryKindCubin = 2

	flagCompressedLZ   = 0x2000
	flagCompressedZstd = 0x8000
	flagArchSpecific   = 0x100000
	flagFamilySpecific = 0x200000

	emCUDA = 190 // ELF e_machine of a cubin

	// Payloads larger than this are not decompressed to look for variant
	// evidence; the variant then stays unknown.
	maxPayloadInspect = 256 << 20
)

// Fat binary section names.
const (
	SectionFatbin    = ".nv_fatbin"
	SectionRelFatbin = "__nv_relfatbin"
)

// Code entry kinds.
const (
	KindCubin = "cubin"
	KindPTX   = "ptx"
)

// Variant is the architecture variant of an entry.
type Variant string

// Variants. VariantUnknown means the file does not say, as far as this
// reader can tell; it is never guessed.
const (
	VariantBase    Variant = "base"
	VariantArch    Variant = "a"
	VariantFamily  Variant = "f"
	VariantUnknown Variant = "unknown"
)

// CodeEntry is one cubin or PTX image in a fat binary.
type CodeEntry struct {
	// Member is the archive member holding the entry, for static archives.
	Member  string `json:"member,omitempty"`
	Section string `json:"section"`
	// Offset of the entry header within the section.
	Offset int64  `json:"offset"`
	Kind   string `json:"kind"`
	SM     int    `json:"sm"`
	// Arch is "sm_90a" for a cubin, "compute_90" for PTX; with an unknown
	// variant it ends in "?" ("sm_90?") so that it matches no requirement.
	Arch    string  `json:"arch"`
	Variant Variant `json:"variant"`
	// VariantFrom says which evidence gave the variant.
	VariantFrom string `json:"variant_from,omitempty"`
	CodeVersion string `json:"code_version"`
	Compressed  bool   `json:"compressed"`
	Compression string `json:"compression,omitempty"` // "zstd" or "nvidia-lz"
	Flags       uint64 `json:"flags"`
	// Note explains an unknown variant or an inconsistency.
	Note string `json:"note,omitempty"`
}

// ArchInfo lists the device code found in a file.
type ArchInfo struct {
	Path    string      `json:"path"`
	Entries []CodeEntry `json:"entries"`
}

// Has reports whether some entry is exactly arch ("sm_90a", "sm_100",
// "compute_90"). Use Covers for "can a GPU of this architecture run it".
func (a *ArchInfo) Has(arch string) bool {
	return slices.ContainsFunc(a.Entries, func(e CodeEntry) bool { return e.Arch == arch })
}

// Archs returns the distinct entry architectures, sorted.
func (a *ArchInfo) Archs() []string {
	var out []string
	for _, e := range a.Entries {
		out = append(out, e.Arch)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CUDAArchs reads the fat binaries embedded in an ELF file (shared object,
// executable, object) or in the ELF members of a static archive, without
// cuobjdump: what the CUDA runtime would load from a linked file, what a
// device link would use from an object. A file with no fat binary yields an
// empty ArchInfo.
func CUDAArchs(path string) (*ArchInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read CUDA architectures of %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read CUDA architectures of %s: %w", path, err)
	}
	info := &ArchInfo{Path: path}
	magic := make([]byte, 8)
	if _, err := f.ReadAt(magic, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("read CUDA architectures of %s: %w", path, err)
	}
	if string(magic) == arMagic {
		err = eachArchiveMember(f, st.Size(), func(name string, r *io.SectionReader) error {
			head := make([]byte, 4)
			if _, err := r.ReadAt(head, 0); err != nil || string(head) != elf.ELFMAG {
				return nil // not an object file (a symbol table, a text file)
			}
			entries, err := elfFatbins(r)
			if err != nil {
				return fmt.Errorf("member %s: %w", name, err)
			}
			for i := range entries {
				entries[i].Member = name
			}
			info.Entries = append(info.Entries, entries...)
			return nil
		})
	} else {
		info.Entries, err = elfFatbins(f)
	}
	if err != nil {
		return nil, fmt.Errorf("read CUDA architectures of %s: %w", path, err)
	}
	return info, nil
}

func elfFatbins(r io.ReaderAt) ([]CodeEntry, error) {
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, err
	}
	defer ef.Close()
	// In a linked file (shared object, executable) __nv_relfatbin holds the
	// -rdc inputs of the device link, which the CUDA runtime never loads;
	// it loads the device-linked .nv_fatbin (cuobjdump likewise lists only
	// that, e.g. 6 of the 195 images in the NVSHMEM 3.4.5 wheel's
	// libnvshmem_host.so.3). In an object file __nv_relfatbin is the code.
	wanted := func(name string) bool {
		return name == SectionFatbin || (name == SectionRelFatbin && ef.Type == elf.ET_REL)
	}
	var out []CodeEntry
	for _, s := range ef.Sections {
		if !wanted(s.Name) {
			continue
		}
		if s.Type == elf.SHT_NOBITS {
			continue
		}
		var sr io.ReaderAt = s
		size := int64(s.Size)
		if s.Flags&elf.SHF_COMPRESSED != 0 {
			// Only an ELF-compressed section lacks a direct reader.
			data, err := s.Data()
			if err != nil {
				return nil, fmt.Errorf("section %s: %w", s.Name, err)
			}
			sr, size = bytes.NewReader(data), int64(len(data))
		}
		entries, err := parseFatbinSection(sr, size, s.Name)
		if err != nil {
			return nil, fmt.Errorf("section %s: %w", s.Name, err)
		}
		out = append(out, entries...)
	}
	return out, nil
}

type entryHeader struct {
	kind       uint16
	headerSize uint32
	size       uint64
	compSize   uint32
	minor      uint16
	major      uint16
	sm         uint32
	flags      uint64
	rawSize    uint64
}

func decodeEntryHeader(b []byte) entryHeader {
	le := binary.LittleEndian
	return entryHeader{
		kind:       le.Uint16(b[0:]),
		headerSize: le.Uint32(b[4:]),
		size:       le.Uint64(b[8:]),
		compSize:   le.Uint32(b[16:]),
		minor:      le.Uint16(b[24:]),
		major:      le.Uint16(b[26:]),
		sm:         le.Uint32(b[28:]),
		flags:      le.Uint64(b[40:]),
		rawSize:    le.Uint64(b[56:]),
	}
}

// parseFatbinSection walks the containers of one section.
func parseFatbinSection(r io.ReaderAt, size int64, section string) ([]CodeEntry, error) {
	le := binary.LittleEndian
	var out []CodeEntry
	var hdr [fatbinHeaderSize]byte
	pos := int64(0)
	for pos < size {
		if size-pos < 4 {
			break // trailing alignment bytes
		}
		n, err := r.ReadAt(hdr[:min(int64(len(hdr)), size-pos)], pos)
		if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
			return nil, fmt.Errorf("offset %d: %w", pos, err)
		}
		magic := le.Uint32(hdr[0:])
		if magic == 0 {
			pos += 4 // padding between containers
			continue
		}
		if magic != fatbinMagic {
			return nil, fmt.Errorf("offset %d: magic %#x, want fat binary magic %#x", pos, magic, fatbinMagic)
		}
		if n < fatbinHeaderSize {
			return nil, fmt.Errorf("offset %d: truncated fat binary header", pos)
		}
		hs := int64(le.Uint16(hdr[6:]))
		fatSize := le.Uint64(hdr[8:])
		if hs < fatbinHeaderSize {
			return nil, fmt.Errorf("offset %d: fat binary header size %d < %d", pos, hs, fatbinHeaderSize)
		}
		end := pos + hs + int64(fatSize)
		if fatSize > uint64(size) || end > size {
			return nil, fmt.Errorf("offset %d: fat binary of %d bytes overruns the %d-byte section", pos, fatSize, size)
		}
		for e := pos + hs; e < end; {
			var eh [entryHeaderMinSize]byte
			if end-e < entryHeaderMinSize {
				return nil, fmt.Errorf("offset %d: truncated entry header", e)
			}
			if _, err := r.ReadAt(eh[:], e); err != nil {
				return nil, fmt.Errorf("offset %d: %w", e, err)
			}
			h := decodeEntryHeader(eh[:])
			payload := e + int64(h.headerSize)
			if h.headerSize < entryHeaderMinSize || h.size > uint64(end) || payload+int64(h.size) > end {
				return nil, fmt.Errorf("offset %d: entry (header %d bytes, payload %d) overruns its fat binary ending at %d", e, h.headerSize, h.size, end)
			}
			out = append(out, describeEntry(r, section, e, payload, h))
			e = payload + int64(h.size)
		}
		pos = end
	}
	return out, nil
}

func describeEntry(r io.ReaderAt, section string, off, payload int64, h entryHeader) CodeEntry {
	ce := CodeEntry{
		Section:     section,
		Offset:      off,
		SM:          int(h.sm),
		CodeVersion: fmt.Sprintf("%d.%d", h.major, h.minor),
		Flags:       h.flags,
	}
	switch {
	case h.flags&flagCompressedZstd != 0:
		ce.Compressed, ce.Compression = true, "zstd"
	case h.flags&flagCompressedLZ != 0:
		ce.Compressed, ce.Compression = true, "nvidia-lz"
	}
	switch h.kind {
	case entryKindCubin:
		ce.Kind = KindCubin
	case entryKindPTX:
		ce.Kind = KindPTX
	default:
		ce.Kind = "kind-" + strconv.Itoa(int(h.kind))
	}

	a, f := h.flags&flagArchSpecific != 0, h.flags&flagFamilySpecific != 0
	switch {
	case a && f:
		ce.Variant, ce.Note = VariantUnknown, "entry flags mark both arch- and family-specific"
	case a:
		ce.Variant, ce.VariantFrom = VariantArch, "entry flags"
	case f:
		ce.Variant, ce.VariantFrom = VariantFamily, "entry flags"
	default:
		// No variant bit: that means base only if the image itself says so,
		// since a toolkit that predates the bits would not set them either.
		ce.Variant, ce.VariantFrom, ce.Note = payloadVariant(r, payload, h, ce)
	}
	ce.Arch = archName(ce.Kind, ce.SM, ce.Variant)
	return ce
}

func archName(kind string, sm int, v Variant) string {
	prefix := "sm_"
	switch kind {
	case KindPTX:
		prefix = "compute_"
	case KindCubin:
	default:
		prefix = kind + ":sm_"
	}
	switch v {
	case VariantBase:
		return prefix + strconv.Itoa(sm)
	case VariantArch, VariantFamily:
		return prefix + strconv.Itoa(sm) + string(v)
	default:
		return prefix + strconv.Itoa(sm) + "?"
	}
}

var (
	ptxTargetRE = regexp.MustCompile(`(?m)^[ \t]*\.target[ \t]+sm_([0-9]+)([af]?)\b`)
	tkArchRE    = regexp.MustCompile(`-arch[= ]+sm_([0-9]+)([af]?)\b`)
)

// payloadVariant looks inside an image without variant bits for evidence
// of its variant: PTX's .target directive, a cubin's e_flags (EI_ABIVERSION
// 7) or the "-arch" its toolchain recorded in .note.nv.tkinfo.
func payloadVariant(r io.ReaderAt, payload int64, h entryHeader, ce CodeEntry) (Variant, string, string) {
	var body []byte
	switch ce.Compression {
	case "nvidia-lz":
		return VariantUnknown, "", "no variant bit, and the image is LZ-compressed (not decoded here)"
	case "zstd":
		if h.rawSize > maxPayloadInspect {
			return VariantUnknown, "", fmt.Sprintf("no variant bit, and the %d-byte image is too large to inspect", h.rawSize)
		}
		comp := io.NewSectionReader(r, payload, int64(h.compSize))
		if h.compSize == 0 {
			comp = io.NewSectionReader(r, payload, int64(h.size))
		}
		dec, err := zstd.NewReader(comp, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxPayloadInspect))
		if err != nil {
			return VariantUnknown, "", "no variant bit; zstd: " + err.Error()
		}
		defer dec.Close()
		body, err = io.ReadAll(io.LimitReader(dec, maxPayloadInspect))
		if err != nil {
			return VariantUnknown, "", "no variant bit; zstd: " + err.Error()
		}
	default:
		if h.size > maxPayloadInspect {
			return VariantUnknown, "", fmt.Sprintf("no variant bit, and the %d-byte image is too large to inspect", h.size)
		}
		body = make([]byte, h.size)
		if _, err := r.ReadAt(body, payload); err != nil {
			return VariantUnknown, "", "no variant bit; read image: " + err.Error()
		}
	}

	switch ce.Kind {
	case KindPTX:
		m := ptxTargetRE.FindSubmatch(body)
		if m == nil {
			return VariantUnknown, "", "no variant bit and no .target directive in the PTX"
		}
		if string(m[1]) != strconv.Itoa(ce.SM) {
			return VariantUnknown, "", fmt.Sprintf("PTX .target sm_%s disagrees with entry SM %d", m[1], ce.SM)
		}
		return suffixVariant(m[2]), "PTX .target", ""
	case KindCubin:
		return cubinVariant(body, ce.SM)
	}
	return VariantUnknown, "", "no variant bit, unknown entry kind"
}

func suffixVariant(s []byte) Variant {
	switch string(s) {
	case "a":
		return VariantArch
	case "f":
		return VariantFamily
	}
	return VariantBase
}

// cubinVariant reads variant evidence from a cubin image.
func cubinVariant(img []byte, sm int) (Variant, string, string) {
	if len(img) < 64 || string(img[:4]) != elf.ELFMAG || img[elf.EI_CLASS] != byte(elf.ELFCLASS64) {
		return VariantUnknown, "", "no variant bit and the cubin is not a 64-bit ELF image"
	}
	le := binary.LittleEndian
	if le.Uint16(img[18:]) != emCUDA {
		return VariantUnknown, "", "no variant bit and the cubin's e_machine is not EM_CUDA"
	}
	abi := img[elf.EI_ABIVERSION]
	flags := le.Uint32(img[48:])
	if abi < 8 {
		// Old layout: SM in the low byte, "a" at 0x800.
		if int(flags&0xff) != sm {
			return VariantUnknown, "", fmt.Sprintf("cubin e_flags SM %d disagrees with entry SM %d", flags&0xff, sm)
		}
		if flags&0x800 != 0 {
			return VariantArch, "cubin e_flags", ""
		}
		return VariantBase, "cubin e_flags", ""
	}
	// New layout (CUDA 12.8+ Blackwell, all of CUDA 13): SM in bits 8-15.
	// LLVM names 0x8 EF_CUDA_ACCELERATORS; CUDA 13 leaves it clear even for
	// sm_100a, so only its presence is evidence.
	if int(flags>>8&0xff) != sm {
		return VariantUnknown, "", fmt.Sprintf("cubin e_flags SM %d disagrees with entry SM %d", flags>>8&0xff, sm)
	}
	if flags&0x8 != 0 {
		return VariantArch, "cubin e_flags", ""
	}
	v, err := tkinfoVariant(img, sm)
	if err != nil {
		return VariantUnknown, "", "no variant bit; " + err.Error()
	}
	return v, "cubin .note.nv.tkinfo", ""
}

// tkinfoVariant reads the target the compiler or device linker was given
// ("-arch sm_90a") from the cubin's toolkit note.
func tkinfoVariant(img []byte, sm int) (Variant, error) {
	ef, err := elf.NewFile(bytes.NewReader(img))
	if err != nil {
		return VariantUnknown, fmt.Errorf("cubin: %w", err)
	}
	defer ef.Close()
	s := ef.Section(".note.nv.tkinfo")
	if s == nil {
		return VariantUnknown, errors.New("cubin has no .note.nv.tkinfo")
	}
	data, err := s.Data()
	if err != nil {
		return VariantUnknown, fmt.Errorf("cubin .note.nv.tkinfo: %w", err)
	}
	found := VariantUnknown
	for _, m := range tkArchRE.FindAllSubmatch(data, -1) {
		if string(m[1]) != strconv.Itoa(sm) {
			return VariantUnknown, fmt.Errorf("cubin .note.nv.tkinfo names sm_%s, entry SM is %d", m[1], sm)
		}
		v := suffixVariant(m[2])
		if found != VariantUnknown && found != v {
			return VariantUnknown, errors.New("cubin .note.nv.tkinfo names conflicting targets")
		}
		found = v
	}
	if found == VariantUnknown {
		return VariantUnknown, errors.New("cubin .note.nv.tkinfo records no -arch")
	}
	return found, nil
}

const arMagic = "!<arch>\n"

// eachArchiveMember walks a System V / GNU (and BSD long-name) ar archive.
func eachArchiveMember(r io.ReaderAt, size int64, visit func(name string, data *io.SectionReader) error) error {
	var longNames []byte
	pos := int64(len(arMagic))
	for pos+60 <= size {
		var h [60]byte
		if _, err := r.ReadAt(h[:], pos); err != nil {
			return fmt.Errorf("archive header at %d: %w", pos, err)
		}
		if string(h[58:60]) != "`\n" {
			return fmt.Errorf("archive header at %d: bad terminator", pos)
		}
		name := strings.TrimRight(string(h[0:16]), " ")
		msize, err := strconv.ParseInt(strings.TrimSpace(string(h[48:58])), 10, 64)
		if err != nil || msize < 0 || pos+60+msize > size {
			return fmt.Errorf("archive header at %d: bad member size %q", pos, h[48:58])
		}
		data := pos + 60
		dataSize := msize
		switch {
		case name == "/" || name == "/SYM64/" || name == "__.SYMDEF" || name == "__.SYMDEF SORTED":
			name = "" // symbol table
		case name == "//":
			longNames = make([]byte, msize)
			if _, err := r.ReadAt(longNames, data); err != nil {
				return fmt.Errorf("archive long-name table: %w", err)
			}
			name = ""
		case strings.HasPrefix(name, "#1/"):
			// BSD: the name is the first N bytes of the data.
			n, err := strconv.ParseInt(name[3:], 10, 64)
			if err != nil || n > msize {
				return fmt.Errorf("archive header at %d: bad BSD name %q", pos, name)
			}
			b := make([]byte, n)
			if _, err := r.ReadAt(b, data); err != nil {
				return fmt.Errorf("archive member name at %d: %w", pos, err)
			}
			name = strings.TrimRight(string(b), "\x00")
			data, dataSize = data+n, msize-n
		case len(name) > 1 && name[0] == '/':
			off, err := strconv.Atoi(name[1:])
			if err != nil || off >= len(longNames) {
				return fmt.Errorf("archive header at %d: bad long-name reference %q", pos, name)
			}
			rest := longNames[off:]
			if i := bytes.Index(rest, []byte("/\n")); i >= 0 {
				rest = rest[:i]
			}
			name = string(rest)
		default:
			name = strings.TrimSuffix(name, "/")
		}
		if name != "" {
			if err := visit(name, io.NewSectionReader(r, data, dataSize)); err != nil {
				return err
			}
		}
		pos = data + dataSize
		if pos%2 == 1 {
			pos++
		}
	}
	return nil
}
