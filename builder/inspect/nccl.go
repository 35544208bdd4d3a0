package inspect

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
)

// NCCLLib is what an NCCL library says of itself: ncclGetVersion's code and the version
// it stands for.
type NCCLLib struct {
	Path    string `json:"path"`
	Code    int    `json:"code"`
	Version string `json:"version"`
}

// ncclLibProgram loads the library given in argv and calls ncclGetVersion, which only
// stores a constant: no GPU, no driver, no communicator. The path comes in argv, never
// spliced into the program text.
const ncclLibProgram = `import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
v = ctypes.c_int(0)
rc = lib.ncclGetVersion(ctypes.byref(v))
print("` + reportMarker + `" + json.dumps({"rc": rc, "code": v.value}))
`

// NCCLLibraryVersion loads an NCCL library with python (ctypes) in a clean environment
// and asks it ncclGetVersion.
func NCCLLibraryVersion(ctx context.Context, python, path string) (NCCLLib, error) {
	r := NCCLLib{Path: path}
	out, _, err := runPython(ctx, python, []string{"PATH=" + os.Getenv("PATH")}, "", ncclLibProgram, path)
	if err != nil {
		return r, fmt.Errorf("load %s and call ncclGetVersion: %w", path, err)
	}
	var rep struct{ RC, Code int }
	if err := decodeReport(out, &rep); err != nil {
		return r, fmt.Errorf("load %s and call ncclGetVersion: %w", path, err)
	}
	if rep.RC != 0 {
		return r, fmt.Errorf("%s: ncclGetVersion returned %d", path, rep.RC)
	}
	r.Code, r.Version = rep.Code, NCCLCodeVersion(rep.Code)
	return r, nil
}

// NCCLCodeVersion turns NCCL_VERSION_CODE into MAJOR.MINOR.PATCH: X*10000+Y*100+Z from
// 2.9 on (nccl.h's NCCL_VERSION), X*1000+Y*100+Z before.
func NCCLCodeVersion(code int) string {
	if code >= 10000 {
		return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
}

var ncclHeaderDefine = regexp.MustCompile(`(?m)^#define NCCL_(MAJOR|MINOR|PATCH)\s+(\d+)`)

// NCCLHeaderVersion reads NCCL_MAJOR.NCCL_MINOR.NCCL_PATCH from an nccl.h ("" when it
// does not say).
func NCCLHeaderVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	v := map[string]int{}
	for _, m := range ncclHeaderDefine.FindAllStringSubmatch(string(b), -1) {
		v[m[1]], _ = strconv.Atoi(m[2])
	}
	for _, k := range []string{"MAJOR", "MINOR", "PATCH"} {
		if _, ok := v[k]; !ok {
			return ""
		}
	}
	return fmt.Sprintf("%d.%d.%d", v["MAJOR"], v["MINOR"], v["PATCH"])
}

// NCCLBound is the NCCL library a process's torch communicator calls: the file the
// dynamic linker binds libtorch_cuda.so's ncclCommInitRank* to, and its ncclGetVersion.
type NCCLBound struct {
	// Path is the library file (symlinks resolved, as /proc/self/maps names it).
	Path string `json:"path"`
	// Site is Path relative to the Python path entry (site-packages) that holds it, ""
	// when none does (a preloaded or system library).
	Site    string `json:"site,omitempty"`
	Code    int    `json:"code"`
	Version string `json:"version"`
	// How says how the binding was read: "dlsym(RTLD_DEFAULT, ncclCommInitRankConfig)".
	How string `json:"how"`
}

// NCCLProcess is what a Python process says of the NCCL it runs once torch (and the
// modules asked for) are imported: the library torch's communicator binds to (Bound), the
// nccl.h version torch was compiled with (TorchHeader: torch.cuda.nccl.version(), a
// constant of torch's build, not the library loaded), the libnccl files mapped, and the
// versions of the nvidia-nccl-* distributions installed.
type NCCLProcess struct {
	Bound       *NCCLBound `json:"bound,omitempty"`
	BoundError  string     `json:"bound_error,omitempty"`
	TorchHeader string     `json:"torch_header,omitempty"`
	// TorchError says why torch (or a module asked for) could not be imported.
	TorchError string            `json:"torch_error,omitempty"`
	Mapped     []string          `json:"mapped,omitempty"`
	Packages   map[string]string `json:"packages,omitempty"`
	// PackageFiles maps each package to where its libnccl lies.
	PackageFiles map[string][]string `json:"package_files,omitempty"`
}

