package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// gpuNode is a node with one GPU and nothing else, for the checks that ask nvidia-smi.
func gpuNode(t *testing.T) *hostfixture.Fixture {
	f := hostfixture.New(t)
	f.GPU(f.PCIeSwitch(0, 0).Endpoint(), 0)
	f.Limits("unlimited", "unlimited")
	return f
}

func freeMemory(t *testing.T, sys sysroot.Root, cfg Config) check.Result {
	t.Helper()
	return mustCheck(t, Run(context.Background(), sys, cfg), "host.gpu.free-memory")
}

// The free memory of each GPU (nvidia-smi's CSV query) against what a job takes at once:
// the recipe's buffer, or the whole heap NVSHMEM reserves with CUDA VMM off (R32).
func TestFreeGPUMemory(t *testing.T) {
	t.Parallel()
	f := gpuNode(t)
	f.FreeMemory("81004", "81004", "1500", "81004")
	cfg := Config{Transport: TransportNone, GIDIndex: -1, BufferBytes: 2146961792}
	c := freeMemory(t, sysroot.New(f.Root()), cfg)
	if c.Status != check.Fail || !strings.Contains(c.Read, "GPU 2 1572864000 (1.46 GiB)") || !strings.Contains(c.Read, "need 2146961792 (1.99 GiB) bytes on each GPU: runtime.buffer-bytes") ||
		!strings.Contains(c.Fix, "free memory on GPU 2 ") || strings.Contains(c.Fix, "GPU 0") {
		t.Errorf("one GPU short: %+v", c)
	}
	// the fixed heap is what a job takes once VMM is off and it is larger than the buffer
	f.FreeMemory("81004", "81004", "3000", "81004")
	if c := freeMemory(t, sysroot.New(f.Root()), cfg); c.Status != check.Pass {
		t.Errorf("3000 MiB for a 2 GiB buffer: %+v", c)
	}
	cfg.FixedHeapBytes = 4 << 30
	if c := freeMemory(t, sysroot.New(f.Root()), cfg); c.Status != check.Fail || !strings.Contains(c.Read, "the fixed symmetric heap") {
		t.Errorf("3000 MiB for a 4 GiB fixed heap: %+v", c)
	}
	// nothing declared and VMM on: nothing to compare
	if c := freeMemory(t, sysroot.New(f.Root()), Config{Transport: TransportNone, GIDIndex: -1}); c.Status != check.Skip {
		t.Errorf("no buffer: %+v", c)
	}
	// MIG: the driver cannot say
	f.FreeMemory("[N/A]", "81004", "81004", "81004")
	if c := freeMemory(t, sysroot.New(f.Root()), cfg); c.Status != check.Warn || !strings.Contains(c.Read, "GPU 0: [N/A]") {
		t.Errorf("N/A: %+v", c)
	}
	// a capture without the query: unknown, a warning
	if c := freeMemory(t, sysroot.New(gpuNode(t).Root()), cfg); c.Status != check.Warn {
		t.Errorf("nothing captured: %+v", c)
	}
}

// On the real root the runner runs nvidia-smi; what it printed goes into the capture,
// which then stands in for it. A missing nvidia-smi says how to get one.
func TestCommandRunnerAndItsCapture(t *testing.T) {
	t.Parallel()
	if got, want := sysroot.CommandPath(freeMemoryQuery...), hostfixture.CommandFile(freeMemoryQuery...); got != want {
		t.Fatalf("the fixture's command file %q is not the capture's %q", want, got)
	}
	var ran []string
	smi := func(_ context.Context, name string, args ...string) ([]byte, error) {
		ran = append(ran, strings.Join(append([]string{name}, args...), " "))
		if len(args) == 1 && args[0] == "-q" {
			return []byte("GPU 00000000:18:00.0\n    Fabric\n        State : N/A\n"), nil
		}
		return []byte("0, 50000\n1, 60000\n"), nil
	}
	cfg := Config{Transport: TransportNone, GIDIndex: -1, BufferBytes: 2146961792}
	live := sysroot.New("").WithRunner(smi)
	want := freeMemory(t, live, cfg)
	if want.Status != check.Pass || !strings.Contains(want.Read, "GPU 1 62914560000") {
		t.Fatalf("live: %+v", want)
	}
	var buf bytes.Buffer
	if err := Capture(context.Background(), sysroot.New("").WithRunner(smi), cfg, &buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(ran, ";"), "nvidia-smi --query-gpu=index,memory.free --format=csv,noheader,nounits") ||
		!strings.Contains(strings.Join(ran, ";"), "nvidia-smi -q") {
		t.Errorf("ran %q", ran)
	}
	dir := t.TempDir()
	if err := sysroot.Extract(bytes.NewReader(buf.Bytes()), dir); err != nil {
		t.Fatal(err)
	}
	replay := sysroot.New(dir).WithRunner(func(context.Context, string, ...string) ([]byte, error) {
		t.Error("a capture ran a program")
		return nil, errors.New("no")
	})
	if got := freeMemory(t, replay, cfg); got.Status != want.Status || got.Read != want.Read {
		t.Errorf("from the capture %+v, live %+v", got, want)
	}
	missing := sysroot.New("").WithRunner(func(_ context.Context, name string, _ ...string) ([]byte, error) {
		return nil, fmt.Errorf("exec: %q: %w", name, exec.ErrNotFound)
	})
	if c := freeMemory(t, missing, cfg); c.Status != check.Warn || !strings.Contains(c.Fix, "install the NVIDIA driver's utilities") {
		t.Errorf("no nvidia-smi: %+v", c)
	}
}
