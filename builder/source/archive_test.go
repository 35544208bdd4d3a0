package source

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/cache"
)

// tarGz builds a .tar.gz with one top directory, as NVIDIA's source tarballs have.
func tarGz(t testing.TB, top string, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: top + "/", Typeflag: tar.TypeDir, Mode: 0o755})
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: top + "/" + name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(content))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return b.Bytes()
}

func TestFetchArchive(t *testing.T) {
	srv := newFileServer(t, 0)
	body := tarGz(t, "nvshmem_src", map[string]string{"CMakeLists.txt": "project(nvshmem)\n", "src/host.c": "int x;\n"})
	url := srv.put("/compute/redist/nvshmem/3.2.5/source/nvshmem_src_3.2.5-1.txz.tar.gz", body)
	sum := sha256hex(body)
	var logs bytes.Buffer
	c, err := cache.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(Options{Cache: c, Progress: ProgressLines, Logger: log.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := Archive{URL: url, SHA256: strings.ToUpper(sum), Strip: 1}

	p, err := f.FetchArchive(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if p != c.ArchivePath(sum) {
		t.Errorf("cached at %s, want %s", p, c.ArchivePath(sum))
	}
	if b, _ := os.ReadFile(p); !bytes.Equal(b, body) {
		t.Errorf("cached bytes differ")
	}
	if !strings.Contains(logs.String(), "fetched") {
		t.Errorf("no progress line in lines mode: %q", logs.String())
	}
	dest := filepath.Join(t.TempDir(), "nvshmem")
	if err := f.ExtractArchive(ctx, a, dest); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "src", "host.c")); err != nil || string(b) != "int x;\n" {
		t.Errorf("extracted src/host.c: %q, %v", b, err)
	}
	if err := f.ExtractArchive(ctx, a, filepath.Join(t.TempDir(), "again")); err != nil {
		t.Fatal(err)
	}
	if n := srv.count("/compute/redist/nvshmem/3.2.5/source/nvshmem_src_3.2.5-1.txz.tar.gz"); n != 1 {
		t.Errorf("%d downloads, want 1 (the cache serves the rest)", n)
	}
	assertNoTemp(t, f)
	es, err := c.List()
	if err != nil || len(es) != 1 || es[0].Kind != cache.KindArchive || es[0].Key != sum || es[0].URL != url || es[0].Size != int64(len(body)) {
		t.Errorf("cache entries %+v, %v", es, err)
	}
}

func TestFetchArchiveFailures(t *testing.T) {
	srv := newFileServer(t, 0)
	good := tarGz(t, "top", map[string]string{"a.txt": strings.Repeat("a", 10000)})
	ctx := context.Background()

	t.Run("sha256 mismatch", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		url := srv.put("/mismatch.tar.gz", good)
		want := strings.Repeat("0", 64)
		_, err := f.FetchArchive(ctx, Archive{URL: url, SHA256: want})
		if !errors.Is(err, ErrBadPin) {
			t.Fatalf("got %v, want a bad pin", err)
		}
		for _, s := range []string{"expected " + want, "got " + sha256hex(good), url} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not say %q", err, s)
			}
		}
		if _, err := os.Stat(f.Cache().ArchivePath(want)); err == nil {
			t.Errorf("mismatched archive stored in the cache")
		}
		assertNoTemp(t, f)
	})
	t.Run("short sha256", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		_, err := f.FetchArchive(ctx, Archive{URL: srv.URL + "/x.tar.gz", SHA256: "abc"})
		if !errors.Is(err, ErrBadPin) || !strings.Contains(err.Error(), "64 hex") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("not found", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		_, err := f.FetchArchive(ctx, Archive{URL: srv.URL + "/missing.tar.gz", SHA256: sha256hex(good)})
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), "404") {
			t.Fatalf("got %v", err)
		}
		assertNoTemp(t, f)
	})
	t.Run("unreachable", func(t *testing.T) {
		f := newTestFetcher(t, "", "")
		u := closedPortURL(t, "/x.tar.gz")
		_, err := f.FetchArchive(ctx, Archive{URL: u, SHA256: sha256hex(good)})
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), u) {
			t.Fatalf("got %v", err)
		}
		assertUnreachable(t, err)
	})
	t.Run("truncated", func(t *testing.T) {
		cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", fmt.Sprint(len(good)))
			w.Write(good[:len(good)/2]) // the server dies mid-body
		}))
		defer cut.Close()
		f := newTestFetcher(t, "", "")
		_, err := f.FetchArchive(ctx, Archive{URL: cut.URL + "/x.tar.gz", SHA256: sha256hex(good)})
		if !errors.Is(err, ErrFetch) || !strings.Contains(err.Error(), "/x.tar.gz") {
			t.Fatalf("got %v", err)
		}
		if _, err := os.Stat(f.Cache().ArchivePath(sha256hex(good))); err == nil {
			t.Errorf("truncated archive stored in the cache")
		}
		assertNoTemp(t, f)
	})
	t.Run("corrupt but pinned", func(t *testing.T) {
		// The pin matches damaged bytes: the fetch succeeds, the extraction must not.
		bad := append([]byte(nil), good...)
		for i := 20; i < 60; i++ {
			bad[i] ^= 0x5a
		}
		f := newTestFetcher(t, "", "")
		url := srv.put("/corrupt.tar.gz", bad)
		dest := filepath.Join(t.TempDir(), "x")
		err := f.ExtractArchive(ctx, Archive{URL: url, SHA256: sha256hex(bad)}, dest)
		if !errors.Is(err, archive.ErrCorrupt) || !strings.Contains(err.Error(), url) {
			t.Fatalf("got %v, want a corrupt-archive error naming the URL", err)
		}
		if _, err := os.Lstat(dest); err == nil {
			t.Errorf("a failed extraction left %s", dest)
		}
	})
}
