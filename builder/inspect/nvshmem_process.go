package inspect

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
)

// NVSHMEMHostSONAME matches the names under which objects link NVSHMEM's host library
// (DT_NEEDED libnvshmem_host.so.3).
const NVSHMEMHostSONAME = "libnvshmem_host.so*"

// NVSHMEMImports is what an object (DeepEP's extension, torch's library) takes from
// NVSHMEM's host library: its undefined dynamic symbols named nvshmem* (nvshmem_,
// nvshmemx_, nvshmemi_, nvshmemid_), when it links libnvshmem_host (DT_NEEDED); nil when
// it does not. DT_NEEDED is read first, so a large library that does not link NVSHMEM
// is not read further.
func NVSHMEMImports(file string) ([]string, error) {
	f, err := elf.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", file, err)
	}
	needed, err := f.DynString(elf.DT_NEEDED)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read DT_NEEDED of %s: %w", file, err)
	}
	if !slices.ContainsFunc(needed, func(n string) bool { ok, _ := path.Match(NVSHMEMHostSONAME, n); return ok }) {
		return nil, nil
	}
	info, err := ReadELF(file)
	if err != nil {
		return nil, err
	}
	var syms []string
	for _, s := range info.Undefined {
		if strings.HasPrefix(s, "nvshmem") {
			syms = append(syms, s)
		}
	}
	return syms, nil
}

// NVSHMEMLib is one libnvshmem_host file a process maps and the version it reports of
// itself (nvshmemx_vendor_get_version_info, which only stores NVSHMEM_VENDOR_*_VERSION:
// no GPU, no init).
type NVSHMEMLib struct {
	// Path is the file, symlinks resolved, as /proc/self/maps names it.
	Path    string `json:"path"`
	Version string `json:"version,omitempty"`
	// VersionError says why the version could not be read.
	VersionError string `json:"version_error,omitempty"`
}

// NVSHMEMUser is where one object's NVSHMEM host symbols bind in the process.
type NVSHMEMUser struct {
	// Loaded: the process has the object loaded (dlopen with RTLD_NOLOAD succeeds).
	Loaded bool `json:"loaded"`
	// Bound maps each library file (symlinks resolved) to the symbols that bind to it.
	Bound map[string][]string `json:"bound,omitempty"`
	// Unbound are the symbols no loaded object provides.
	Unbound []string `json:"unbound,omitempty"`
}

// Files are the library files the object's symbols bind to, sorted.
func (u NVSHMEMUser) Files() []string {
	var fs []string
	for f := range u.Bound {
		fs = append(fs, f)
	}
	slices.Sort(fs)
	return fs
}

// NVSHMEMProcess is what a Python process says of the NVSHMEM it runs once the modules
// asked for are imported.
type NVSHMEMProcess struct {
	// ImportError says why a module could not be imported.
	ImportError string `json:"import_error,omitempty"`
	// Mapped are the libnvshmem_host files the process maps, sorted by path.
	Mapped []NVSHMEMLib `json:"mapped,omitempty"`
	// Users maps each object asked about to where its symbols bind.
	Users map[string]NVSHMEMUser `json:"users,omitempty"`
}

// Lib is the mapped library file path, if the process maps it.
func (p NVSHMEMProcess) Lib(file string) (NVSHMEMLib, bool) {
	for _, l := range p.Mapped {
		if l.Path == file {
			return l, true
		}
	}
	return NVSHMEMLib{}, false
}

// nvshmemProgram imports the modules in argv, then, for each object named on stdin with
// its NVSHMEM symbols, asks the dynamic linker where each symbol binds, in the order it
// resolves an object's references: the global scope first (the executable, LD_PRELOAD,
// RTLD_GLOBAL objects: dlsym(RTLD_DEFAULT)), then the object's own dependencies (dlsym
// on its handle, opened with RTLD_NOLOAD); dladdr names the file. An object loaded
// before a later RTLD_GLOBAL library bound its references then, which this lookup, made
// afterwards, cannot see. Each libnvshmem_host file mapped is asked its version.
const nvshmemProgram = `import ctypes, json, os, sys
req = json.load(sys.stdin)
r = {"users": {}, "mapped": []}

class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

libc = ctypes.CDLL(None)
dlsym, dladdr = libc.dlsym, libc.dladdr
dlsym.restype, dlsym.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
dladdr.restype, dladdr.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
noload = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)

def where(addr):
    info = DlInfo()
    if not addr or not dladdr(addr, ctypes.byref(info)) or not info.fname:
        return ""
    return os.path.realpath(info.fname.decode())

try:
    for m in sys.argv[1:]:
        __import__(m)
except Exception as e:
    r["import_error"] = "%s: %s" % (type(e).__name__, e)
else:
    for obj, syms in sorted(req.items()):
        u = {"loaded": False, "bound": {}, "unbound": []}
        r["users"][obj] = u
        try:
            h = ctypes.CDLL(obj, mode=noload)._handle
        except OSError:
            continue
        u["loaded"] = True
        for s in syms:
            f = where(dlsym(None, s.encode()) or dlsym(h, s.encode()))
            if f:
                u["bound"].setdefault(f, []).append(s)
            else:
                u["unbound"].append(s)
try:
    with open("/proc/self/maps") as f:
        libs = sorted({l.split(None, 5)[5].strip() for l in f if "libnvshmem_host" in l and len(l.split(None, 5)) == 6})
except Exception:
    libs = []
for p in libs:
    m = {"path": p}
    try:
        h = ctypes.CDLL(p, mode=noload)._handle
        gv = dlsym(h, b"nvshmemx_vendor_get_version_info")
        if not gv or where(gv) != os.path.realpath(p):
            raise RuntimeError("exports no nvshmemx_vendor_get_version_info of its own")
        v = [ctypes.c_int(0) for _ in range(3)]
        ctypes.CFUNCTYPE(None, *[ctypes.POINTER(ctypes.c_int)] * 3)(gv)(*[ctypes.byref(x) for x in v])
        m["version"] = ".".join(str(x.value) for x in v)
    except Exception as e:
        m["version_error"] = str(e)
    r["mapped"].append(m)
print("` + reportMarker + `" + json.dumps(r))
`

// NVSHMEM runs python with env, imports modules, and reports the libnvshmem_host files
// the process maps with their versions, and where the NVSHMEM symbols of each object in
// users (file → its NVSHMEMImports) bind (see NVSHMEMProcess). The objects come on
// stdin, never spliced into the program text.
func NVSHMEM(ctx context.Context, python string, env []string, users map[string][]string, modules ...string) (NVSHMEMProcess, error) {
	var r NVSHMEMProcess
	if users == nil {
		users = map[string][]string{}
	}
	req, err := json.Marshal(users)
	if err != nil {
		return r, err
	}
	out, _, err := pyRun{python: python, env: env, stdin: req}.run(ctx, nvshmemProgram, modules...)
	if err != nil {
		return r, fmt.Errorf("ask %s which NVSHMEM its objects bind to: %w", python, err)
	}
	if err := decodeReport(out, &r); err != nil {
		return r, fmt.Errorf("ask %s which NVSHMEM its objects bind to: %w", python, err)
	}
	return r, nil
}
