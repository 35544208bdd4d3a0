package stage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/builder/verify"
)

func TestParseRepro(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	if r, err := ParseRepro(env()); err != nil || r.Off || r.root() != DefaultBuildRoot {
		t.Errorf("%+v %v", r, err)
	}
	if r, err := ParseRepro(env("EPBUILD_REPRO", "off", "EPBUILD_BUILD_ROOT", "/scratch/builds")); err != nil || !r.Off || r.root() != "/scratch/builds" {
		t.Errorf("%+v %v", r, err)
	}
	for _, kv := range [][]string{{"EPBUILD_REPRO", "no"}, {"EPBUILD_BUILD_ROOT", "relative"}, {"EPBUILD_BUILD_ROOT", "/with space"},
		{"EPBUILD_BUILD_ROOT", "/a,b"}, {"EPBUILD_BUILD_ROOT", "/trailing/"}} {
		var ue *plan.UsageError
		if _, err := ParseRepro(env(kv...)); !errors.As(err, &ue) || !strings.Contains(err.Error(), kv[0]) {
			t.Errorf("%v: %v", kv, err)
		}
	}
	if (Repro{}).key() == (Repro{Off: true}).key() {
		t.Error("the measures must change the build keys")
	}
	if (Repro{}).key() != (Repro{Root: "/scratch"}).key() {
		t.Error("the build root must not change the build keys")
	}
}

// The wrappers give nvcc a seed named after the output inside the build directory and
// -objtemp when it compiles, whether in nvcc's place or as a launcher; a stand-in nvcc
// records the arguments it gets. The launcher runs any other program as it is.
func TestNVCCWrappers(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "cuda", "bin", "nvcc")
	os.MkdirAll(filepath.Dir(fake), 0o755)
	echo := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"
	os.WriteFile(fake, []byte(echo), 0o755)
	other := filepath.Join(dir, "c++")
	os.WriteFile(other, []byte(echo), 0o755)
	work := filepath.Join(dir, "epbuild-deepep-0123456789ab")
	out := filepath.Join(dir, "scratch", "epbuild-deepep-0123456789ab")
	w, err := writeNVCCWrappers(&workDir{path: work, out: out}, &toolchain.Toolchain{NVCC: fake, NVCCRandomSeed: true, NVCCObjTemp: true})
	if err != nil {
		t.Fatal(err)
	}
	run := func(script string, args ...string) string {
		out, err := exec.Command(script, args...).Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "|")
	}
	for _, c := range []struct {
		script string
		args   []string
		want   string
	}{
		// torch: a compile, and a device link whose first argument is an object
		{w.nvcc, []string{"--generate-dependencies-with-compile", "-c", work + "/src/a b.cu", "-o", work + "/build/a.o"},
			"-objtemp|--frandom-seed=build/a.o|--generate-dependencies-with-compile|-c|" + work + "/src/a b.cu|-o|" + work + "/build/a.o"},
		{w.nvcc, []string{work + "/build/a.o", "-o", work + "/build/dlink.o", "-dlink"},
			"--frandom-seed=build/dlink.o|" + work + "/build/a.o|-o|" + work + "/build/dlink.o|-dlink"},
		// an object in the build directory under another root: the seed is the same as
		// in the source directory's
		{w.nvcc, []string{"-c", work + "/src/a.cu", "-o", out + "/build/a.o"},
			"-objtemp|--frandom-seed=build/a.o|-c|" + work + "/src/a.cu|-o|" + out + "/build/a.o"},
		// CMake: a relative object
		{w.launcher, []string{fake, "-x", "cu", "-dc", "k.cu", "-o", "CMakeFiles/t.dir/k.cu.o"},
			"-objtemp|--frandom-seed=CMakeFiles/t.dir/k.cu.o|-x|cu|-dc|k.cu|-o|CMakeFiles/t.dir/k.cu.o"},
		{w.launcher, []string{other, "-shared", "-o", "libt.so"}, "-shared|-o|libt.so"},
		// NCCL's make: dependencies of a -dc compile, printed, and its version
		{w.nvcc, []string{"-M", "-dc", "k.cu"}, "-M|-dc|k.cu"},
		{w.nvcc, []string{"--version"}, "--version"},
	} {
		if got := run(c.script, c.args...); got != c.want {
			t.Errorf("%s %q:\n got %s\nwant %s", filepath.Base(c.script), c.args, got, c.want)
		}
	}
	if w, _ := writeNVCCWrappers(&workDir{path: work, out: work}, &toolchain.Toolchain{NVCC: fake}); w.nvcc != "" || w.launcher != "" {
		t.Error("wrappers for an nvcc that takes neither flag")
	}
}

