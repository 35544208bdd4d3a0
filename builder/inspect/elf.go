package inspect

import (
	"debug/elf"
	"errors"
	"fmt"
	"github.com/epbuild/epbuild/builder/check"
	"path/filepath"
	"slices"
	"strings"
)

// ELFInfo is what the dynamic linker sees of a shared object or executable.
type ELFInfo struct {
	Path    string `json:"path"`
	Machine string `json:"machine"` // e.g. "EM_X86_64", "EM_AARCH64"
	Class   string `json:"class"`   // "ELFCLASS64"
	Type    string `json:"type"`    // "ET_DYN", "ET_EXEC", "ET_REL"
	SONAME  string `json:"soname,omitempty"`
	// Needed lists DT_NEEDED entries in file order.
	Needed []string `json:"needed,omitempty"`
	// Runpath and Rpath are the colon-separated DT_RUNPATH / DT_RPATH
	// entries, unexpanded ("$ORIGIN/../lib" stays as written).
	Runpath []string `json:"runpath,omitempty"`
	Rpath   []string `json:"rpath,omitempty"`
	// Defined and Undefined are dynamic symbol names (without @version),
	// sorted and distinct.
	Defined   []string `json:"defined,omitempty"`
	Undefined []string `json:"undefined,omitempty"`
	// symbols are the dynamic symbol table's entries with their details, in file order.
	symbols []Symbol
	// interp: the file names a program interpreter (PT_INTERP): an executable, PIE or not
	interp bool
}

// Symbol is one entry of the dynamic symbol table.
type Symbol struct {
	Name    string
	Version string // "" when unversioned
	Defined bool   // a section index other than SHN_UNDEF
	Section string // the defining section, when known
	Bind    string // STB_GLOBAL, STB_WEAK, ...
	Type    string // STT_FUNC, STT_OBJECT, ...
}

// ReadELF reads the dynamic section and dynamic symbol table of path.
// A file without a dynamic symbol table (a static executable, an object
// file) yields empty symbol lists, not an error.
func ReadELF(path string) (*ELFInfo, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", path, err)
	}
	defer f.Close()

	info := &ELFInfo{
		Path:    path,
		Machine: f.Machine.String(),
		Class:   f.Class.String(),
		Type:    f.Type.String(),
		interp:  slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP }),
	}
	if f.SectionByType(elf.SHT_DYNAMIC) != nil {
		if info.Needed, err = f.DynString(elf.DT_NEEDED); err != nil {
			return nil, fmt.Errorf("read DT_NEEDED of %s: %w", path, err)
		}
		sonames, err := f.DynString(elf.DT_SONAME)
		if err != nil {
			return nil, fmt.Errorf("read DT_SONAME of %s: %w", path, err)
		}
		if len(sonames) > 0 {
			info.SONAME = sonames[0]
		}
		if info.Runpath, err = dynPath(f, elf.DT_RUNPATH); err != nil {
			return nil, fmt.Errorf("read DT_RUNPATH of %s: %w", path, err)
		}
		if info.Rpath, err = dynPath(f, elf.DT_RPATH); err != nil {
			return nil, fmt.Errorf("read DT_RPATH of %s: %w", path, err)
		}
	}

	syms, err := f.DynamicSymbols()
	if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return nil, fmt.Errorf("read dynamic symbols of %s: %w", path, err)
	}
	for _, s := range syms {
		if s.Name == "" {
			continue
		}
		// Section symbols and file symbols are not linkable names.
		switch elf.ST_TYPE(s.Info) {
		case elf.STT_SECTION, elf.STT_FILE:
			continue
		}
		sym := Symbol{Name: s.Name, Version: s.Version, Defined: s.Section != elf.SHN_UNDEF,
			Bind: elf.ST_BIND(s.Info).String(), Type: elf.ST_TYPE(s.Info).String()}
		if sym.Defined {
			info.Defined = append(info.Defined, s.Name)
			if int(s.Section) < len(f.Sections) {
				sym.Section = f.Sections[s.Section].Name
			}
		} else {
			info.Undefined = append(info.Undefined, s.Name)
		}
		info.symbols = append(info.symbols, sym)
	}
	slices.Sort(info.Defined)
	info.Defined = slices.Compact(info.Defined)
	slices.Sort(info.Undefined)
	info.Undefined = slices.Compact(info.Undefined)
	return info, nil
}

