package compat

import (
	"strings"
	"testing"
)

// NVSHMEM 3.7.0 and 3.7.1: NVIDIA's prebuilt archives, one per CUDA major, pinned by the
// sha256s of their redistrib JSONs and marked as not built here.
func TestCatalogPrebuilt(t *testing.T) {
	cat, err := LoadCatalog()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"3.7.0": {"12": "7c65a151fa2d55d25650fdbdd368467942743f64f3a3e66f01ef36c55e68c955", "13": "f954ed91fa270f4b905391e03d808f60c73b894d88ef0aae865916d685353b8c"},
		"3.7.1": {"12": "bd58642cf713c4b4fdf621cc61fc6fed5aaca4346da6a23e4a7e7eb9083afced", "13": "cbbfcef4c59f3a36e0ba7b5cd3d430e692f15765126c0463879e510190267a57"},
	}
	for v, shas := range want {
		r, ok := cat.Release("nvshmem", v)
		if !ok {
			t.Fatalf("nvshmem %s is not in the catalogue", v)
		}
		if r.IsBuiltHere() || !strings.HasSuffix(r.PinnedFrom, "/compute/nvshmem/redist/redistrib_"+v+".json") {
			t.Errorf("%s: built-here %v, pinned from %q", v, r.IsBuiltHere(), r.PinnedFrom)
		}
		if n := r.Note("nvshmem"); !strings.Contains(n, "pinned by sha256 from https://developer.download.nvidia.com/") || !strings.Contains(n, "not built or tested by epbuild's own runs") {
			t.Errorf("%s: note %q", v, n)
		}
		for major, sha := range shas {
			p, ok := r.Prebuilt(major)
			if !ok || p.Archive == nil || p.Archive.SHA256 != sha || p.Archive.Strip != 1 ||
				!strings.HasSuffix(p.Archive.URL, "/libnvshmem-linux-x86_64-"+v+"_cuda"+major+"-archive.tar.xz") {
				t.Errorf("%s cuda%s: %+v", v, major, p.Archive)
			}
		}
		// no source pin: the source kinds' lookups find nothing to build from
		if p, ok := cat.LookupKind("nvshmem", v, "archive"); ok {
			t.Errorf("%s: a prebuilt archive is taken for a source pin: %+v", v, p)
		}
	}
	// a release built here says nothing
	if r, _ := cat.Release("nvshmem", "3.5.19-1"); !r.IsBuiltHere() || r.Note("nvshmem") != "" || len(r.PrebuiltCUDA()) != 0 {
		t.Errorf("3.5.19-1: %+v", r)
	}
}

func TestParseCatalogPrebuiltErrors(t *testing.T) {
	body := `components:
  nvshmem:
    - version: 3.7.0
      built-here: false
      pinned-from: https://example.com/redistrib_3.7.0.json
      pins:
        - prebuilt: true
          cuda: "13"
          archive: {url: https://example.com/a_cuda13-archive.tar.xz, strip: 1}
        - prebuilt: true
          archive: {url: https://example.com/a_cuda12-archive.tar.xz, sha256: ` + strings.Repeat("a", 64) + `}
        - prebuilt: true
          cuda: "13"
          git: {url: https://github.com/NVIDIA/nvshmem, commit: ` + strings.Repeat("b", 40) + `}
    - version: 3.7.1
      pins:
        - prebuilt: true
          cuda: "12"
          archive: {url: https://example.com/b.tar.xz, sha256: ` + strings.Repeat("c", 64) + `}
        - cuda: "12"
          archive: {url: https://example.com/src.tar.gz, sha256: ` + strings.Repeat("d", 64) + `}
`
	_, err := ParseCatalog("catalog.yaml", []byte(body))
	for _, want := range []string{
		// the missing sha256: the pin's line, and where to read it
		"catalog.yaml:9:", "a prebuilt archive is pinned by its sha256", "redistrib JSON",
		"catalog.yaml:10:", "names the CUDA major it was built for",
		"catalog.yaml:12:", "is the vendor's archive of the built library",
		"catalog.yaml:15:", "say built-here: false and pinned-from",
		"catalog.yaml:20:", "a source pin builds with the plan's CUDA",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
}

func TestCUDAMajor(t *testing.T) {
	for _, c := range []struct{ cuda, torch, want string }{
		{"13.0", "", "13"},
		{"12.9", ">=2.10", "12"},
		{">=13.0, <14", "", "13"},
		{">=12.9", "", ""},
		{">=12.9", "2.11.0+cu130", "13"},
		{">=12.3", "2.10.0+cu129", "12"},
		{"", "", ""},
		{">=12.9", ">=2.10", ""},
	} {
		if got := CUDAMajor(c.cuda, c.torch); got != c.want {
			t.Errorf("CUDAMajor(%q, %q) = %q, want %q", c.cuda, c.torch, got, c.want)
		}
	}
}