// Check results name a staged prefix in the cache by the path it has in the artifact;
// a prefix outside the store (a wheel in site-packages) is the environment's and stays.
func TestStoreRelative(t *testing.T) {
	store := "/home/u/.cache/epbuild"
	deep := store + "/stages/build/0123/prefix"
	nv := store + "/stages/build/4567/prefix"
	wheel := "/usr/lib/python3/dist-packages/nvidia/nvshmem"
	in := []verify.CheckResult{{ID: "deepep.runpath", Read: deep + "/python/deep_ep_cpp.so (DT_NEEDED)",
		Expected: "libnvshmem_host.so.3 from nvshmem (" + nv + ")", Found: nv + "/lib/libnvshmem_host.so.3 via " + wheel + "/lib"}}
	out := storeRelative(in, store, map[string]string{"deepep": deep, "nvshmem": nv, "wheel": wheel})
	want := verify.CheckResult{ID: "deepep.runpath", Read: "deepep/python/deep_ep_cpp.so (DT_NEEDED)",
		Expected: "libnvshmem_host.so.3 from nvshmem (nvshmem)", Found: "nvshmem/lib/libnvshmem_host.so.3 via " + wheel + "/lib"}
	if out[0] != want {
		t.Errorf("\n got %+v\nwant %+v", out[0], want)
	}
	if in[0].Read == out[0].Read {
		t.Error("the input was changed in place")
	}
}

// An archive source's time is its newest file's, whatever the directories' times.
func TestNewestFileTime(t *testing.T) {
	dir := t.TempDir()
	for name, sec := range map[string]int64{"a": 1600000000, "sub/b": 1700000000, "sub/c": 1650000000} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(name), 0o644)
		tm := time.Unix(sec, 0)
		if err := os.Chtimes(p, tm, tm); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("a", filepath.Join(dir, "link"))
	if got := newestFileTime(dir); got != 1700000000 {
		t.Errorf("%d", got)
	}
	if got := newestFileTime(t.TempDir()); got != 0 {
		t.Errorf("an empty tree: %d", got)
	}
}

// A build root on a file system mounted noexec is refused before any work; a sticky tmpfs
// is a build root. Real tmpfs mounts, in a mount namespace of a child process.
func TestBuildRootNoexec(t *testing.T) {
	fixture.InMountNamespace(t, "TestBuildRootNoexec", "rootnoexec", func(t *testing.T) {
		fixture.PrivateMounts(t)
		noexec, exec := fixture.MountTmpfs(t, syscall.MS_NOEXEC, "1m"), fixture.MountTmpfs(t, 0, "1m")
		if err := checkBuildRoot(noexec); err == nil || !strings.Contains(err.Error(), "noexec") {
			t.Errorf("a noexec root: %v", err)
		}
		if err := checkBuildRoot(exec); err != nil {
			t.Errorf("a sticky tmpfs root: %v", err)
		}
	})
}

// The build directory's lock: a FIFO or another user's file where it goes, or another
// user's lock directory, is refused at once with what is wrong; the ones beside the
// directory (where an older epbuild locks) are ignored when unsafe.
func TestBuildDirLockRefusesFIFOAndOthersFiles(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give files to another user")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "epbuild-libdemo-0123456789ab")
	priv := filepath.Join(root, fmt.Sprintf("epbuild-locks-%d", os.Getuid()))
	lock := filepath.Join(priv, filepath.Base(dir)+".lock")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	say := func(any, ...any) {}
	// an older epbuild's place holds a FIFO: ignored, the build goes on
	if err := syscall.Mkfifo(dir+".lock", 0o666); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockBuildDir(ctx, dir, say)
	if err != nil {
		t.Fatal(err)
	}
	unlock()
	refused := func(what, want string) {
		t.Helper()
		_, err := lockBuildDir(ctx, dir, say)
		var pe *toolchain.PreflightError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", what, err)
		}
	}
	os.Remove(lock)
	if err := syscall.Mkfifo(lock, 0o666); err != nil {
		t.Fatal(err)
	}
	refused("a FIFO", "not a regular file")
	os.Remove(lock)
	if err := os.WriteFile(lock, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(lock, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	refused("another user's file", "owned by")
	os.Remove(lock)
	if err := os.Chown(priv, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	refused("another user's lock directory", "not yours")
	if ctx.Err() != nil {
		t.Error("a lock waited")
	}
}
