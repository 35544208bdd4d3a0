package diff

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/archive"
)

func write(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

// buildLib compiles a shared library whose assertion message and a string constant carry
// where it was built: the two things that tell two builds apart in the field.
func buildLib(t *testing.T, dst, srcDir, stamp string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found on PATH: this test compiles real ELF files")
	}
	src := filepath.Join(srcDir, "lib.c")
	write(t, src, `#include <assert.h>
const char *stamp(void) { return STAMP; }
int half(int x) { assert(x % 2 == 0); return x / 2; }
`, 0o644)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-Wl,--build-id=none", `-DSTAMP="`+stamp+`"`, "-o", dst, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
}

// tree lays out a prefix like an artifact's; variant b changes one thing of each kind.
func tree(t *testing.T, root string, b bool) string {
	t.Helper()
	stamp, src := "built 2026-11-24T10:00:00Z", filepath.Join(t.TempDir(), "build-a", "src")
	if b {
		// the same length: only .rodata changes, nothing moves
		stamp, src = "built 2026-11-24T11:30:00Z", filepath.Join(t.TempDir(), "build-b", "src")
	}
	buildLib(t, filepath.Join(root, "libdemo", "lib", "libdemo.so.1"), src, stamp)
	write(t, filepath.Join(root, "libdemo", "include", "demo.h"), "int half(int);\n", 0o644)
	write(t, filepath.Join(root, "manifest.json"), "{\n  \"recipe\": \"demo\",\n  \"jobs\": "+map[bool]string{false: "16", true: "1"}[b]+"\n}\n", 0o644)
	if b {
		write(t, filepath.Join(root, "env.sh"), "export A=1\n", 0o755)
		write(t, filepath.Join(root, "pydemo", "extra.py"), "x = 1\n", 0o644)
	} else {
		write(t, filepath.Join(root, "env.sh"), "export A=1\n", 0o644)
		write(t, filepath.Join(root, "pydemo", "gone.py"), "y = 2\n", 0o644)
	}
	target := map[bool]string{false: "libdemo.so.1", true: "libdemo.so.1.0"}[b]
	if err := os.Symlink(target, filepath.Join(root, "libdemo", "lib", "libdemo.so")); err != nil {
		t.Fatal(err)
	}
	return root
}

func pack(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(dir)+".tar.zst")
	if _, err := archive.PackFile(context.Background(), dir, out, archive.PackOptions{ModTime: time.Unix(1700000000, 0)}); err != nil {
		t.Fatal(err)
	}
	return out
}

func find(t *testing.T, r *Report, path string) Change {
	t.Helper()
	for _, c := range r.Changes {
		if c.Path == path {
			return c
		}
	}
	t.Fatalf("no change reported for %s in %+v", path, r.Changes)
	return Change{}
}

