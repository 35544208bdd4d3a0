package verify

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// buildFakeNVSHMEMHost compiles a shared library at path whose
// nvshmemx_vendor_get_version_info answers major.minor.patch, as NVSHMEM's host library does.
func buildFakeNVSHMEMHost(t *testing.T, path string, major, minor, patch string) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip(err)
	}
	src := filepath.Join(t.TempDir(), "host.c")
	code := "void nvshmemx_vendor_get_version_info(int *a, int *b, int *c) { *a = " + major + "; *b = " + minor + "; *c = " + patch + "; }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", path, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
}

// The loaded library's version is what the library answers, over its file name; a
// library named libnvshmem_host.so.3 with no wheel beside it still has a version; a
// file that is no library falls back to its name.
func TestLoadedNVSHMEMVersionFromTheLibrary(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	bare := filepath.Join(dir, "a", "libnvshmem_host.so.3")
	named := filepath.Join(dir, "b", "libnvshmem_host.so.3.4.5")
	buildFakeNVSHMEMHost(t, bare, "3", "5", "0")
	buildFakeNVSHMEMHost(t, named, "3", "5", "19")
	notLib := filepath.Join(dir, "c", "libnvshmem_host.so.3.4.5")
	os.MkdirAll(filepath.Dir(notLib), 0o755)
	if err := os.WriteFile(notLib, []byte("not an ELF file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	version := loadedNVSHMEMVersion(context.Background(), "", nil)
	for lib, want := range map[string]string{bare: "3.5.0", named: "3.5.19", notLib: "3.4.5"} {
		if got := version(lib); got != want {
			t.Errorf("%s: %q, want %q", lib, got, want)
		}
	}
	f := map[string]string{}
	loadedFacts(f, []string{bare}, "3.5.0", version)
	if f["nvshmem.loaded-version"] != "3.5.0" || f["nvshmem.loaded-matches-build"] != "yes" {
		t.Errorf("loaded facts: %v", f)
	}
}
