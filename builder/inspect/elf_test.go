package inspect

import (
	"github.com/epbuild/epbuild/builder/check"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const libSource = `#include <math.h>
extern int bar_undefined(int);
int foo_data = 3;
static int hidden_helper(int x) { return x + 1; }
int foo_defined(int x) { return bar_undefined(hidden_helper(x)) + (int)cos((double)x); }
`

// buildLibs builds libfoo (DT_RUNPATH, as --enable-new-dtags writes) and
// libold (the legacy DT_RPATH) with gcc.
func buildLibs(t *testing.T) (runpathLib, rpathLib string) {
	t.Helper()
	gcc := needTool(t, "gcc")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "foo.c"), []byte(libSource))
	run(t, dir, gcc, "-shared", "-fPIC", "-o", "libfoo.so.1.2", "foo.c",
		"-Wl,-soname,libfoo.so.1", "-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/../lib:$ORIGIN/nvshmem/lib", "-lm")
	run(t, dir, gcc, "-shared", "-fPIC", "-o", "libold.so", "foo.c",
		"-Wl,--disable-new-dtags", "-Wl,-rpath,$ORIGIN/../lib", "-lm")
	return filepath.Join(dir, "libfoo.so.1.2"), filepath.Join(dir, "libold.so")
}

func TestReadELF(t *testing.T) {
	lib, old := buildLibs(t)
	info, err := ReadELF(lib)
	if err != nil {
		t.Fatal(err)
	}
	if info.SONAME != "libfoo.so.1" {
		t.Errorf("SONAME %q", info.SONAME)
	}
	if !slices.Contains(info.Needed, "libm.so.6") {
		t.Errorf("NEEDED %v", info.Needed)
	}
	if !slices.Equal(info.Runpath, []string{"$ORIGIN/../lib", "$ORIGIN/nvshmem/lib"}) || len(info.Rpath) != 0 {
		t.Errorf("RUNPATH %v RPATH %v", info.Runpath, info.Rpath)
	}
	for _, s := range []string{"foo_defined", "foo_data"} {
		if !info.HasDefined(s) || info.HasUndefined(s) {
			t.Errorf("%s should be defined", s)
		}
	}
	for _, s := range []string{"bar_undefined", "cos"} {
		if !info.HasUndefined(s) || info.HasDefined(s) {
			t.Errorf("%s should be undefined", s)
		}
	}
	if info.HasDefined("hidden_helper") || info.HasUndefined("hidden_helper") {
		t.Error("a static function is not a dynamic symbol")
	}
	if info.Type != "ET_DYN" || info.Class != "ELFCLASS64" {
		t.Errorf("type %s class %s", info.Type, info.Class)
	}
	if m := map[string]string{"amd64": "EM_X86_64", "arm64": "EM_AARCH64"}[runtime.GOARCH]; m != "" && info.Machine != m {
		t.Errorf("machine %s, want %s", info.Machine, m)
	}

	oldInfo, err := ReadELF(old)
	if err != nil {
		t.Fatal(err)
	}
	if len(oldInfo.Runpath) != 0 || !slices.Equal(oldInfo.Rpath, []string{"$ORIGIN/../lib"}) || oldInfo.SONAME != "" {
		t.Errorf("libold: RUNPATH %v RPATH %v SONAME %q", oldInfo.Runpath, oldInfo.Rpath, oldInfo.SONAME)
	}

	if _, err := ReadELF(filepath.Join(t.TempDir(), "nope.so")); err == nil || !strings.Contains(err.Error(), "nope.so") {
		t.Errorf("missing file: %v", err)
	}
}

func TestELFChecks(t *testing.T) {
	lib, old := buildLibs(t)
	tests := []struct {
		name   string
		r      check.Result
		status check.Status
	}{
		{"defined is defined", CheckSymbol(lib, "foo_defined", true), check.Pass},
		{"defined is not undefined", CheckSymbol(lib, "foo_defined", false), check.Fail},
		{"undefined is undefined", CheckSymbol(lib, "bar_undefined", false), check.Pass},
		{"undefined is not defined", CheckSymbol(lib, "bar_undefined", true), check.Fail},
		{"absent is not defined", CheckSymbol(lib, "nvshmemi_ibgda_device_state_d", true), check.Fail},
		{"unreadable", CheckSymbol(lib+".missing", "foo_defined", true), check.Fail},
		{"needed by soname prefix", CheckNeeded(lib, "libm.so", true), check.Pass},
		{"needed exact", CheckNeeded(lib, "libm.so.6", true), check.Pass},
		{"needed missing", CheckNeeded(lib, "libnvshmem_host.so", true), check.Fail},
		{"not needed, absent", CheckNeeded(lib, "libnvshmem_host.so", false), check.Pass},
		{"not needed, present", CheckNeeded(lib, "libm.so", false), check.Fail},
		{"no prefix confusion", CheckNeeded(lib, "libm.so.6.1", true), check.Fail},
		{"runpath entry", CheckRunpath(lib, "$ORIGIN/../lib"), check.Pass},
		{"runpath entry, trailing slash", CheckRunpath(lib, "$ORIGIN/nvshmem/lib/"), check.Pass},
		{"runpath entry missing", CheckRunpath(lib, "$ORIGIN/lib64"), check.Fail},
		{"rpath only", CheckRunpath(old, "$ORIGIN/../lib"), check.Warn},
	}
	for _, tt := range tests {
		if tt.r.Status != tt.status {
			t.Errorf("%s: %+v, want %s", tt.name, tt.r, tt.status)
		}
		if tt.r.Status != check.Pass && tt.r.Why == "" {
			t.Errorf("%s: no Why in %+v", tt.name, tt.r)
		}
		if tt.r.ID == "" || tt.r.Expected == "" || tt.r.Found == "" {
			t.Errorf("%s: incomplete result %+v", tt.name, tt.r)
		}
	}
	if r := CheckSymbol(lib, "nvshmemi_ibgda_device_state_d", true); r.Found != "nvshmemi_ibgda_device_state_d absent" {
		t.Errorf("absent symbol found as %q", r.Found)
	}
}

