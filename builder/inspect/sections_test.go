package inspect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Two builds of one library that differ in a string constant differ in .rodata and keep
// every other section's bytes (gcc, no build id); a section hash is the hash of the bytes
// objcopy extracts.
func TestELFSections(t *testing.T) {
	gcc := needTool(t, "gcc")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "s.c"), []byte(`const char *stamp(void) { return STAMP; }`+"\n"))
	build := func(out, stamp string) string {
		run(t, dir, gcc, "-shared", "-fPIC", "-O2", "-Wl,--build-id=none", `-DSTAMP="`+stamp+`"`, "-o", out, "s.c")
		return filepath.Join(dir, out)
	}
	a, b := build("a.so", "built at 1700000000"), build("b.so", "built at 1800000000")
	sa, err := ELFSections(a)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := ELFSections(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(sa) != len(sb) || len(sa) < 10 {
		t.Fatalf("%d and %d sections", len(sa), len(sb))
	}
	var differ []string
	for i := range sa {
		if sa[i].Name != sb[i].Name {
			t.Fatalf("section %d: %s and %s", i, sa[i].Name, sb[i].Name)
		}
		if sa[i].SHA256 != sb[i].SHA256 {
			differ = append(differ, sa[i].Name)
		}
	}
	if strings.Join(differ, " ") != ".rodata" {
		t.Errorf("sections that differ: %v, want .rodata alone", differ)
	}
	for _, s := range sa {
		if s.Name == ".bss" && s.SHA256 != "" {
			t.Errorf(".bss has no bytes to hash: %+v", s)
		}
		if s.Name == ".rodata" {
			b, err := os.ReadFile(a)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b[s.Offset:s.Offset+s.Size]), "built at 1700000000") {
				t.Errorf(".rodata at %d+%d does not hold the string", s.Offset, s.Size)
			}
		}
	}
	if !IsELF(a) || IsELF(filepath.Join(dir, "s.c")) || IsELF(filepath.Join(dir, "absent")) {
		t.Error("IsELF: wrong answer for an ELF, a C file or a missing file")
	}
	if _, err := ELFSections(filepath.Join(dir, "s.c")); err == nil || !strings.Contains(err.Error(), "s.c") {
		t.Errorf("a C file read as ELF: %v", err)
	}
	// a truncated file names the section that lies past its end
	full, _ := os.ReadFile(a)
	cut := filepath.Join(dir, "cut.so")
	if err := os.WriteFile(cut, full[:len(full)*3/4], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ELFSections(cut); err == nil {
		t.Error("a truncated ELF file read without error")
	}
}
