package inspect

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pyCompile compiles src into pyc with the real py_compile, in one of its invalidation
// modes (TIMESTAMP, CHECKED_HASH, UNCHECKED_HASH) at an optimization level.
func pyCompile(t *testing.T, python, src, pyc, mode string, optimize int) {
	t.Helper()
	run(t, filepath.Dir(src), python, "-c", `import py_compile, sys
py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True, optimize=int(sys.argv[4]),
    invalidation_mode=py_compile.PycInvalidationMode[sys.argv[3]])`, src, pyc, mode, strconv.Itoa(optimize))
}

// cacheTag is the interpreter's bytecode tag (cpython-311).
func cacheTag(t *testing.T, python string) string {
	return strings.TrimSpace(run(t, t.TempDir(), python, "-c", "import sys; print(sys.implementation.cache_tag)"))
}

func TestCheckBytecode(t *testing.T) {
	python := needPython(t)
	ctx := testContext(t)
	tag := cacheTag(t, python)
	dir := t.TempDir()
	canary := filepath.Join(t.TempDir(), "ran")
	good := "def lanes():\n    \"\"\"The lanes.\"\"\"\n    return [0, 1]\n"
	// the same size as good, with other code: what an attacker compiles and plants
	evil := "open(" + pyQuote(canary) + ", 'w')\n"
	good += "#" + strings.Repeat("-", len(evil)) + "\n"
	evil += "#" + strings.Repeat("-", len(good)-len(evil)-2) + "\n"
	src := filepath.Join(dir, "mod.py")
	writeFile(t, src, []byte(good))
	stamp := time.Unix(1700000000, 0)
	if err := os.Chtimes(src, stamp, stamp); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "mod.py")
	writeFile(t, other, []byte(evil))
	if err := os.Chtimes(other, stamp, stamp); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "__pycache__")
	pyc := func(name string) string { return filepath.Join(cache, name) }

	type tc struct {
		name string
		make func(pyc string)
		tag  string
		opt  int
		want string // "" for OK, else in the problem
	}
	cases := []tc{
		{"timestamp, compiled from the source", func(p string) { pyCompile(t, python, src, p, "TIMESTAMP", 0) }, tag, 0, ""},
		{"checked hash, compiled from the source", func(p string) { pyCompile(t, python, src, p, "CHECKED_HASH", 0) }, tag, 0, ""},
		{"unchecked hash, compiled from the source", func(p string) { pyCompile(t, python, src, p, "UNCHECKED_HASH", 0) }, tag, 0, ""},
		{"optimized, compiled from the source", func(p string) { pyCompile(t, python, src, p, "TIMESTAMP", 2) }, tag, 2, ""},
		{"unchecked hash of another source", func(p string) { pyCompile(t, python, other, p, "UNCHECKED_HASH", 0) }, tag, 0, "unchecked-hash"},
		{"timestamp of another source of the same size and mtime", func(p string) { pyCompile(t, python, other, p, "TIMESTAMP", 0) }, tag, 0,
			"its code is not what compiling the source gives"},
		{"another source under a header forged from the source", func(p string) {
			pyCompile(t, python, src, p, "UNCHECKED_HASH", 0)
			head, _ := os.ReadFile(p)
			pyCompile(t, python, other, p, "UNCHECKED_HASH", 0)
			body, _ := os.ReadFile(p)
			writeFile(t, p, append(head[:16:16], body[16:]...))
		}, tag, 0, "its code is not what compiling the source gives"},
		{"optimization level other than the name's", func(p string) { pyCompile(t, python, src, p, "TIMESTAMP", 0) }, tag, 2, "its code is not"},
		{"checked hash of another source", func(p string) { pyCompile(t, python, other, p, "CHECKED_HASH", 0) }, tag, 0, "stale: the source hash"},
		{"for another interpreter", func(p string) { pyCompile(t, python, src, p, "TIMESTAMP", 0) }, "cpython-27", 0, "another interpreter (cpython-27)"},
		{"a truncated header", func(p string) { writeFile(t, p, []byte("\x00\x01")) }, tag, 0, "shorter than a bytecode header"},
		{"garbage after a good header", func(p string) {
			pyCompile(t, python, src, p, "UNCHECKED_HASH", 0)
			b, _ := os.ReadFile(p)
			writeFile(t, p, append(b[:16:16], 0xff, 0xfe))
		}, tag, 0, "cannot be checked"},
	}
	var files []BytecodeFile
	for i, c := range cases {
		p := pyc("mod" + strconv.Itoa(i) + "." + tag + ".pyc")
		c.make(p)
		files = append(files, BytecodeFile{Pyc: p, Source: src, Tag: c.tag, Optimize: c.opt})
	}
	// a stale header: the source touched after it was compiled
	stale := pyc("stale." + tag + ".pyc")
	pyCompile(t, python, src, stale, "TIMESTAMP", 0)
	touched := filepath.Join(dir, "touched.py")
	writeFile(t, touched, []byte(good))
	cases = append(cases, tc{name: "stale timestamp", want: "stale: it records a source of mtime 1700000000"})
	files = append(files, BytecodeFile{Pyc: stale, Source: touched, Tag: tag})

	vs, err := CheckBytecode(ctx, python, nil, files)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range cases {
		v := vs[i]
		switch {
		case v.Pyc != files[i].Pyc:
			t.Errorf("%s: verdict for %s", c.name, v.Pyc)
		case c.want == "" && !v.OK:
			t.Errorf("%s: refused: %s", c.name, v.Problem)
		case c.want != "" && (v.OK || !strings.Contains(v.Problem, c.want)):
			t.Errorf("%s: ok=%v %q, want %q", c.name, v.OK, v.Problem, c.want)
		}
	}
	if _, err := os.Stat(canary); err == nil {
		t.Error("checking the bytecode ran it")
	}
}

