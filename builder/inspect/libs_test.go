package inspect

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
)

// A prefix with lib/libdep.so.1 (which needs libm) and lib/libtop.so linked against it
// with the given RUNPATH.
func libsPrefix(t *testing.T, rpath string) (root, top string) {
	t.Helper()
	needTool(t, "gcc")
	root = t.TempDir()
	lib := filepath.Join(root, "tool", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(lib, "dep.c"), []byte("#include <math.h>\ndouble dep(double x) { return sqrt(x); }\n"))
	writeFile(t, filepath.Join(lib, "top.c"), []byte("double dep(double);\ndouble top(void) { return dep(4); }\n"))
	run(t, lib, "gcc", "-shared", "-fPIC", "-Wl,--no-as-needed", "-Wl,-soname,libdep.so.1", "-o", "libdep.so.1", "dep.c", "-lm")
	if err := os.Symlink("libdep.so.1", filepath.Join(lib, "libdep.so")); err != nil {
		t.Fatal(err)
	}
	args := []string{"-shared", "-fPIC", "-o", "libtop.so", "top.c", "-L.", "-ldep"}
	if rpath != "" {
		args = append(args, "-Wl,--enable-new-dtags,-rpath,"+rpath)
	}
	run(t, lib, "gcc", args...)
	return root, filepath.Join(lib, "libtop.so")
}

func TestCheckLibs(t *testing.T) {
	system := []string{"libc.so.*", "libm.so.6"}

	root, top := libsPrefix(t, "$ORIGIN")
	r := CheckLibs(top, root, system)
	if r.Status != check.Pass || !strings.Contains(r.Found, "1 libraries in the prefix, from the host: libc.so.6 libm.so.6") {
		t.Errorf("RUNPATH $ORIGIN: %+v", r)
	}
	// libm is needed by the library found in the prefix, not by the file itself
	r = CheckLibs(top, root, []string{"libc.so.6"})
	if r.Status != check.Fail || !strings.Contains(r.Why, "tool/lib/libdep.so.1: libm.so.6 is neither in the prefix") {
		t.Errorf("transitive libm not allowed: %+v", r)
	}
	// a library that resolves to a file outside the prefix through a symlink
	outside := filepath.Join(t.TempDir(), "libdep.so.1")
	dep := filepath.Join(root, "tool", "lib", "libdep.so.1")
	if err := os.Rename(dep, outside); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, dep); err != nil {
		t.Fatal(err)
	}
	r = CheckLibs(top, root, system)
	if r.Status != check.Fail || !strings.Contains(r.Why, "libdep.so.1 resolves outside the prefix") {
		t.Errorf("symlink out of the prefix: %+v", r)
	}

	root, top = libsPrefix(t, "")
	r = CheckLibs(top, root, system)
	if r.Status != check.Fail || !strings.Contains(r.Why, "tool/lib/libtop.so: libdep.so.1 is neither in the prefix") {
		t.Errorf("no RUNPATH: %+v", r)
	}

	// an absolute RUNPATH resolves on the build host and nowhere else
	root, _ = libsPrefix(t, "")
	lib := filepath.Join(root, "tool", "lib")
	run(t, lib, "gcc", "-shared", "-fPIC", "-o", "libabs.so", "top.c", "-L.", "-ldep", "-Wl,--enable-new-dtags,-rpath,"+lib)
	r = CheckLibs(filepath.Join(lib, "libabs.so"), root, system)
	if r.Status != check.Fail || !strings.Contains(r.Why, "is not relative to $ORIGIN") {
		t.Errorf("absolute RUNPATH: %+v", r)
	}

	root, top = libsPrefix(t, "$ORIGIN/../../..")
	r = CheckLibs(top, root, system)
	if r.Status != check.Fail || !strings.Contains(r.Why, `RUNPATH entry "$ORIGIN/../../.." leaves the prefix`) {
		t.Errorf("RUNPATH out of the prefix: %+v", r)
	}

	r = CheckLibs(filepath.Join(root, "missing.so"), root, system)
	if r.Status != check.Fail {
		t.Errorf("missing file: %+v", r)
	}
}
