package inspect

import (
	"context"
	"errors"
	"github.com/epbuild/epbuild/builder/check"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func needPython(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc/self/maps: Linux only")
	}
	// the interpreter itself: a launcher (pyenv's shim) may pick another one in the
	// clean environments the checks run with
	py := needTool(t, "python3")
	return strings.TrimSpace(run(t, t.TempDir(), py, "-c", "import sys; print(sys.executable)"))
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// writePackage writes a package named name under root whose __init__.py
// prints noise (as real packages do on import) and runs extra.
func writePackage(t *testing.T, root, name, version, extra string) {
	t.Helper()
	writeFile(t, filepath.Join(root, name, "__init__.py"), []byte(
		"print('loading "+name+" {\"not\": \"the report\"}')\n__version__ = '"+version+"'\n"+extra))
}

func TestPythonImport(t *testing.T) {
	python := needPython(t)
	ctx := testContext(t)
	base := t.TempDir()
	prefix := filepath.Join(base, "prefix", "lib", "python", "site-packages")
	buildTree := filepath.Join(base, "DeepEP")
	writePackage(t, prefix, "deep_ep_probe", "1.2.1+29d31c0", "")
	writePackage(t, buildTree, "deep_ep_probe", "0.0.0-build-tree", "")
	env := []string{"PYTHONPATH=" + prefix}

	// From a neutral directory the install is what gets imported.
	res, err := PythonImport(ctx, python, "deep_ep_probe", env, "")
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Stderr)
	}
	want := filepath.Join(prefix, "deep_ep_probe", "__init__.py")
	if res.File != want || res.Version != "1.2.1+29d31c0" || res.Module != "deep_ep_probe" || res.Python == "" {
		t.Errorf("import result %+v, want file %s", res, want)
	}
	if !res.Within(filepath.Join(base, "prefix")) || res.Within(buildTree) {
		t.Errorf("Within: inside prefix %v, inside build tree %v", res.Within(filepath.Join(base, "prefix")), res.Within(buildTree))
	}
	if r := CheckImportWithin(res, nil, filepath.Join(base, "prefix")); r.Status != check.Pass {
		t.Errorf("check: %+v", r)
	}

	// Run from the build tree, its copy shadows the install: the reason
	// callers must pass a directory outside it, and check the result.
	shadow, err := PythonImport(ctx, python, "deep_ep_probe", env, buildTree)
	if err != nil {
		t.Fatal(err)
	}
	if shadow.Version != "0.0.0-build-tree" {
		t.Errorf("from the build tree imported %s", shadow.File)
	}
	if r := CheckImportWithin(shadow, nil, filepath.Join(base, "prefix")); r.Status != check.Fail || !strings.Contains(r.Why, buildTree) {
		t.Errorf("check of a shadowed import: %+v", r)
	}

	// The environment is clean: our PYTHONPATH does not leak into the child.
	t.Setenv("PYTHONPATH", prefix)
	_, err = PythonImport(ctx, python, "deep_ep_probe", nil, "")
	if err == nil || !strings.Contains(err.Error(), "No module named 'deep_ep_probe'") {
		t.Errorf("import without PYTHONPATH in env: %v", err)
	}
	if r := CheckImportWithin(ImportResult{Module: "deep_ep_probe"}, err, prefix); r.Status != check.Fail || r.Why == "" {
		t.Errorf("check of a failed import: %+v", r)
	}

	// A module name is data, never code.
	if _, err := PythonImport(ctx, python, "os; import sys; sys.exit(0)", nil, ""); err == nil {
		t.Error("a module name with code in it imported")
	}
}

func TestPythonImportDoesNotWriteBytecode(t *testing.T) {
	python := needPython(t)
	prefix := t.TempDir()
	writePackage(t, prefix, "quiet_probe", "1", "from . import helper\n")
	writeFile(t, filepath.Join(prefix, "quiet_probe", "helper.py"), []byte("X = 1\n"))
	if _, err := PythonImport(testContext(t), python, "quiet_probe", []string{"PYTHONPATH=" + prefix}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(prefix, "quiet_probe", "__pycache__")); err == nil {
		t.Error("checking an install wrote __pycache__ into it")
	}
}

