package plan

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ulikunitz/xz"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// nvidiaArchive writes a small tar.xz in the layout of NVIDIA's redist archives: one top
// directory holding lib/ (a stub libnvshmem_host.so.3 and its dev link), include/, bin/.
func nvidiaArchive(t *testing.T, top string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := xz.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	for _, e := range []struct {
		name, body, link string
		mode             int64
	}{
		{name: top + "/", mode: 0o755},
		{name: top + "/lib/", mode: 0o755},
		{name: top + "/lib/libnvshmem_host.so.3", body: "stub host library\n", mode: 0o755},
		{name: top + "/lib/libnvshmem_host.so", link: "libnvshmem_host.so.3"},
		{name: top + "/include/", mode: 0o755},
		{name: top + "/include/nvshmem.h", body: "#define NVSHMEM_VENDOR_MAJOR_VERSION 3\nint nvshmem_my_pe(void);\n", mode: 0o644},
		{name: top + "/bin/", mode: 0o755},
		{name: top + "/bin/nvshmem-info", body: "#!/bin/sh\n", mode: 0o755},
	} {
		h := &tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		switch {
		case e.link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, e.link, 0o777
		case e.name[len(e.name)-1] == '/':
			h.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A prebuilt pin goes through the real fetch path (HTTPS on loopback, sha256 checked,
// strip 1) and the copy step lays NVIDIA's tree out as the prefix DeepEP's setup.py takes
// as NVSHMEM_DIR: a C file including nvshmem.h compiles against it.
func TestPrebuiltFetchExtractCopy(t *testing.T) {
	const top = "libnvshmem-linux-x86_64-3.7.1_cuda13-archive"
	data := nvidiaArchive(t, top)
	sum := sha256.Sum256(data)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/redist/"+top+".tar.xz" {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	}))
	defer srv.Close()
	cat, err := compat.ParseCatalog("catalog.yaml", []byte(fmt.Sprintf(`components:
  nvshmem:
    - version: 3.7.1
      built-here: false
      pinned-from: %[1]s/redistrib_3.7.1.json
      pins:
        - prebuilt: true
          cuda: "13"
          archive: {url: %[1]s/redist/%[2]s.tar.xz, sha256: %[3]s, strip: 1}
`, srv.URL, top, hex.EncodeToString(sum[:]))))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := recipes.NewLibrary().Load("gcp-b200")
	if err != nil {
		t.Fatal(err)
	}
	sets := []string{"nvshmem.version=3.7.1", "toolchain.cuda=13.0"}
	if err := doc.Apply(sets); err != nil {
		t.Fatal(err)
	}
	if err := ApplyCatalog(doc, sets, cat); err != nil {
		t.Fatal(err)
	}
	c, _ := doc.Recipe.Component("nvshmem")
	if !IsPrebuilt(*c) {
		t.Fatalf("not the prebuilt copy: %+v", c)
	}
	ca, err := cache.Open(filepath.Join(t.TempDir(), "cache"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := source.New(source.Options{Cache: ca, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	tree := filepath.Join(t.TempDir(), "src")
	a := c.Source.Archive
	if err := f.ExtractArchive(context.Background(), source.Archive{URL: a.URL, SHA256: a.SHA256, Strip: a.Strip}, tree); err != nil {
		t.Fatal(err)
	}
	// the step as the builder runs a command step: in the tree, with PREFIX and DESTDIR
	destdir, prefix := t.TempDir(), "/opt/ep/nvshmem"
	run := c.Build[0].Command.Run
	cmd := exec.Command(run[0], run[1:]...)
	cmd.Dir = tree
	cmd.Env = append(os.Environ(), "PREFIX="+prefix, "DESTDIR="+destdir, "SRC="+tree)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", run, err, out)
	}
	staged := filepath.Join(destdir, prefix)
	if b, err := os.ReadFile(filepath.Join(staged, "lib/libnvshmem_host.so.3")); err != nil || string(b) != "stub host library\n" {
		t.Errorf("lib/libnvshmem_host.so.3: %q %v", b, err)
	}
	if l, err := os.Readlink(filepath.Join(staged, "lib/libnvshmem_host.so")); err != nil || l != "libnvshmem_host.so.3" {
		t.Errorf("the dev link is not kept as a link: %q %v", l, err)
	}
	if st, err := os.Stat(filepath.Join(staged, "bin/nvshmem-info")); err != nil || st.Mode().Perm()&0o100 == 0 {
		t.Errorf("bin/nvshmem-info: %v %v", st, err)
	}
	src := filepath.Join(t.TempDir(), "use.c")
	if err := os.WriteFile(src, []byte("#include <nvshmem.h>\nint use(void) { return nvshmem_my_pe() + NVSHMEM_VENDOR_MAJOR_VERSION; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-fsyntax-only", "-I", filepath.Join(staged, "include"), src).CombinedOutput(); err != nil {
		t.Errorf("compile against the copied include/: %v\n%s", err, out)
	}
}