// Versioned lookups and the reader patch-set effects use read the same table.
func TestLookupVersionedSymbol(t *testing.T) {
	gcc := needTool(t, "gcc")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "v.c"), []byte("int ep_v(void) { return 1; }\nextern int ep_import(void);\nint ep_w(void) { return ep_import(); }\n"))
	writeFile(t, filepath.Join(dir, "v.map"), []byte("EP_1 { global: ep_v; ep_w; local: *; };\n"))
	run(t, dir, gcc, "-shared", "-fPIC", "-o", "libv.so", "v.c", "-Wl,--version-script,v.map")
	info, err := ReadELF(filepath.Join(dir, "libv.so"))
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := info.Lookup("ep_v@EP_1"); !ok || !s.Defined || s.Version != "EP_1" || s.Section != ".text" || s.Type != "STT_FUNC" {
		t.Errorf("ep_v@EP_1: %+v %v", s, ok)
	}
	if _, ok := info.Lookup("ep_v@EP_2"); ok {
		t.Error("ep_v@EP_2 found")
	}
	if s, ok := info.Lookup("ep_import"); !ok || s.Defined {
		t.Errorf("ep_import: %+v %v", s, ok)
	}
	def, ref, desc, err := Reader{}.DynamicSymbol(filepath.Join(dir, "libv.so"), "ep_import")
	if err != nil || def || !ref || !strings.Contains(desc, "SHN_UNDEF") {
		t.Errorf("DynamicSymbol(ep_import) = %v %v %q %v", def, ref, desc, err)
	}
	if _, _, _, err := (Reader{}).DynamicSymbol(filepath.Join(dir, "v.c"), "ep_v"); err == nil {
		t.Error("a C file read as ELF")
	}
}

// A shared object linked with libstdc++.a exports libstdc++'s own runtime
// (std::locale::id::_M_id); one linked with libstdc++.so does not; libstdc++.so.6 itself
// and a PIE executable with libstdc++.a are neither judged (an executable runs in a
// process of its own). All built here by the real g++, the code using std::regex as
// EPv2's JIT does.
func TestSharedCXXRuntime(t *testing.T) {
	gxx := needTool(t, "g++")
	dir := t.TempDir()
	src := filepath.Join(dir, "x.cpp")
	writeFile(t, src, []byte("#include <regex>\n#include <string>\nextern \"C\" int probe(const char* s) { return std::regex_search(std::string(s), std::regex(\"#\\\\s*include\")); }\nint main() { return probe(\"#include\"); }\n"))
	run(t, dir, gxx, "-O1", "-fPIC", "-c", "-o", "x.o", src)
	run(t, dir, gxx, "-shared", "-o", "shared.so", "x.o")
	run(t, dir, gxx, "-shared", "-static-libstdc++", "-o", "static.so", "x.o")
	run(t, dir, gxx, "-pie", "-static-libstdc++", "-o", "exe", "x.o")
	libstdcxx := strings.TrimSpace(run(t, dir, gxx, "-print-file-name=libstdc++.so.6"))
	for _, c := range []struct {
		path        string
		shared, own bool
	}{
		{filepath.Join(dir, "shared.so"), true, false},
		{filepath.Join(dir, "static.so"), true, true},
		{filepath.Join(dir, "exe"), false, false},
		{libstdcxx, true, false},
	} {
		shared, own, err := SharedCXXRuntime(c.path)
		if err != nil || shared != c.shared || own != c.own {
			t.Errorf("%s: shared %v own %v (%v), want %v %v", filepath.Base(c.path), shared, own, err, c.shared, c.own)
		}
	}
	if _, _, err := SharedCXXRuntime(src); err == nil || !strings.Contains(err.Error(), src) {
		t.Errorf("not an ELF file: %v", err)
	}
}
