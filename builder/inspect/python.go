package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/quote"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// ImportResult is what importing a module really loaded.
type ImportResult struct {
	Module string `json:"module"`
	// File is the module's __file__ (its __init__.py for a package); empty
	// for a namespace package, whose directories are in Path.
	File string   `json:"file,omitempty"`
	Path []string `json:"path,omitempty"`
	// Version is the module's __version__, when it has one.
	Version string `json:"version,omitempty"`
	// Python is the interpreter's sys.executable; SysPath its sys.path.
	Python  string   `json:"python"`
	SysPath []string `json:"sys_path,omitempty"`
	// Stderr is what the interpreter wrote to stderr (warnings, the
	// traceback of a failed import).
	Stderr string `json:"stderr,omitempty"`
}

// Within reports whether the imported module lies inside prefix, with
// symlinks resolved on both sides.
func (r ImportResult) Within(prefix string) bool {
	file := r.File
	if file == "" && len(r.Path) > 0 {
		file = r.Path[0]
	}
	if file == "" {
		return false
	}
	return pathWithin(file, prefix)
}

func pathWithin(file, prefix string) bool {
	f, err := filepath.EvalSymlinks(file)
	if err != nil {
		f = filepath.Clean(file)
	}
	p, err := filepath.EvalSymlinks(prefix)
	if err != nil {
		p = filepath.Clean(prefix)
	}
	rel, err := filepath.Rel(p, f)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

// The marker separates our report from whatever a module prints on import.
const reportMarker = "EPBUILD-INSPECT:"

// The module name comes in argv, never spliced into the program text.
const importProgram = `import importlib, json, sys
for first in sys.argv[2:]:
    importlib.import_module(first)
m = importlib.import_module(sys.argv[1])
v = getattr(m, "__version__", None)
print("` + reportMarker + `" + json.dumps({
    "file": getattr(m, "__file__", None) or "",
    "path": [str(p) for p in getattr(m, "__path__", [])],
    "version": v if isinstance(v, str) else "",
    "python": sys.executable,
    "sys_path": sys.path,
}))
`

// PythonImport imports module with python and reports where it came from; the modules
// after are imported first, in order (torch, for an extension that finds libtorch through
// the torch already loaded).
// It runs from dir ("" means a fresh empty directory), which must lie
// outside any source or build tree: Python puts the working directory first
// on sys.path, and a build tree there would shadow the install. The
// environment is clean: only env, plus PYTHONNOUSERSITE=1 (so ~/.local
// cannot shadow the install) unless env sets it. Bytecode is neither read
// from nor written into the install (pyRun).
func PythonImport(ctx context.Context, python, module string, env []string, dir string, after ...string) (ImportResult, error) {
	res := ImportResult{Module: module}
	out, stderr, err := runPython(ctx, python, env, dir, importProgram, append([]string{module}, after...)...)
	res.Stderr = stderr
	if err != nil {
		return res, fmt.Errorf("import %s with %s: %w", module, python, err)
	}
	var rep struct {
		File    string   `json:"file"`
		Path    []string `json:"path"`
		Version string   `json:"version"`
		Python  string   `json:"python"`
		SysPath []string `json:"sys_path"`
	}
	if err := decodeReport(out, &rep); err != nil {
		return res, fmt.Errorf("import %s with %s: %w", module, python, err)
	}
	res.File, res.Path, res.Version, res.Python, res.SysPath = rep.File, rep.Path, rep.Version, rep.Python, rep.SysPath
	return res, nil
}

const mapsProgram = `import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
paths = []
with open("/proc/self/maps") as f:
    for line in f:
        fields = line.rstrip("\n").split(None, 5)
        if len(fields) == 6:
            paths.append(fields[5])
print("` + reportMarker + `" + json.dumps(paths))
`

// MappedLibs imports modules in one python process, then returns the
// distinct paths in its /proc/self/maps that match pattern (a regular
// expression; a plain name such as "libnvshmem_host" matches as a
// substring), sorted. Two paths for one library means two copies are
// mapped; which one a caller runs is where its symbols bind (NVSHMEM, NCCL).
// The environment is built as for PythonImport; it runs in a fresh empty
// directory.
func MappedLibs(ctx context.Context, python string, modules []string, env []string, pattern string) ([]string, error) {
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, fmt.Errorf("mapped libraries: pattern %q: %w", pattern, err)
	}
	out, _, err := runPython(ctx, python, env, "", mapsProgram, modules...)
	if err != nil {
		return nil, fmt.Errorf("import %s with %s and read its maps: %w", strings.Join(modules, ", "), python, err)
	}
	var all []string
	if err := decodeReport(out, &all); err != nil {
		return nil, fmt.Errorf("read maps after importing %s: %w", strings.Join(modules, ", "), err)
	}
	var paths []string
	for _, p := range all {
		if re.MatchString(p) {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	return slices.Compact(paths), nil
}

func runPython(ctx context.Context, python string, env []string, dir, program string, args ...string) (stdout []byte, stderr string, err error) {
	return pyRun{python: python, env: env, dir: dir}.run(ctx, program, args...)
}

type bytecodeDirKey struct{}

// WithBytecodeDir makes the Python runs under ctx keep their bytecode in dir, an empty
// directory the caller made (and removes): what the first run compiles, the later runs
// of one verification read back instead of compiling torch again. Without it, each run
// starts from a fresh empty directory and writes nothing.
func WithBytecodeDir(ctx context.Context, dir string) context.Context {
	return context.WithValue(ctx, bytecodeDirKey{}, dir)
}

// pyRun is one run of a Python program. Every run reads and writes bytecode only in an
// empty directory of its own (-X pycache_prefix; -B where nothing would read it back,
// WithBytecodeDir): a .pyc in a __pycache__ of the install runs instead of its source
// when its header says it may, so reading them would run code nobody checked
// (verify-install checks them, CheckBytecode).
type pyRun struct {
	python string
	env    []string
	// dir is the working directory ("": a fresh empty one).
	dir string
	// isolated runs with -I -S: no PYTHONPATH, site-packages (nor their .pth files) or
	// script directory, the standard library only.
	isolated bool
	stdin    []byte
}

func (r pyRun) run(ctx context.Context, program string, args ...string) (stdout []byte, stderr string, err error) {
	// Resolved here, against our PATH and working directory, since the
	// child runs elsewhere with an environment that may lack PATH.
	exe := r.python
	if !strings.ContainsRune(exe, filepath.Separator) {
		if exe, err = exec.LookPath(exe); err != nil {
			return nil, "", err
		}
	} else if exe, err = filepath.Abs(exe); err != nil {
		return nil, "", err
	}
	dir := r.dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "epbuild-pyimport-")
		if err != nil {
			return nil, "", err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	// the command line wins over PYTHONDONTWRITEBYTECODE and PYTHONPYCACHEPREFIX in env
	var argv []string
	if shared, _ := ctx.Value(bytecodeDirKey{}).(string); shared != "" {
		argv = []string{"-X", "pycache_prefix=" + shared}
	} else {
		pycache, err := os.MkdirTemp("", "epbuild-pycache-")
		if err != nil {
			return nil, "", err
		}
		defer os.RemoveAll(pycache)
		argv = []string{"-B", "-X", "pycache_prefix=" + pycache}
	}
	if r.isolated {
		argv = append(argv, "-I", "-S")
	}
	cmd := exec.CommandContext(ctx, exe, append(append(argv, "-c", program), args...)...)
	cmd.Dir = dir
	cmd.Env = cleanEnv(r.env)
	if r.stdin != nil {
		cmd.Stdin = bytes.NewReader(r.stdin)
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("%w%s", err, lastLine(se.String()))
	}
	return so.Bytes(), se.String(), err
}

func cleanEnv(env []string) []string {
	out := slices.Clone(env)
	for _, kv := range []string{"PYTHONNOUSERSITE=1"} {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			out = append(out, kv)
		}
	}
	return out
}

// lastLine returns ": <last non-empty line>" of a traceback, or "".
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if l := strings.TrimSpace(lines[len(lines)-1]); l != "" {
		return ": " + l
	}
	return ""
}