func TestMappedLibs(t *testing.T) {
	python := needPython(t)
	gcc := needTool(t, "gcc")
	ctx := testContext(t)
	root := t.TempDir()
	src := filepath.Join(root, "probe.c")
	writeFile(t, src, []byte("int epprobe_answer(void) { return 42; }\n"))
	// Two packages, each loading its own copy of the library through
	// ctypes, as torch and deep_ep may each bring an NVSHMEM host library.
	loader := "import ctypes, os\n_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), 'libepprobe_host.so.3'))\nassert _lib.epprobe_answer() == 42\n"
	for _, pkg := range []string{"pkg_one", "pkg_two"} {
		writePackage(t, root, pkg, "1", loader)
		run(t, root, gcc, "-shared", "-fPIC", "-o", filepath.Join(root, pkg, "libepprobe_host.so.3"), src)
	}
	env := []string{"PYTHONPATH=" + root}

	one, err := MappedLibs(ctx, python, []string{"pkg_one"}, env, "libepprobe_host")
	if err != nil {
		t.Fatal(err)
	}
	if len(one) != 1 || one[0] != filepath.Join(root, "pkg_one", "libepprobe_host.so.3") {
		t.Errorf("one package: %v", one)
	}

	both, err := MappedLibs(ctx, python, []string{"pkg_one", "pkg_two"}, env, `libepprobe_host\.so`)
	if err != nil {
		t.Fatal(err)
	}
	if len(both) != 2 {
		t.Errorf("two copies: %v", both)
	}

	none, err := MappedLibs(ctx, python, []string{"pkg_one"}, env, "libnvshmem_host")
	if err != nil || len(none) != 0 {
		t.Errorf("unmatched pattern: %v, %v", none, err)
	}

	if _, err := MappedLibs(ctx, python, []string{"pkg_one"}, env, "("); err == nil {
		t.Error("bad pattern: no error")
	}
	_, err = MappedLibs(ctx, python, []string{"pkg_missing"}, env, "x")
	if err == nil || !strings.Contains(err.Error(), "No module named 'pkg_missing'") {
		t.Errorf("missing module: %v", err)
	}
}

// TestInstalledPython imports real packages with the interpreter named by
// EPBUILD_TEST_PYTHON (modules in EPBUILD_TEST_PYTHON_MODULES, default
// torch) and lists the CUDA and NVSHMEM libraries they map.
func TestInstalledPython(t *testing.T) {
	python := os.Getenv("EPBUILD_TEST_PYTHON")
	if python == "" {
		t.Skip("EPBUILD_TEST_PYTHON is unset: no real Python environment to import from")
	}
	modules := strings.Fields(os.Getenv("EPBUILD_TEST_PYTHON_MODULES"))
	if len(modules) == 0 {
		modules = []string{"torch"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := PythonImport(ctx, python, modules[0], nil, "")
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Stderr)
	}
	if _, err := os.Stat(res.File); err != nil {
		t.Errorf("imported file: %v", err)
	}
	libs, err := MappedLibs(ctx, python, modules, nil, `lib(cudart|nvshmem_host|torch)[^/]*\.so`)
	if err != nil {
		t.Fatal(err)
	}
	if len(libs) == 0 {
		t.Errorf("importing %v mapped no matching library", modules)
	}
	for _, l := range libs {
		if _, err := os.Stat(l); err != nil {
			t.Errorf("mapped path %s: %v", l, err)
		}
	}
	t.Logf("%s from %s maps %v", modules[0], res.File, libs)
}

// An extension the dynamic loader refuses (it calls a function no loaded library
// defines, as torch 2.11's libtorch_cuda.so does with NCCL 2.27 first in the process):
// the check says which library wanted which symbol, not only that the import failed.
func TestPythonImportUndefinedSymbol(t *testing.T) {
	python := needPython(t)
	gcc := needTool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "undef.c")
	writeFile(t, src, []byte("extern int ncclDevCommDestroy(void *);\nint call_it(void) { return ncclDevCommDestroy(0); }\n"))
	lib := filepath.Join(dir, "site", "undef_probe.so")
	if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, dir, gcc, "-shared", "-fPIC", "-o", lib, src)
	res, err := PythonImport(testContext(t), python, "undef_probe", []string{"PYTHONPATH=" + filepath.Dir(lib)}, "")
	if err == nil {
		t.Fatalf("the import of an extension calling an undefined function succeeded: %+v", res)
	}
	gotLib, sym, ok := UndefinedSymbol(err.Error())
	if !ok || gotLib != lib || sym != "ncclDevCommDestroy" {
		t.Errorf("UndefinedSymbol(%q) = %q, %q, %v; want %s, ncclDevCommDestroy", err, gotLib, sym, ok, lib)
	}
	r := CheckImportWithin(ImportResult{Module: "undef_probe"}, err, dir)
	if r.Status != check.Fail || r.Found != "not importable: undef_probe.so calls ncclDevCommDestroy, which no library loaded with it defines" {
		t.Errorf("check: %+v", r)
	}
	// what the interpreter printed is data: a library named with terminal escapes stays inert
	hostile := CheckImportWithin(ImportResult{Module: "x"}, errors.New("import x with python3: exit status 1: ImportError: /p/\x1b]0;pwned\a.so: undefined symbol: ncclX\x1b[2J"), dir)
	if strings.ContainsAny(hostile.Found+hostile.Why, "\x1b\a") || !strings.Contains(hostile.Found, `\x1b`) {
		t.Errorf("escape sequences from an import error reached the report: %q / %q", hostile.Found, hostile.Why)
	}
	if _, _, ok := UndefinedSymbol("import x with python3: exit status 1: ModuleNotFoundError: No module named 'x'"); ok {
		t.Error("a missing module read as an undefined symbol")
	}
}
