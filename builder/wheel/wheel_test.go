package wheel

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// setupPy is a package with every kind of requirement setuptools writes into
// requires.txt, an entry point and a license file.
const setupPy = `from setuptools import setup
setup(name="My.Pkg", version="1.0.0+abc", packages=["pk"],
      install_requires=["numpy>=1", "torch; python_version>'3'"],
      extras_require={"x": ["rich"], "y:sys_platform=='linux'": ["zz"]},
      entry_points={"console_scripts": ["a=pk:main"]})
`

// wantMetadata is what bdist_wheel (wheel 0.38.4, setuptools 66.1.1, Debian bookworm)
// wrote into METADATA for setupPy: the same fields, in the same order.
const wantMetadata = `Metadata-Version: 2.1
Name: My.Pkg
Version: 1.0.0+abc
License-File: LICENSE
Requires-Dist: numpy (>=1)
Requires-Dist: torch ; python_version > "3"
Provides-Extra: x
Requires-Dist: rich ; extra == 'x'
Provides-Extra: y
Requires-Dist: zz ; (sys_platform=='linux') and extra == 'y'
`

// eggBuild runs setup.py egg_info + build on the fixture, as the python-extension step
// does, and returns the build_lib, the egg base and the interpreter's tags.
func eggBuild(t *testing.T, src string) (blib, egg string, tags Tags) {
	t.Helper()
	work := t.TempDir()
	blib, egg = filepath.Join(work, "lib"), filepath.Join(work, "egg")
	if err := os.MkdirAll(egg, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", "setup.py", "egg_info", "--egg-base", egg, "build", "--build-lib", blib, "--build-temp", filepath.Join(work, "tmp"))
	cmd.Dir = src
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("setup.py: %v\n%s", err, b)
	}
	out, err := exec.Command("python3", "-c", TagScript).Output()
	if err != nil {
		t.Fatalf("tag script: %v", err)
	}
	if err := json.Unmarshal(out, &tags); err != nil {
		t.Fatal(err)
	}
	return blib, egg, tags
}