func decodeReport(out []byte, v any) error {
	var rep []byte
	for _, line := range bytes.Split(out, []byte("\n")) {
		if after, ok := bytes.CutPrefix(line, []byte(reportMarker)); ok {
			rep = after
		}
	}
	if rep == nil {
		return fmt.Errorf("no report line in the interpreter's output")
	}
	if err := json.Unmarshal(rep, v); err != nil {
		return fmt.Errorf("decode report: %w", err)
	}
	return nil
}

// CheckImportWithin checks that module imported from inside prefix.
func CheckImportWithin(res ImportResult, importErr error, prefix string) check.Result {
	r := check.Result{
		ID:       "python.import:" + res.Module,
		Expected: res.Module + " imported from " + prefix,
	}
	if importErr != nil {
		// the interpreter's words are data: shown escaped
		r.Status, r.Found, r.Why = check.Fail, "not importable", quote.Term(importErr.Error())
		if lib, sym, ok := UndefinedSymbol(importErr.Error()); ok {
			r.Found = fmt.Sprintf("not importable: %s calls %s, which no library loaded with it defines", quote.Term(filepath.Base(lib)), quote.Term(sym))
		}
		return r
	}
	r.Found = res.File
	if r.Found == "" {
		r.Found = strings.Join(res.Path, ":")
	}
	if res.Within(prefix) {
		r.Status = check.Pass
		return r
	}
	r.Status = check.Fail
	r.Why = fmt.Sprintf("%s was imported from %s, outside %s", res.Module, r.Found, prefix)
	return r
}

// UndefinedSymbol reads the dynamic loader's refusal out of an import's error
// ("ImportError: LIB: undefined symbol: SYM"): LIB calls SYM, and the libraries loaded
// with it (a dependency older than the one LIB was built against) lack it.
func UndefinedSymbol(msg string) (lib, sym string, ok bool) {
	const marker = ": undefined symbol: "
	i := strings.LastIndex(msg, marker)
	if i < 0 {
		return "", "", false
	}
	sym = strings.TrimSpace(msg[i+len(marker):])
	if f := strings.Fields(sym); len(f) > 0 {
		sym = f[0]
	}
	lib = msg[:i]
	if j := strings.LastIndex(lib, "Error: "); j >= 0 {
		lib = lib[j+len("Error: "):]
	}
	lib = strings.TrimSpace(lib)
	return lib, sym, sym != "" && lib != ""
}
