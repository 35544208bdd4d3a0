package inspect

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// fakeNVSHMEM builds dir/libnvshmem_host.so.VERSION (SONAME libnvshmem_host.so.3, as
// NVSHMEM's install names it) whose nvshmemx_vendor_get_version_info reports version,
// with the libnvshmem_host.so.3 link; it returns the link.
func fakeNVSHMEM(t *testing.T, gcc, dir, version string) string {
	t.Helper()
	var major, minor, patch int
	if _, err := fmt.Sscanf(version, "%d.%d.%d", &major, &minor, &patch); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "host.c")
	writeFile(t, src, []byte(fmt.Sprintf(`void nvshmemx_vendor_get_version_info(int *a, int *b, int *c) { *a = %d; *b = %d; *c = %d; }
int nvshmemid_hostlib_init_attr(unsigned v, void *attr) { return 0; }
void *nvshmem_malloc(unsigned long n) { return 0; }
`, major, minor, patch)))
	file := "libnvshmem_host.so." + version
	run(t, dir, gcc, "-shared", "-fPIC", "-Wl,-soname,libnvshmem_host.so.3", "-o", filepath.Join(dir, file), src)
	if err := os.Symlink(file, filepath.Join(dir, "libnvshmem_host.so.3")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "libnvshmem_host.so.3")
}

// Two libnvshmem_host.so.3 files of one SONAME in one process: the one preloaded binds
// the extension's DT_NEEDED libnvshmem_host.so.3 and its symbols; the other, opened by
// its full path, is mapped too. Each reports its own version.
func TestNVSHMEMBinding(t *testing.T) {
	python := needPython(t)
	gcc := needTool(t, "gcc")
	ctx := testContext(t)
	root := t.TempDir()
	for _, d := range []string{"ours", "wheel", "ext"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ours := fakeNVSHMEM(t, gcc, filepath.Join(root, "ours"), "3.4.5")
	wheel := fakeNVSHMEM(t, gcc, filepath.Join(root, "wheel"), "3.7.2")
	ext := filepath.Join(root, "ext", "ext_cpp.so")
	src := filepath.Join(root, "ext.c")
	writeFile(t, src, []byte("int nvshmemid_hostlib_init_attr(unsigned, void *);\nvoid *nvshmem_malloc(unsigned long);\n"+
		"int ext_init(void) { return nvshmemid_hostlib_init_attr(0, nvshmem_malloc(8)); }\n"))
	run(t, root, gcc, "-shared", "-fPIC", "-o", ext, src, ours, "-Wl,-rpath,$ORIGIN/../ours")
	// the module a job imports: it opens the other copy by its full path, then its extension
	writeFile(t, filepath.Join(root, "py", "extmod.py"), []byte(fmt.Sprintf(
		"import ctypes, os\n_other = ctypes.CDLL(os.environ['OTHER_NVSHMEM'], mode=ctypes.RTLD_GLOBAL)\n_ext = ctypes.CDLL(%q)\n", ext)))

	syms, err := NVSHMEMImports(ext)
	if err != nil || !slices.Equal(syms, []string{"nvshmem_malloc", "nvshmemid_hostlib_init_attr"}) {
		t.Fatalf("the extension's NVSHMEM imports: %v, %v", syms, err)
	}
	if s, err := NVSHMEMImports(ours); err != nil || s != nil {
		t.Errorf("a library that does not link libnvshmem_host imports nothing of it: %v, %v", s, err)
	}
	if _, err := NVSHMEMImports(src); err == nil {
		t.Error("not an ELF file: no error")
	}
	real := func(p string) string {
		r, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	probe := func(preload, other string) NVSHMEMProcess {
		t.Helper()
		env := []string{"PYTHONPATH=" + filepath.Join(root, "py"), "LD_PRELOAD=" + preload, "OTHER_NVSHMEM=" + other}
		p, err := NVSHMEM(ctx, python, env, map[string][]string{ext: syms}, "extmod")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := probe(ours, real(wheel))
	want := []NVSHMEMLib{{Path: real(ours), Version: "3.4.5"}, {Path: real(wheel), Version: "3.7.2"}}
	if !slices.Equal(p.Mapped, want) {
		t.Errorf("mapped: %+v, want %+v", p.Mapped, want)
	}
	if u := p.Users[ext]; !u.Loaded || !slices.Equal(u.Files(), []string{real(ours)}) || len(u.Bound[real(ours)]) != 2 || len(u.Unbound) != 0 {
		t.Errorf("the preloaded copy binds the extension: %+v", u)
	}
	// the preload swapped: the extension's DT_NEEDED libnvshmem_host.so.3 is the other copy
	p = probe(wheel, real(ours))
	if u := p.Users[ext]; !slices.Equal(u.Files(), []string{real(wheel)}) {
		t.Errorf("the other copy preloaded binds the extension: %+v", u)
	}
	if l, ok := p.Lib(real(wheel)); !ok || l.Version != "3.7.2" {
		t.Errorf("the preloaded copy's version: %+v", p.Mapped)
	}
	// an object the process has not loaded, and a module that does not import
	p, err = NVSHMEM(ctx, python, []string{"OTHER_NVSHMEM=" + wheel, "PYTHONPATH=" + filepath.Join(root, "py")},
		map[string][]string{filepath.Join(root, "ext", "none.so"): syms}, "os")
	if err != nil || p.Users[filepath.Join(root, "ext", "none.so")].Loaded || len(p.Mapped) != 0 {
		t.Errorf("nothing loaded: %+v, %v", p, err)
	}
	if p, err := NVSHMEM(ctx, python, nil, nil, "no_such_module"); err != nil || p.ImportError == "" {
		t.Errorf("a module that does not import: %+v, %v", p, err)
	}
}
