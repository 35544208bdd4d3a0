package effect

import (
	"debug/elf"
	"errors"
	"fmt"
	"strings"
)

// ELFDynSym describes what an ELF file's .dynsym says about one symbol name.
type ELFDynSym struct {
	Defined   bool   // some entry has a section index other than SHN_UNDEF
	Undefined bool   // some entry is SHN_UNDEF: the file imports it
	Section   string // the defining section, when known
	Bind      string
	Type      string
	Version   string
}

// LookupDynSym reads path's dynamic symbol table for symbol, which may carry a version
// as "name@VERSION". An ELF file without .dynsym gives found=false and no error.
func LookupDynSym(path, symbol string) (sym ELFDynSym, found bool, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return sym, false, fmt.Errorf("open %s as ELF: %w", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		return sym, false, nil
	}
	if err != nil {
		return sym, false, fmt.Errorf("read .dynsym of %s: %w", path, err)
	}
	name, version, versioned := strings.Cut(symbol, "@")
	version = strings.TrimPrefix(version, "@")
	for _, s := range syms {
		if s.Name != name || versioned && s.Version != version {
			continue
		}
		found = true
		if s.Section == elf.SHN_UNDEF {
			sym.Undefined = true
			continue
		}
		sym.Defined = true
		sym.Bind = elf.ST_BIND(s.Info).String()
		sym.Type = elf.ST_TYPE(s.Info).String()
		sym.Version = s.Version
		if int(s.Section) < len(f.Sections) {
			sym.Section = f.Sections[s.Section].Name
		}
	}
	return sym, found, nil
}
