package host

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"

	"github.com/klauspost/compress/zstd"
)

// listCapture returns name → header of every entry of a capture.
func listCapture(t *testing.T, b []byte) map[string]*tar.Header {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	out := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

func capture(t *testing.T, sys sysroot.Root, cfg Config) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Capture(context.Background(), sys, cfg, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCaptureRoundTripKeepsEveryResult(t *testing.T) {
	t.Parallel()
	root := hostfixture.GCPB200(t)
	cfg := gcpB200Config()
	cfg.Mapping = "0:mlx5_0:1,1:mlx5_0:1" // a failing pairing must fail the same way from the capture
	want := Run(context.Background(), sysroot.New(root), cfg)
	b := capture(t, sysroot.New(root), cfg)

	dir := t.TempDir()
	if err := sysroot.Extract(bytes.NewReader(b), dir); err != nil {
		t.Fatal(err)
	}
	if got := Run(context.Background(), sysroot.New(dir), cfg); !reflect.DeepEqual(got, want) {
		t.Errorf("from the capture:\n%+v\nfrom the fixture:\n%+v", got, want)
	}

	ents := listCapture(t, b)
	cls := ents["sys/class/infiniband/mlx5_0"]
	if cls == nil || cls.Typeflag != tar.TypeSymlink ||
		cls.Linkname != "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/infiniband/mlx5_0" {
		t.Errorf("class link not kept as a symlink: %+v", cls)
	}
	if h := ents["sys/bus/pci/devices/0000:03:00.0"]; h == nil || h.Typeflag != tar.TypeSymlink {
		t.Errorf("GPU's bus link not kept: %+v", h)
	}
	if h := ents["proc/self"]; h == nil || h.Linkname != "4242" {
		t.Errorf("proc/self: %+v", h)
	}
	for _, name := range []string{
		"proc/4242/limits", "proc/driver/nvidia/params",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/infiniband/mlx5_0/ports/1/gid_attrs/types/3",
		"sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0/infiniband/mlx5_0/ports/1/counters/port_xmit_data",
	} {
		if h := ents[name]; h == nil || h.Typeflag != tar.TypeReg {
			t.Errorf("%s missing: %+v", name, h)
		}
	}
	// Exactly what was read: files the checks never open stay out.
	for name := range ents {
		for _, unread := range []string{"node_type", "initstate", "NVreg_RegistryDwords", "gid_attrs/types/0", "gid_attrs/types/1"} {
			if strings.HasSuffix(name, unread) {
				t.Errorf("%s was never read but is in the capture", name)
			}
		}
	}
	if again := capture(t, sysroot.New(root), cfg); !bytes.Equal(again, b) {
		t.Error("two captures of the same state differ")
	}
}

// The capture format is plain tar.zst: GNU tar extracts it, symlinks included.
func TestCaptureExtractsWithGNUTar(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tar"); err != nil {
		t.Skip("no tar on PATH")
	}
	if _, err := exec.LookPath("zstd"); err != nil {
		t.Skip("no zstd on PATH for tar --zstd")
	}
	root := hostfixture.AWSP5(t)
	cfg := awsP5Config()
	want := Run(context.Background(), sysroot.New(root), cfg)
	b := capture(t, sysroot.New(root), cfg)
	dir := t.TempDir()
	cmd := exec.Command("tar", "--zstd", "-xf", "-", "-C", dir)
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	got := Run(context.Background(), sysroot.New(dir), cfg)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("from the capture:\n%+v\nfrom the fixture:\n%+v", got, want)
	}
	if len(got.Pairs) != 8 || len(got.Pairs[7].Nearest) != 4 {
		t.Errorf("pairing lost in the capture: %+v", got.Pairs)
	}
}

// A real capture of the machine the tests run on: whatever it has, the capture must
// reproduce the report.
func TestCaptureRealRoot(t *testing.T) {
	t.Parallel()
	cfg := gcpB200Config()
	want := Run(context.Background(), sysroot.New(""), cfg)
	b := capture(t, sysroot.New(""), cfg)
	dir := t.TempDir()
	if err := sysroot.Extract(bytes.NewReader(b), dir); err != nil {
		t.Fatal(err)
	}
	got := Run(context.Background(), sysroot.New(dir), cfg)
	assertStructure(t, got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("from the capture:\n%+v\nfrom the real root:\n%+v", got, want)
	}
}