func writeFixture(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	for name, body := range map[string]string{"setup.py": setupPy, "LICENSE": "MIT\n", "pk/__init__.py": "def main(): pass\n"} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

func TestDistInfoFromSetuptools(t *testing.T) {
	src := writeFixture(t)
	blib, egg, tags := eggBuild(t, src)
	w, err := WriteDistInfo(blib, egg, src, tags)
	if err != nil {
		t.Fatal(err)
	}
	if w.Dir != "my_pkg-1.0.0+abc.dist-info" || w.Tag != tags.Python+"-none-any" || !w.Pure {
		t.Errorf("wrote %+v", w)
	}
	got, err := os.ReadFile(filepath.Join(blib, w.Dir, "METADATA"))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != wantMetadata {
		t.Errorf("METADATA:\n%s\nwant (bdist_wheel's):\n%s", got, wantMetadata)
	}
	for name, want := range map[string]string{
		"LICENSE": "MIT\n", "INSTALLER": "epbuild\n", "top_level.txt": "pk\n",
		"WHEEL": "Wheel-Version: 1.0\nGenerator: epbuild\nRoot-Is-Purelib: true\nTag: " + tags.Python + "-none-any\n",
	} {
		if b, err := os.ReadFile(filepath.Join(blib, w.Dir, name)); err != nil || string(b) != want {
			t.Errorf("%s: %q (%v), want %q", name, b, err, want)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(blib, w.Dir, "entry_points.txt")); !strings.Contains(string(b), "a = pk:main") {
		t.Errorf("entry_points.txt: %q", b)
	}
	// a second dist-info in the same tree is refused
	if _, err := WriteDistInfo(blib, egg, src, tags); err == nil {
		t.Error("a second .dist-info was written over the first")
	}
	// an extension module makes the wheel platform-specific
	ext := filepath.Join(blib, "pk", "_fast"+tags.ExtensionSuffixes[0])
	if err := os.WriteFile(ext, []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	if tag, pure, err := tags.Tag(blib); err != nil || pure || tag != tags.Interpreter+"-"+tags.ABI+"-"+tags.Platform {
		t.Errorf("with an extension module: %s pure=%v %v", tag, pure, err)
	}
}

// TestPackReproducible: the same tree gives the same wheel bytes whatever the files'
// times, modes (beyond the exec bit) and the order the file system lists them in; every
// RECORD hash matches; the entries are in order with RECORD last.
func TestPackReproducible(t *testing.T) {
	src := writeFixture(t)
	blib, egg, tags := eggBuild(t, src)
	if _, err := WriteDistInfo(blib, egg, src, tags); err != nil {
		t.Fatal(err)
	}
	// an executable in the build output (setup.py build copies modules only)
	if err := os.WriteFile(filepath.Join(blib, "pk", "tool.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	epoch := time.Unix(1700000000, 0)
	out1, out2 := t.TempDir(), t.TempDir()
	a, err := Pack(blib, out1, epoch)
	if err != nil {
		t.Fatal(err)
	}
	// another copy of the tree: other times, group/other bits, created in another order
	other := t.TempDir()
	if err := filepath.WalkDir(blib, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(blib, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		dst := filepath.Join(other, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		mode := os.FileMode(0o600)
		if fi.Mode()&0o100 != 0 {
			mode = 0o700
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			return err
		}
		return os.Chtimes(dst, time.Now(), time.Now().Add(-time.Hour))
	}); err != nil {
		t.Fatal(err)
	}
	// an installed tree also holds bytecode and an INSTALLER: neither goes into a wheel
	if err := os.MkdirAll(filepath.Join(other, "pk", "__pycache__"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(other, "pk", "__pycache__", "x.pyc"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := Pack(other, out2, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("two packs of one tree differ: %+v %+v", a, b)
	}
	if a.File != "my_pkg-1.0.0+abc-"+tags.Python+"-none-any.whl" {
		t.Errorf("file name %s", a.File)
	}
	whl := filepath.Join(out1, a.File)
	if err := Check(whl); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(whl)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if !f.Modified.Equal(epoch.UTC()) {
			t.Errorf("%s: time %v", f.Name, f.Modified)
		}
		want := os.FileMode(0o644)
		if f.Name == "pk/tool.sh" {
			want = 0o755
		}
		if f.Mode() != want {
			t.Errorf("%s: mode %v, want %v", f.Name, f.Mode(), want)
		}
	}
	wantNames := []string{"pk/__init__.py", "pk/tool.sh", "my_pkg-1.0.0+abc.dist-info/LICENSE", "my_pkg-1.0.0+abc.dist-info/METADATA",
		"my_pkg-1.0.0+abc.dist-info/WHEEL", "my_pkg-1.0.0+abc.dist-info/entry_points.txt", "my_pkg-1.0.0+abc.dist-info/top_level.txt", "my_pkg-1.0.0+abc.dist-info/RECORD"}
	if strings.Join(names, " ") != strings.Join(wantNames, " ") {
		t.Errorf("entries %v\nwant    %v", names, wantNames)
	}
	// a time before zip's first year is clamped, not wrapped
	c, err := Pack(blib, t.TempDir(), time.Unix(0, 0))
	if err != nil || c.SHA256 == a.SHA256 {
		t.Errorf("epoch 0: %v %+v", err, c)
	}
}

// TestCheckCatchesDamage: Check is what the tests trust, so it must fail on a wheel whose
// entry does not match RECORD, or that holds an entry RECORD does not list.
func TestCheckCatchesDamage(t *testing.T) {
	write := func(entries map[string]string, order []string) string {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for _, n := range order {
			w, _ := zw.Create(n)
			w.Write([]byte(entries[n]))
		}
		zw.Close()
		p := filepath.Join(t.TempDir(), "x-1-py3-none-any.whl")
		if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const rec = "x/a.py,sha256=ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0,3\nx-1.dist-info/RECORD,,\n"
	good := write(map[string]string{"x/a.py": "abc", "x-1.dist-info/RECORD": rec}, []string{"x/a.py", "x-1.dist-info/RECORD"})
	if err := Check(good); err != nil {
		t.Fatalf("a good wheel: %v", err)
	}
	bad := write(map[string]string{"x/a.py": "abd", "x-1.dist-info/RECORD": rec}, []string{"x/a.py", "x-1.dist-info/RECORD"})
	if err := Check(bad); err == nil {
		t.Error("a changed entry passed")
	}
	extra := write(map[string]string{"x/a.py": "abc", "x/b.py": "", "x-1.dist-info/RECORD": rec}, []string{"x/a.py", "x/b.py", "x-1.dist-info/RECORD"})
	if err := Check(extra); err == nil {
		t.Error("an entry RECORD does not list passed")
	}
}

func TestRequirement(t *testing.T) {
	for in, want := range map[string]string{
		"numpy>=1":           "numpy (>=1)",
		"a[z,b] <2, >=1.0":   "a[b,z] (<2,>=1.0)",
		"pkg @ https://x/y":  "pkg @ https://x/y",
		"torch":              "torch",
		"foo.bar-baz==1.0.*": "foo.bar-baz (==1.0.*)",
	} {
		if got, err := requirement(in); err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-x", "a; python_version>'3'"} {
		if _, err := requirement(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if got := EscapeName("My.Pkg--x_y"); got != "my_pkg_x_y" {
		t.Errorf("EscapeName: %s", got)
	}
}
