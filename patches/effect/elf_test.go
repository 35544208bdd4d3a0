package effect

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/inspect"
)

// buildSO compiles C source into a shared library with gcc.
func buildSO(t *testing.T, dir, name, src string) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("gcc is needed to build the test libraries: %v", err)
	}
	c := filepath.Join(dir, name+".c")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "lib", name+".so")
	if err := os.MkdirAll(filepath.Dir(so), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-o", so, c).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", name, err, out)
	}
	return so
}

func TestELFSymbol(t *testing.T) {
	dir := t.TempDir()
	buildSO(t, dir, "libdefines", "int epbuild_probe(void) { return 42; }\nint epbuild_data = 1;\n")
	buildSO(t, dir, "libimports", "extern int epbuild_probe(void);\nint epbuild_user(void) { return epbuild_probe(); }\n")
	if err := os.WriteFile(filepath.Join(dir, "lib", "notelf.so"), []byte("not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		file, symbol, status string
		found                string
	}{
		{"lib/libdefines.so", "epbuild_probe", StatusPass, "lib/libdefines.so: epbuild_probe defined in .dynsym (section .text, STT_FUNC STB_GLOBAL)"},
		{"lib/libdefines.so", "epbuild_data", StatusPass, "STT_OBJECT"},
		{"lib/libimports.so", "epbuild_probe", StatusFail, "lib/libimports.so: epbuild_probe is in .dynsym but undefined (SHN_UNDEF)"},
		{"lib/libimports.so", "epbuild_user", StatusPass, "defined"},
		{"lib/libdefines.so", "epbuild_absent", StatusFail, "epbuild_absent not in .dynsym"},
		{"lib/*.so", "epbuild_probe", StatusFail, "lib/libimports.so: epbuild_probe is in .dynsym but undefined"},
		{"lib/notelf.so", "epbuild_probe", StatusError, ""},
		{"lib/missing.so", "epbuild_probe", StatusFail, ""},
	}
	for _, c := range cases {
		r := Check(dir, Effect{Kind: ELFSymbol, File: c.file, Symbol: c.symbol}, inspect.Reader{})
		if r.Status != c.status || !strings.Contains(r.Found, c.found) {
			t.Errorf("%s %s: status %s found %q detail %q; want %s with %q", c.file, c.symbol, r.Status, r.Found, r.Detail, c.status, c.found)
		}
	}
	inst := Effect{Kind: ELFSymbol, File: "build/libdefines.so", Installed: "lib/libdefines.so*", Symbol: "epbuild_probe"}
	if r := CheckInstalled(dir, inst, inspect.Reader{}); r.Status != StatusPass {
		t.Errorf("installed ELF: %+v", r)
	}
	if r := Check(dir, Effect{Kind: ELFSymbol, File: "lib/libdefines.so", Symbol: "epbuild_probe"}, nil); r.Status != StatusError || !strings.Contains(r.Detail, "no ELF reader") {
		t.Errorf("without a reader: %+v", r)
	}
}