func dynPath(f *elf.File, tag elf.DynTag) ([]string, error) {
	vals, err := f.DynString(tag)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range vals {
		for _, p := range strings.Split(v, ":") {
			if p != "" {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// Lookup finds symbol ("name", or "name@VERSION" for one version) in the dynamic symbol
// table: its defining entry when there is one, else the entry that imports it.
func (i *ELFInfo) Lookup(symbol string) (Symbol, bool) {
	name, version, versioned := strings.Cut(symbol, "@")
	version = strings.TrimPrefix(version, "@") // name@@VERSION is the default version
	var found Symbol
	ok := false
	for _, s := range i.symbols {
		if s.Name != name || versioned && s.Version != version {
			continue
		}
		if s.Defined {
			return s, true
		}
		found, ok = s, true
	}
	return found, ok
}

// Reader is the ELF reader as patch-set effects ask it (effect.SymbolReader): the one
// implementation behind elf-symbol effects and the recipes' symbol checks.
type Reader struct{}

// DynamicSymbol says whether path defines symbol, and describes the entry found.
func (Reader) DynamicSymbol(path, symbol string) (defined, referenced bool, desc string, err error) {
	info, err := ReadELF(path)
	if err != nil {
		return false, false, "", err
	}
	s, ok := info.Lookup(symbol)
	switch {
	case !ok:
		return false, false, "not in .dynsym", nil
	case !s.Defined:
		return false, true, "is in .dynsym but undefined (SHN_UNDEF): the file imports it, does not define it", nil
	}
	return true, true, fmt.Sprintf("defined in .dynsym (section %s, %s %s)", s.Section, s.Type, s.Bind), nil
}

// HasDefined reports whether the object exports sym.
func (i *ELFInfo) HasDefined(sym string) bool {
	_, ok := slices.BinarySearch(i.Defined, sym)
	return ok
}

// HasUndefined reports whether the object imports sym (expects another
// object to define it).
func (i *ELFInfo) HasUndefined(sym string) bool {
	_, ok := slices.BinarySearch(i.Undefined, sym)
	return ok
}

// NeededMatch returns the DT_NEEDED entry that lib names: the entry itself,
// or a versioned soname of it ("libnvshmem_host.so" matches
// "libnvshmem_host.so.3"), so a check need not pin the soname version.
func (i *ELFInfo) NeededMatch(lib string) (string, bool) {
	for _, n := range i.Needed {
		if n == lib || strings.HasPrefix(n, lib+".") {
			return n, true
		}
	}
	return "", false
}

// RunpathHas reports whether DT_RUNPATH holds entry (compared after
// cleaning, so "$ORIGIN/../lib/" equals "$ORIGIN/../lib").
func (i *ELFInfo) RunpathHas(entry string) bool {
	want := filepath.Clean(entry)
	for _, p := range i.Runpath {
		if filepath.Clean(p) == want {
			return true
		}
	}
	return false
}

// CheckSymbol checks that sym is defined (exported) by path, or, with
// defined false, that path leaves it undefined for another object to supply.
func CheckSymbol(path, sym string, defined bool) check.Result {
	info, err := ReadELF(path)
	if err != nil {
		return failed(symbolResult(path, sym, defined), err)
	}
	return info.CheckSymbol(sym, defined)
}

func symbolResult(path, sym string, defined bool) check.Result {
	want := "undefined"
	if defined {
		want = "defined"
	}
	return check.Result{
		ID:       "elf.symbol:" + filepath.Base(path) + ":" + sym,
		Expected: sym + " " + want,
	}
}

// CheckSymbol is CheckSymbol on an already read object, for callers that
// check many symbols of one file.
func (i *ELFInfo) CheckSymbol(sym string, defined bool) check.Result {
	r := symbolResult(i.Path, sym, defined)
	isDef, isUndef := i.HasDefined(sym), i.HasUndefined(sym)
	state := "absent"
	switch {
	case isDef:
		state = "defined"
	case isUndef:
		state = "undefined"
	}
	r.Found = sym + " " + state
	if (defined && isDef) || (!defined && isUndef) {
		r.Status = check.Pass
		return r
	}
	r.Status = check.Fail
	r.Why = fmt.Sprintf("%s: dynamic symbol %s is %s, want %s", i.Path, sym, state, strings.TrimPrefix(r.Expected, sym+" "))
	return r
}

// CheckNeeded checks that path has (present true) or lacks (present false)
// a DT_NEEDED entry for lib; see NeededMatch for how names compare.
func CheckNeeded(path, lib string, present bool) check.Result {
	r := check.Result{ID: "elf.needed:" + filepath.Base(path) + ":" + lib}
	if present {
		r.Expected = "NEEDED " + lib
	} else {
		r.Expected = "no NEEDED " + lib
	}
	info, err := ReadELF(path)
	if err != nil {
		return failed(r, err)
	}
	got, ok := info.NeededMatch(lib)
	r.Found = "NEEDED " + strings.Join(info.Needed, ", ")
	if len(info.Needed) == 0 {
		r.Found = "no NEEDED entries"
	}
	switch {
	case ok == present:
		r.Status = check.Pass
	case present:
		r.Status = check.Fail
		r.Why = fmt.Sprintf("%s does not link %s", path, lib)
	default:
		r.Status = check.Fail
		r.Why = fmt.Sprintf("%s links %s", path, got)
	}
	return r
}

// CheckRunpath checks that DT_RUNPATH of path holds entry. An entry found
// only in the legacy DT_RPATH is a warning: it still works, but
// LD_LIBRARY_PATH cannot override it, which is rarely what a relocatable
// prefix wants.
func CheckRunpath(path, entry string) check.Result {
	r := check.Result{
		ID:       "elf.runpath:" + filepath.Base(path) + ":" + entry,
		Expected: "RUNPATH contains " + entry,
	}
	info, err := ReadELF(path)
	if err != nil {
		return failed(r, err)
	}
	r.Found = "RUNPATH " + strings.Join(info.Runpath, ":")
	if len(info.Runpath) == 0 {
		r.Found = "no RUNPATH"
	}
	if info.RunpathHas(entry) {
		r.Status = check.Pass
		return r
	}
	for _, p := range info.Rpath {
		if filepath.Clean(p) == filepath.Clean(entry) {
			r.Status = check.Warn
			r.Found += "; RPATH " + strings.Join(info.Rpath, ":")
			r.Why = fmt.Sprintf("%s has %s in DT_RPATH, not DT_RUNPATH", path, entry)
			return r
		}
	}
	r.Status = check.Fail
	r.Why = fmt.Sprintf("%s: RUNPATH lacks %s", path, entry)
	return r
}

func failed(r check.Result, err error) check.Result {
	r.Status = check.Fail
	if r.Found == "" {
		r.Found = "unreadable"
	}
	r.Why = err.Error()
	return r
}

// Search is what the dynamic loader searches, besides the object's own DT_RPATH and
// DT_RUNPATH, to find a DT_NEEDED library (ld.so(8)): the objects LD_PRELOAD loads first
// (one with the same SONAME satisfies the dependency) and LD_LIBRARY_PATH.
type Search struct {
	Preload     []string
	LibraryPath []string
}

// SearchFromEnv reads LD_PRELOAD (colon or space separated) and LD_LIBRARY_PATH from an
// environment list (the last setting wins, as in a process).
func SearchFromEnv(env []string) Search {
	var s Search
	for _, kv := range env {
		switch k, v, _ := strings.Cut(kv, "="); k {
		case "LD_PRELOAD":
			s.Preload = strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ' ' })
		case "LD_LIBRARY_PATH":
			s.LibraryPath = strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ';' })
		}
	}
	return s
}