// ncclProgram imports torch and the modules in argv, then reads which NCCL torch's
// communicator calls as the dynamic linker resolves libtorch_cuda.so's reference to
// ncclCommInitRank*: the global scope first (the executable, LD_PRELOAD, RTLD_GLOBAL
// objects: dlsym(RTLD_DEFAULT)), then libtorch_cuda.so's own dependencies (dlsym on its
// handle, opened with RTLD_NOLOAD); dladdr names the file, whose ncclGetVersion only
// stores a constant: no GPU, no driver, no communicator. torch.cuda.nccl.version() is
// read too, and labelled for what it is: the NCCL_MAJOR/MINOR/PATCH torch was compiled
// with. Each part may fail on its own.
const ncclProgram = `import ctypes, glob, json, os, sys
r = {"packages": {}, "package_files": {}, "mapped": []}
try:
    import importlib.metadata as md
    for d in md.distributions():
        name = d.metadata.get("Name") or ""
        if name.lower().startswith("nvidia-nccl"):
            r["packages"][name] = d.version
            r["package_files"][name] = [str(d.locate_file(f)) for f in (d.files or []) if "libnccl" in str(f)]
except Exception:
    pass

class DlInfo(ctypes.Structure):
    _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p), ("saddr", ctypes.c_void_p)]

def bound(torch):
    libc = ctypes.CDLL(None)
    dlsym, dladdr = libc.dlsym, libc.dladdr
    dlsym.restype, dlsym.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p]
    dladdr.restype, dladdr.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    noload = getattr(os, "RTLD_NOLOAD", 4) | getattr(os, "RTLD_LAZY", 1)
    tc = None
    for p in sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda*.so*"))):
        try:
            tc = (os.path.basename(p), ctypes.CDLL(p, mode=noload)._handle)
            break
        except OSError:
            pass
    addr, how = None, ""
    for sym in ("ncclCommInitRankConfig", "ncclCommInitRank"):
        addr, how = dlsym(None, sym.encode()), "dlsym(RTLD_DEFAULT, %s)" % sym
        if not addr and tc:
            addr, how = dlsym(tc[1], sym.encode()), "dlsym(%s, %s)" % (tc[0], sym)
        if addr:
            break
    if not addr:
        raise RuntimeError("no ncclCommInitRank in the global scope" + (" nor among the dependencies of " + tc[0] if tc else " and torch has no libtorch_cuda*.so loaded"))
    info = DlInfo()
    if not dladdr(addr, ctypes.byref(info)) or not info.fname:
        raise RuntimeError("dladdr names no file for " + how)
    path = os.path.realpath(info.fname.decode())
    h = ctypes.CDLL(path, mode=noload)._handle
    gv = dlsym(h, b"ncclGetVersion")
    gi = DlInfo()
    if not gv or not dladdr(gv, ctypes.byref(gi)) or not gi.fname or os.path.realpath(gi.fname.decode()) != path:
        raise RuntimeError(path + " (from " + how + ") exports no ncclGetVersion of its own")
    v = ctypes.c_int(0)
    rc = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))(gv)(ctypes.byref(v))
    if rc != 0:
        raise RuntimeError("%s: ncclGetVersion returned %d" % (path, rc))
    site = ""
    for e in sorted({os.path.realpath(e) for e in sys.path if e}, key=len, reverse=True):
        if path.startswith(e.rstrip("/") + "/"):
            site = os.path.relpath(path, e)
            break
    return {"path": path, "site": site, "code": v.value, "how": how}

try:
    import torch
    for m in sys.argv[1:]:
        __import__(m)
except Exception as e:
    r["torch_error"] = "%s: %s" % (type(e).__name__, e)
else:
    try:
        v = torch.cuda.nccl.version()
        if isinstance(v, int):
            v = (v // 10000, v // 100 % 100, v % 100) if v >= 10000 else (v // 1000, v // 100 % 10, v % 100)
        r["torch_header"] = ".".join(str(x) for x in v)
    except Exception:
        pass
    try:
        r["bound"] = bound(torch)
    except Exception as e:
        r["bound_error"] = "%s: %s" % (type(e).__name__, e)
try:
    with open("/proc/self/maps") as f:
        r["mapped"] = sorted({l.split(None, 5)[5].strip() for l in f if "libnccl" in l and len(l.split(None, 5)) == 6})
except Exception:
    pass
print("` + reportMarker + `" + json.dumps(r))
`

// NCCL runs python with env, imports torch and modules, and reports the NCCL the process
// runs (see NCCLProcess).
func NCCL(ctx context.Context, python string, env []string, modules ...string) (NCCLProcess, error) {
	var r NCCLProcess
	out, _, err := runPython(ctx, python, env, "", ncclProgram, modules...)
	if err != nil {
		return r, fmt.Errorf("ask %s which NCCL it runs: %w", python, err)
	}
	if err := decodeReport(out, &r); err != nil {
		return r, fmt.Errorf("ask %s which NCCL it runs: %w", python, err)
	}
	if r.Bound != nil {
		r.Bound.Version = NCCLCodeVersion(r.Bound.Code)
	}
	return r, nil
}