// A .pyc planted in the __pycache__ of an install runs when Python imports the module
// normally; the import checks never read it.
func TestPythonImportReadsNoPlantedBytecode(t *testing.T) {
	python := needPython(t)
	ctx := testContext(t)
	prefix := t.TempDir()
	canary := filepath.Join(t.TempDir(), "ran")
	writePackage(t, prefix, "planted_probe", "1", "")
	evil := filepath.Join(t.TempDir(), "__init__.py")
	writeFile(t, evil, []byte("open("+pyQuote(canary)+", 'w')\n__version__ = 'evil'\n"))
	tag := cacheTag(t, python)
	pyCompile(t, python, evil, filepath.Join(prefix, "planted_probe", "__pycache__", "__init__."+tag+".pyc"), "UNCHECKED_HASH", 0)
	env := []string{"PYTHONPATH=" + prefix}

	// the test proves something: a plain import runs it
	run(t, t.TempDir(), "env", "-i", "PYTHONPATH="+prefix, python, "-c", "import planted_probe")
	if _, err := os.Stat(canary); err != nil {
		t.Fatalf("a plain import did not run the planted bytecode: %v", err)
	}
	if err := os.Remove(canary); err != nil {
		t.Fatal(err)
	}
	// each run on its own, then runs sharing what they compile
	shared := t.TempDir()
	for _, ctx := range []context.Context{ctx, WithBytecodeDir(ctx, shared)} {
		res, err := PythonImport(ctx, python, "planted_probe", env, "")
		if err != nil || res.Version != "1" {
			t.Errorf("import: version %q, %v", res.Version, err)
		}
		if _, err := MappedLibs(ctx, python, []string{"planted_probe"}, env, "libc"); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(canary); err == nil {
			t.Fatal("an import check ran the planted bytecode")
		}
	}
	// the shared directory holds the module compiled from its source; the prefix
	// holds what it held
	if m, _ := filepath.Glob(filepath.Join(shared, prefix, "planted_probe", "__init__.*.pyc")); len(m) != 1 {
		t.Errorf("the shared bytecode directory holds %v", m)
	}
	if ents, _ := os.ReadDir(filepath.Join(prefix, "planted_probe", "__pycache__")); len(ents) != 1 {
		t.Errorf("the import checks wrote into the prefix's __pycache__: %d entries", len(ents))
	}
}

func pyQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
