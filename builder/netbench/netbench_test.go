package netbench

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/embedded"
)

// built is the benchmark and the loopback plugin compiled with gcc from the embedded
// sources, the way the recipe's build compiles them where there is no CUDA.
type built struct{ dir, bench, loopback string }

func build(t *testing.T) built {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc not found on PATH: this test compiles the benchmark and the loopback plugin")
	}
	src := t.TempDir()
	if err := embedded.WriteFiles("tools", Component, src); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	b := built{dir: out, bench: filepath.Join(out, "netbench"), loopback: filepath.Join(out, "libnccl-net-loopback.so")}
	for _, args := range [][]string{
		{"-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-o", b.bench, "netbench.c", "-ldl"},
		{"-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-fvisibility=hidden", "-o", b.loopback, "loopback.c"},
	} {
		cmd := exec.Command(gcc, args...)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return b
}

func run(t *testing.T, b built, o Options, env ...string) (*Result, error) {
	t.Helper()
	o.Bench = b.bench
	if o.Plugin == "" {
		o.Plugin = b.loopback
	}
	o.Env = append(os.Environ(), env...)
	if o.Size == "" {
		o.Size, o.Chunk, o.Iters = "6M", "128K", 2
	}
	o.Timeout = 30
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return Run(ctx, o)
}

// The benchmark fills the window the plugin allows and never goes past it, both with
// a plugin that gives a receive back when it completes and with one (like
// GPUDirect-TCPX) that holds it until the receiver consumed it.
func TestWindowStaysWithinTheRequestLimit(t *testing.T) {
	b := build(t)
	for _, tc := range []struct {
		unpack, mode string
	}{{"0", "host-direct"}, {"1", "host-unpack"}} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			res, err := run(t, b, Options{}, "LOOPBACK_UNPACK="+tc.unpack)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range []Rank{res.Recv, res.Send} {
				if r.Window != 16 || r.RequestLimit != 16 || r.MaxHeld != 16 {
					t.Errorf("%s: window %d, limit %d, most held %d: want the window full at 16", r.Role, r.Window, r.RequestLimit, r.MaxHeld)
				}
				if r.Chunks != 48 || r.Plugin != "Loopback" || r.GBps <= 0 || r.LatencyUS.P50 <= 0 || r.LatencyUS.Max < r.LatencyUS.P99 {
					t.Errorf("%s report: %+v", r.Role, r)
				}
			}
			if res.Recv.Mode != tc.mode || res.Send.Mode != "host-direct" || !res.Recv.Verified || !res.Send.Verified {
				t.Errorf("modes %s/%s, verified %v/%v", res.Recv.Mode, res.Send.Mode, res.Recv.Verified, res.Send.Verified)
			}
		})
	}
}

// The test above can fail: a window one past the plugin's limit posts a 17th request,
// and the loopback plugin stops the process, as GPUDirect-TCPX fails the job.
func TestSeventeenthRequestFails(t *testing.T) {
	b := build(t)
	for _, unpack := range []string{"0", "1"} {
		_, err := run(t, b, Options{Window: 17, RequestLimit: 17}, "LOOPBACK_UNPACK="+unpack)
		var re *RankError
		if !errors.As(err, &re) {
			t.Fatalf("LOOPBACK_UNPACK=%s, window 17: err %v, want a failed rank", unpack, err)
		}
		if !strings.Contains(re.Stderr, "request limit exceeded") || !strings.Contains(re.Stderr, "request 17 posted while 16 are held (limit 16)") {
			t.Errorf("LOOPBACK_UNPACK=%s: the failure does not name the 17th request:\n%v", unpack, re)
		}
	}
}

// Asked for a window past the limit it knows, the benchmark refuses before it starts.
func TestWindowPastTheLimitIsBadInput(t *testing.T) {
	b := build(t)
	_, err := run(t, b, Options{Window: 17})
	var re *RankError
	if !errors.As(err, &re) || re.ExitCode() != 2 || !strings.Contains(re.Stderr, "--window 17 exceeds the plugin's request limit 16") {
		t.Fatalf("err %v", err)
	}
}

// A library that is not a v7 plugin is named, exit 3.
func TestNotAPlugin(t *testing.T) {
	b := build(t)
	lib := filepath.Join(b.dir, "libnot-a-plugin.so")
	src := filepath.Join(b.dir, "x.c")
	if err := os.WriteFile(src, []byte("int x(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("gcc", "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	_, err := run(t, b, Options{Plugin: lib})
	var re *RankError
	if !errors.As(err, &re) || re.ExitCode() != 3 || !strings.Contains(re.Stderr, "exports no ncclNetPlugin_v7 symbol") {
		t.Fatalf("err %v", err)
	}
}

// The tool's own CMake build (what the recipe runs, here without CUDA) installs the
// benchmark and the loopback plugin where Locate finds them, and they work; asked for
// CUDA where there is none, it says so.
func TestCMakeBuild(t *testing.T) {
	cmake, err := exec.LookPath("cmake")
	if err != nil {
		t.Skip("cmake not found on PATH")
	}
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not found on PATH")
	}
	src := t.TempDir()
	if err := embedded.WriteFiles("tools", Component, src); err != nil {
		t.Fatal(err)
	}
	prefix := t.TempDir()
	b := t.TempDir()
	for _, args := range [][]string{
		{"-S", src, "-B", b, "-DNETBENCH_CUDA=OFF", "-DCMAKE_INSTALL_PREFIX=" + filepath.Join(prefix, Component)},
		{"--build", b},
		{"--install", b},
	} {
		if out, err := exec.Command(cmake, args...).CombinedOutput(); err != nil {
			t.Fatalf("cmake %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	bench, loopback, err := Locate(prefix)
	if err != nil {
		t.Fatal(err)
	}
	res, err := run(t, built{bench: bench, loopback: loopback}, Options{Size: "2M", Chunk: "64K", Iters: 1})
	if err != nil || res.Recv.MaxHeld != 16 || !res.Recv.Verified {
		t.Fatalf("%v %+v", err, res)
	}
	if _, err := os.Stat(filepath.Join(prefix, Component, "share", "netbench", "gpu-check.sh")); err != nil {
		t.Error(err)
	}

	if _, err := exec.LookPath("nvcc"); err == nil {
		return
	}
	out, err := exec.Command(cmake, "-S", src, "-B", t.TempDir(), "-DNETBENCH_CUDA=ON").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "NETBENCH_CUDA=ON but no CUDA compiler was found") {
		t.Errorf("NETBENCH_CUDA=ON without nvcc: %v\n%s", err, out)
	}
}
