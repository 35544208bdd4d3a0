package inspect

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
)

// Section is one section of an ELF file: where its bytes lie in the file and their hash,
// so that two builds of one file can be told apart section by section.
type Section struct {
	Name string `json:"name"`
	Type string `json:"type"` // SHT_PROGBITS, SHT_NOBITS, ...
	// Offset and Size locate the section's bytes in the file; a NOBITS section (.bss)
	// has a size but no bytes, and no hash.
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
}

// IsELF reports whether path is a regular file that starts with the ELF magic.
func IsELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && bytes.Equal(magic[:], []byte(elf.ELFMAG))
}

// ELFSections lists the sections of an ELF file in header order, each with the sha256 of
// its bytes.
func ELFSections(path string) ([]Section, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read ELF sections of %s: %w", path, err)
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("read ELF sections of %s: %w", path, err)
	}
	defer ef.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read ELF sections of %s: %w", path, err)
	}
	out := make([]Section, 0, len(ef.Sections))
	buf := make([]byte, 1<<20)
	for _, s := range ef.Sections {
		sec := Section{Name: s.Name, Type: s.Type.String(), Offset: int64(s.Offset), Size: int64(s.Size)}
		if s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL {
			if sec.Offset < 0 || sec.Size < 0 || sec.Offset+sec.Size > st.Size() {
				return nil, fmt.Errorf("read ELF sections of %s: section %s lies past the end of the file (offset %d, size %d, file %d bytes)",
					path, s.Name, sec.Offset, sec.Size, st.Size())
			}
			h := sha256.New()
			if _, err := io.CopyBuffer(h, io.NewSectionReader(f, sec.Offset, sec.Size), buf); err != nil {
				return nil, fmt.Errorf("read ELF section %s of %s: %w", s.Name, path, err)
			}
			sec.SHA256 = hex.EncodeToString(h.Sum(nil))
		}
		out = append(out, sec)
	}
	return out, nil
}
