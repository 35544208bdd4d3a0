package archive

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// fixedTime is the mtime crafted archives and fixture trees use, so seeds are reproducible.
var fixedTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

func run(t testing.TB, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String()
}

func writeFile(t testing.TB, p string, data string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

// makeSourceTree writes a small tree shaped like an unpacked source release or an install:
// nested dirs, an empty dir, exec scripts, a binary file, versioned .so symlinks, a name with
// a space and a path longer than the 100 bytes a plain ustar name field holds.
func makeSourceTree(t testing.TB, dir string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "README.md"), "# fixture\n", 0o644)
	// Sorts between "lib" and "lib/...": byte order differs from a depth-first walk here.
	writeFile(t, filepath.Join(dir, "lib-config.cmake"), "set(X 1)\n", 0o644)
	writeFile(t, filepath.Join(dir, "bin", "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	writeFile(t, filepath.Join(dir, "bin", "tool"), "#!/bin/sh\nexit 0\n", 0o750)
	writeFile(t, filepath.Join(dir, "src", "host", "init.cpp"), strings.Repeat("int x = 1;\n", 500), 0o644)
	writeFile(t, filepath.Join(dir, "src", "with space.h"), "#pragma once\n", 0o644)
	bin := make([]byte, 200<<10)
	for i := range bin {
		bin[i] = byte(i*7 + i/251)
	}
	writeFile(t, filepath.Join(dir, "lib", "libnvshmem_host.so.3.2.5"), string(bin), 0o755)
	long := filepath.Join(dir, "include", strings.Repeat("deep_directory_name/", 6), "very_long_header_name_for_pax.cuh")
	writeFile(t, long, "// long\n", 0o644)
	if err := os.MkdirAll(filepath.Join(dir, "share", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, l := range [][2]string{
		{"libnvshmem_host.so.3.2.5", filepath.Join(dir, "lib", "libnvshmem_host.so.3")},
		{"libnvshmem_host.so.3", filepath.Join(dir, "lib", "libnvshmem_host.so")},
		{"../lib/libnvshmem_host.so", filepath.Join(dir, "bin", "libhost-link")},
		{"missing-on-purpose", filepath.Join(dir, "share", "dangling")},
	} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
}

func hashTree(t testing.TB, dir string) []Entry {
	t.Helper()
	e, err := HashTree(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func diffEntries(t testing.TB, what string, got, want []Entry) {
	t.Helper()
	if slices.Equal(got, want) {
		return
	}
	n := max(len(got), len(want))
	for i := range n {
		var g, w Entry
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Fatalf("%s: entry %d differs (got %d entries, want %d):\n got  %+v\n want %+v", what, i, len(got), len(want), g, w)
		}
	}
}

// tent is one entry of a crafted tar.
type tent struct {
	name string
	typ  byte
	mode int64
	data string
	link string
}

func file(name, data string) tent { return tent{name: name, typ: tar.TypeReg, mode: 0o644, data: data} }
func dir(name string) tent        { return tent{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) tent {
	return tent{name: name, typ: tar.TypeSymlink, mode: 0o777, link: target}
}
func hardlink(name, target string) tent {
	return tent{name: name, typ: tar.TypeLink, mode: 0o644, link: target}
}
func special(name string, typ byte) tent         { return tent{name: name, typ: typ, mode: 0o644} }
func withMode(e tent, mode int64) tent           { e.mode = mode; return e }
func sized(name string, n int) tent              { return file(name, strings.Repeat("z", n)) }
func craftTar(t testing.TB, ents ...tent) []byte { return craftTarOpt(t, true, ents...) }

// craftTarOpt writes entries with archive/tar, which happily writes what hostile archives
// contain; end=false leaves out the end-of-archive marker.
func craftTarOpt(t testing.TB, end bool, ents ...tent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, ModTime: fixedTime}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("craft %q: %v", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if end {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	} else if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zent struct {
	name string
	mode os.FileMode
	data string
}

func craftZip(t testing.TB, ents ...zent) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range ents {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: fixedTime}
		h.SetMode(e.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatalf("craft zip %q: %v", e.name, err)
		}
		if _, err := w.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func compress(t testing.TB, format Format, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch format {
	case FormatTar, FormatZip:
		return data
	case FormatTarGz:
		w := gzip.NewWriter(&buf)
		_, err = w.Write(data)
		if err == nil {
			err = w.Close()
		}
	case FormatTarXz:
		var w *xz.Writer
		if w, err = xz.NewWriter(&buf); err == nil {
			if _, err = w.Write(data); err == nil {
				err = w.Close()
			}
		}
	case FormatTarZst:
		var w *zstd.Encoder
		if w, err = zstd.NewWriter(&buf); err == nil {
			if _, err = w.Write(data); err == nil {
				err = w.Close()
			}
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// listDir names what a directory holds, for checking that nothing appeared or stayed behind.
func listDir(t testing.TB, d string) []string {
	t.Helper()
	ents, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func absent(t testing.TB, p string) {
	t.Helper()
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("%s should not exist after a failed extraction (lstat: %v)", p, err)
	}
	for _, n := range listDir(t, filepath.Dir(p)) {
		if strings.Contains(n, ".partial-") {
			t.Fatalf("temporary directory %s left behind", n)
		}
	}
}