// Resolve finds lib (a DT_NEEDED name) for this object as ld.so does: a preloaded object
// whose SONAME (or file name) is lib; else the first directory holding a compatible
// object of that name in DT_RPATH (only when there is no DT_RUNPATH), LD_LIBRARY_PATH,
// then DT_RUNPATH, with $ORIGIN as the object's directory. It returns the file and the
// way it was found; "" when none of those has it (the loader would go on to
// /etc/ld.so.cache and the system directories).
func (i *ELFInfo) Resolve(lib string, s Search) (file, via string) {
	for _, p := range s.Preload {
		if !filepath.IsAbs(p) {
			continue
		}
		if filepath.Base(p) == lib {
			return p, "LD_PRELOAD"
		}
		if o, err := ReadELF(p); err == nil && o.SONAME == lib {
			return p, "LD_PRELOAD"
		}
	}
	origin := filepath.Dir(i.Path)
	expand := func(dir string) string {
		dir = strings.ReplaceAll(dir, "${ORIGIN}", origin)
		return strings.ReplaceAll(dir, "$ORIGIN", origin)
	}
	try := func(dirs []string, how string) (string, string) {
		for _, d := range dirs {
			cand := filepath.Join(expand(d), lib)
			if o, err := ReadELF(cand); err == nil && o.Class == i.Class && o.Machine == i.Machine {
				return cand, how
			}
		}
		return "", ""
	}
	if len(i.Runpath) == 0 {
		if f, how := try(i.Rpath, "DT_RPATH"); f != "" {
			return f, how
		}
	}
	if f, how := try(s.LibraryPath, "LD_LIBRARY_PATH"); f != "" {
		return f, how
	}
	return try(i.Runpath, "DT_RUNPATH")
}

