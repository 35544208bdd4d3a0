package wheel

import (
	"archive/zip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// pureTags are an interpreter's tags as TagScript gives them.
var pureTags = Tags{Python: "py3", Interpreter: "cp312", ABI: "cp312", Platform: "linux_x86_64", ExtensionSuffixes: []string{".so"}}

// writeEgg writes an egg-info (PKG-INFO and, when not "", requires.txt) and a build_lib
// with one module, and returns the build_lib and the egg base.
func writeEgg(t *testing.T, pkgInfo, requires string) (blib, eggBase string) {
	t.Helper()
	blib, eggBase = filepath.Join(t.TempDir(), "lib"), filepath.Join(t.TempDir(), "egg")
	egg := filepath.Join(eggBase, "pkg.egg-info")
	for _, d := range []string{filepath.Join(blib, "pk"), egg} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{filepath.Join(blib, "pk", "__init__.py"): "", filepath.Join(egg, "PKG-INFO"): pkgInfo}
	if requires != "" {
		files[filepath.Join(egg, "requires.txt")] = requires
	}
	for p, s := range files {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return blib, eggBase
}

// TestHostileMetadata: a name, version, field, requirement or tag that would forge a
// header of METADATA or WHEEL (a line break, as Python's email parser reads one: \n, \r)
// or leave the .dist-info (a / in the version) is refused, naming the field; nothing is
// written outside the build output.
func TestHostileMetadata(t *testing.T) {
	const evil = "x\rRequires-Dist: evil"
	pkg := func(name, version, extra string) string {
		return "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n" + extra
	}
	cases := []struct {
		name, pkgInfo, requires string
		tags                    Tags
		ext                     bool // an extension module in the build_lib
		want                    string
	}{
		{"name", pkg(evil, "1.0", ""), "", pureTags, false, `PKG-INFO: field Name holds a line break or control character ("x\rRequires-Dist: evil")`},
		{"name path", pkg("../../evil", "1.0", ""), "", pureTags, false, `Name "../../evil" is not a valid distribution name`},
		{"version", pkg("pkg", "1.0"+evil[1:], ""), "", pureTags, false, `PKG-INFO: field Version holds a line break or control character`},
		{"folded version", pkg("pkg", "1.0\n Requires-Dist: evil", ""), "", pureTags, false, `Version "1.0\n Requires-Dist: evil" is not a valid version`},
		{"version path", pkg("pkg", "1.0/../../../evil", ""), "", pureTags, false, `Version "1.0/../../../evil" is not a valid version`},
		{"summary", pkg("pkg", "1.0", "Summary: "+evil+"\n"), "", pureTags, false, `field Summary holds a line break or control character`},
		{"requirement url", pkg("pkg", "1.0", ""), "foo @ https://example.com/f.whl" + evil[1:] + "\n", pureTags, false, `field Requires-Dist holds a line break or control character`},
		{"requirement marker", pkg("pkg", "1.0", ""), "[:python_version>'3'" + evil[1:] + "]\nfoo\n", pureTags, false, `field Requires-Dist holds a line break or control character`},
		{"python tag", pkg("pkg", "1.0", ""), "", Tags{Python: "py3\nTag: evil"}, false, `wheel tag "py3\nTag: evil-none-any" is not`},
		{"platform tag", pkg("pkg", "1.0", ""), "", Tags{Interpreter: "cp312", ABI: "cp312", Platform: "linux\nRoot-Is-Purelib: true", ExtensionSuffixes: []string{".so"}}, true, `wheel tag "cp312-cp312-linux\nRoot-Is-Purelib: true" is not`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			blib, eggBase := writeEgg(t, c.pkgInfo, c.requires)
			if c.ext {
				if err := os.WriteFile(filepath.Join(blib, "pk", "m.so"), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := WriteDistInfo(blib, eggBase, t.TempDir(), c.tags)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant %s", err, c.want)
			}
			if m, _ := filepath.Glob(filepath.Join(filepath.Dir(blib), "*")); len(m) != 1 {
				t.Errorf("written beside the build output: %v", m)
			}
			if m, _ := filepath.Glob(filepath.Join(blib, "*.dist-info")); len(m) != 0 {
				t.Errorf("a .dist-info was written: %v", m)
			}
		})
	}
}

// TestRecordQuoting: file names with a comma, a quote, \r and \n are quoted in RECORD as
// CSV quotes them: Python's csv module reads back every entry's name, one row each.
func TestRecordQuoting(t *testing.T) {
	blib, eggBase := writeEgg(t, "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n", "")
	names := []string{"a,b.py", `q"uote.py`, "cr\rx.py", "nl\nx.py", " lead.py"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(blib, "pk", n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := WriteDistInfo(blib, eggBase, t.TempDir(), pureTags)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	info, err := Pack(blib, dir, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, info.File)
	if err := Check(file); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(file)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var entries []string
	for _, f := range zr.File {
		entries = append(entries, f.Name)
	}
	record := w.Dir + "/RECORD"
	py := `import csv, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
rows = list(csv.reader(z.read(sys.argv[2]).decode().splitlines(keepends=True)))
sys.stdout.write("\0".join(r[0] for r in rows))
`
	out, err := exec.Command("python3", "-c", py, file, record).Output()
	if err != nil {
		t.Fatalf("python3 csv: %v", err)
	}
	got := strings.Split(string(out), "\x00")
	if !slices.Equal(got, entries) {
		t.Errorf("RECORD as Python's csv reads it:\n%q\nthe wheel's entries:\n%q", got, entries)
	}
}
