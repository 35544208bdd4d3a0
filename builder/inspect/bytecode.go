package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// BytecodeFile is a compiled module in a __pycache__ directory and the source it claims
// to be compiled from: Python loads Pyc instead of reading Source when Pyc's name
// carries the interpreter's Tag and its header matches Source (or is an unchecked
// hash, which is never compared).
type BytecodeFile struct {
	Pyc    string `json:"pyc"`
	Source string `json:"source"`
	// Tag is the interpreter the name is for (cpython-312); Optimize the level of its
	// .opt-N suffix (0 without one).
	Tag      string `json:"tag"`
	Optimize int    `json:"optimize"`
}

// BytecodeVerdict is what CheckBytecode found of one file: OK, or the problem.
type BytecodeVerdict struct {
	Pyc     string `json:"pyc"`
	OK      bool   `json:"ok"`
	Problem string `json:"problem,omitempty"`
}

// maxPyc bounds the read of one .pyc: real ones are kilobytes, torch's largest a few MiB.
const maxPyc = 64 << 20

// bytecodeProgram checks each file as CPython's import does (importlib's
// _classify_pyc and _validate_*_pyc: magic, flags, then the source's mtime and size or
// its hash), then compares the code it holds, unmarshalled but never run, with the code
// compiling the source gives: a header that matches says only that Python will use the
// file, not that the file is the compiled source. Code objects compare by what they
// run (bytecode, constants, names, line and exception tables), and not by the file
// name, which differs where a job compiled it at another path; marshal's bytes do
// not repeat across runs, so they are not compared.
const bytecodeProgram = `import importlib.util, json, marshal, os, sys, types
MAX = int(sys.argv[1])
tag = sys.implementation.cache_tag
EXTRA = ("co_stacksize", "co_nlocals", "co_varnames", "co_cellvars", "co_freevars", "co_qualname", "co_code")
def same(a, b):
    if a != b or any(getattr(a, k, None) != getattr(b, k, None) for k in EXTRA):
        return False
    ca = [c for c in a.co_consts if isinstance(c, types.CodeType)]
    cb = [c for c in b.co_consts if isinstance(c, types.CodeType)]
    return len(ca) == len(cb) and all(same(x, y) for x, y in zip(ca, cb))
def verdict(f):
    if f["tag"] != tag:
        return "it is for another interpreter (%s); %s is %s and cannot check it" % (f["tag"], sys.executable, tag)
    with open(f["pyc"], "rb") as fh:
        data = fh.read(MAX + 1)
    if len(data) > MAX:
        return "it is larger than %d bytes" % MAX
    if len(data) < 16:
        return "it is %d bytes, shorter than a bytecode header" % len(data)
    if data[:4] != importlib.util.MAGIC_NUMBER:
        return "its magic number %s is not %s's (%s): not written by this interpreter" % (data[:4].hex(), tag, importlib.util.MAGIC_NUMBER.hex())
    flags = int.from_bytes(data[4:8], "little")
    with open(f["source"], "rb") as fh:
        source = fh.read()
    if flags & ~3:
        return "its flags %#x are not ones CPython writes" % flags
    if flags == 0:
        st = os.stat(f["source"])
        mtime, size = int.from_bytes(data[8:12], "little"), int.from_bytes(data[12:16], "little")
        if (mtime, size) != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
            return "stale: it records a source of mtime %d and %d bytes, the source has mtime %d and %d bytes" % (mtime, size, int(st.st_mtime), st.st_size)
    elif data[8:16] != importlib.util.source_hash(source):
        if flags & 2:
            return "stale: the source hash it records is not the source's"
        return "it is an unchecked-hash file, which Python runs without reading the source, and the hash it records is not the source's"
    code = marshal.loads(data[16:])
    if not isinstance(code, types.CodeType):
        return "it holds a %s, not code" % type(code).__name__
    if not same(code, compile(source, f["source"], "exec", dont_inherit=True, optimize=f["optimize"])):
        return "its code is not what compiling the source gives"
    return ""
out = []
for f in json.load(sys.stdin):
    try:
        why = verdict(f)
    except Exception as e:
        why = "it cannot be checked: %s: %s" % (type(e).__name__, e)
    out.append({"pyc": f["pyc"], "ok": not why, "problem": why})
print("` + reportMarker + `" + json.dumps(out))
`

// CheckBytecode checks that each .pyc holds the code compiling its source gives, with
// python, isolated (-I -S: the standard library only) in env (no PYTHONPATH is needed, and
// none is read). It loads each file's code object without running it. The error is for
// a python that could not run the check at all.
func CheckBytecode(ctx context.Context, python string, env []string, files []BytecodeFile) ([]BytecodeVerdict, error) {
	if len(files) == 0 {
		return nil, nil
	}
	in, err := json.Marshal(files)
	if err != nil {
		return nil, fmt.Errorf("check bytecode: %w", err)
	}
	out, _, err := pyRun{python: python, env: env, isolated: true, stdin: in}.run(ctx, bytecodeProgram, strconv.Itoa(maxPyc))
	if err != nil {
		return nil, fmt.Errorf("check %d bytecode files with %s: %w", len(files), python, err)
	}
	var vs []BytecodeVerdict
	if err := decodeReport(out, &vs); err != nil {
		return nil, fmt.Errorf("check %d bytecode files with %s: %w", len(files), python, err)
	}
	if len(vs) != len(files) {
		return nil, fmt.Errorf("check %d bytecode files with %s: %d verdicts", len(files), python, len(vs))
	}
	return vs, nil
}