// CheckResolves checks that the loader finds lib for the object at path inside dir (with
// symlinks resolved on both sides): the copy the install means, not one elsewhere.
func CheckResolves(path, lib string, s Search, dir string) check.Result {
	r := check.Result{ID: "elf.resolves:" + filepath.Base(path) + ":" + lib, Expected: lib + " from " + dir}
	info, err := ReadELF(path)
	if err != nil {
		return failed(r, err)
	}
	name, ok := info.NeededMatch(lib)
	if !ok {
		r.Status, r.Found = check.Fail, "no DT_NEEDED "+lib+" (NEEDED "+strings.Join(info.Needed, ", ")+")"
		r.Why = fmt.Sprintf("%s does not link %s at all", path, lib)
		return r
	}
	got, via := info.Resolve(name, s)
	switch {
	case got == "":
		r.Status, r.Found = check.Fail, "not found through LD_PRELOAD, DT_RPATH, LD_LIBRARY_PATH or DT_RUNPATH"
		r.Why = fmt.Sprintf("RUNPATH %s: the loader would fall back to ld.so.cache and the system directories, and load whatever %s is there", orNone(info.Runpath), lib)
	case pathWithin(got, dir):
		r.Status, r.Found = check.Pass, got+" (via "+via+")"
	default:
		r.Status, r.Found = check.Fail, got+" (via "+via+")"
		r.Why = fmt.Sprintf("the loader finds %s outside %s first: a job loads that copy, not the one the install was built with", lib, dir)
	}
	return r
}

func orNone(dirs []string) string {
	if len(dirs) == 0 {
		return "none"
	}
	return strings.Join(dirs, ":")
}

// CXXRuntimeMarker is std::locale::id::_M_id() const: libstdc++ defines it, and code
// compiled against libstdc++'s headers only calls it. A shared object other than
// libstdc++ itself that exports it carries libstdc++.a linked in.
const CXXRuntimeMarker = "_ZNKSt6locale2id5_M_idEv"

// SharedCXXRuntime says whether path is a shared library (ET_DYN without a program
// interpreter: not a PIE executable, which runs in a process of its own) and whether
// it exports a copy of libstdc++ of its own (CXXRuntimeMarker, libstdc++ itself aside).
func SharedCXXRuntime(path string) (shared, ownRuntime bool, err error) {
	info, err := ReadELF(path)
	if err != nil {
		return false, false, err
	}
	if info.Type != elf.ET_DYN.String() || info.interp {
		return false, false, nil
	}
	return true, !strings.HasPrefix(info.SONAME, "libstdc++.so") && info.HasDefined(CXXRuntimeMarker), nil
}