func TestCompareArtifacts(t *testing.T) {
	ta, tb := tree(t, filepath.Join(t.TempDir(), "a"), false), tree(t, filepath.Join(t.TempDir(), "b"), true)
	aa, ab := pack(t, ta), pack(t, tb)
	for _, pair := range [][2]string{{aa, ab}, {ta, tb}, {aa, tb}} {
		r, err := Compare(context.Background(), pair[0], pair[1], Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Equal {
			t.Fatal("different trees reported equal")
		}
		lib := find(t, r, "libdemo/lib/libdemo.so.1")
		if !slices.Equal(lib.What, []string{Content}) {
			t.Errorf("libdemo.so.1: %v", lib.What)
		}
		var names []string
		for _, s := range lib.Sections {
			names = append(names, s.Name+":"+s.What)
		}
		// the stamp and the assertion's __FILE__ both live in .rodata
		if !slices.Equal(names, []string{".rodata:content"}) {
			t.Errorf("sections that differ: %v", names)
		}
		if !slices.Contains(lib.OnlyA, "built 2026-11-24T10:00:00Z") || !slices.Contains(lib.OnlyB, "built 2026-11-24T11:30:00Z") {
			t.Errorf("strings: A %q B %q", lib.OnlyA, lib.OnlyB)
		}
		if !strings.Contains(strings.Join(lib.OnlyA, " "), "build-a/src/lib.c") || !strings.Contains(strings.Join(lib.OnlyB, " "), "build-b/src/lib.c") {
			t.Errorf("the build paths in the assertion strings are not named: A %q B %q", lib.OnlyA, lib.OnlyB)
		}
		m := find(t, r, "manifest.json")
		if !slices.Equal(m.OnlyA, []string{`  "jobs": 16`}) || !slices.Equal(m.OnlyB, []string{`  "jobs": 1`}) || m.Sections != nil {
			t.Errorf("manifest.json: A %q B %q sections %v", m.OnlyA, m.OnlyB, m.Sections)
		}
		if c := find(t, r, "env.sh"); !slices.Equal(c.What, []string{Mode}) || c.A.Mode != 0o644 || c.B.Mode != 0o755 {
			t.Errorf("env.sh: %+v", c)
		}
		if c := find(t, r, "pydemo/extra.py"); !slices.Equal(c.What, []string{Added}) || c.A != nil {
			t.Errorf("extra.py: %+v", c)
		}
		if c := find(t, r, "pydemo/gone.py"); !slices.Equal(c.What, []string{Removed}) || c.B != nil {
			t.Errorf("gone.py: %+v", c)
		}
		if c := find(t, r, "libdemo/lib/libdemo.so"); !slices.Equal(c.What, []string{Target}) || c.B.Target != "libdemo.so.1.0" {
			t.Errorf("symlink: %+v", c)
		}
		if len(r.Changes) != 6 || r.Same != r.Entries-6 || r.Same < 4 {
			t.Errorf("%d changes, %d of %d entries equal: %+v", len(r.Changes), r.Same, r.Entries, r.Changes)
		}
		if _, err := json.Marshal(r); err != nil {
			t.Fatal(err)
		}
	}
	// a tree against its own artifact: equal
	r, err := Compare(context.Background(), ta, aa, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Equal || len(r.Changes) != 0 || r.Same != r.Entries {
		t.Errorf("a tree and its artifact differ: %+v", r)
	}
}

// A byte that differs outside every section (here, in the ELF header's padding) is
// still reported, with a note.
func TestCompareELFHeaders(t *testing.T) {
	ta, tb := t.TempDir(), t.TempDir()
	buildLib(t, filepath.Join(ta, "lib.so"), t.TempDir(), "same")
	b, err := os.ReadFile(filepath.Join(ta, "lib.so"))
	if err != nil {
		t.Fatal(err)
	}
	b[10] ^= 0xff // e_ident padding
	write(t, filepath.Join(tb, "lib.so"), string(b), 0o644)
	r, err := Compare(context.Background(), ta, tb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := find(t, r, "lib.so")
	if len(c.Sections) != 0 || !strings.Contains(c.Note, "headers") {
		t.Errorf("%+v", c)
	}
}

func TestCompareIgnore(t *testing.T) {
	ta, tb := t.TempDir(), t.TempDir()
	write(t, filepath.Join(ta, "x", "a.py"), "a\n", 0o644)
	write(t, filepath.Join(tb, "x", "a.py"), "a\n", 0o644)
	write(t, filepath.Join(tb, "x", "__pycache__", "a.cpython-312.pyc"), "bytecode", 0o644)
	write(t, filepath.Join(tb, ".receipt"), "installed now", 0o644)
	ignore := func(p string, e archive.Entry) bool {
		return p == ".receipt" || filepath.Base(p) == "__pycache__"
	}
	r, err := Compare(context.Background(), ta, tb, Options{Ignore: ignore})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Equal || r.Ignored != 3 {
		t.Errorf("%+v", r)
	}
	// without the rule, the same trees differ
	if r, err := Compare(context.Background(), ta, tb, Options{}); err != nil || r.Equal || len(r.Changes) != 3 {
		t.Errorf("%v %+v", err, r)
	}
	// in an artifact, bytecode is the build's doing: it is compared
	if r, err := Compare(context.Background(), ta, pack(t, tb), Options{Ignore: ignore}); err != nil || r.Equal || len(r.Changes) != 3 || r.Ignored != 0 {
		t.Errorf("%v %+v", err, r)
	}
}

func TestCompareBadInput(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "notes.txt"), "hello\n", 0o644)
	write(t, filepath.Join(dir, "broken.tar.zst"), "not zstd at all", 0o644)
	for _, arg := range []string{filepath.Join(dir, "absent.tar.zst"), filepath.Join(dir, "notes.txt"), filepath.Join(dir, "broken.tar.zst")} {
		_, err := Compare(context.Background(), dir, arg, Options{TempDir: t.TempDir()})
		var ie *InputError
		if !errors.As(err, &ie) || ie.ExitCode() != 2 || !strings.Contains(err.Error(), filepath.Base(arg)) {
			t.Errorf("%s: %v", arg, err)
		}
	}
	// nothing unpacked is left behind
	tmp := t.TempDir()
	_, _ = Compare(context.Background(), dir, filepath.Join(dir, "broken.tar.zst"), Options{TempDir: tmp})
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

func TestPrintable(t *testing.T) {
	got := printable([]byte("\x00\x01short\x00/tmp/epbuild-deepep-1a2b/src/x.cu\x00\x7fabc\tdefgh\nline two\xff"))
	want := []string{"/tmp/epbuild-deepep-1a2b/src/x.cu", "abc\tdefgh", "line two"}
	if !slices.Equal(got, want) {
		t.Errorf("%q", got)
	}
	a, b := differingStrings([]byte("same one\x00only in a!\x00same two\x00only in a!"), []byte("same two\x00same one\x00in b alone"), 3)
	if !slices.Equal(a, []string{"only in a!"}) || !slices.Equal(b, []string{"in b alone"}) {
		t.Errorf("%q %q", a, b)
	}
}
