package host

import (
	"archive/tar"
	"bytes"
	"context"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"io"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

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

func capture(t *testing.T, sys Sysroot, cfg Config) []byte {
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
	want := Run(context.Background(), NewSysroot(root), cfg)
	b := capture(t, NewSysroot(root), cfg)

	dir := t.TempDir()
	if err := ExtractCapture(bytes.NewReader(b), dir); err != nil {
		t.Fatal(err)
	}
	if got := Run(context.Background(), NewSysroot(dir), cfg); !reflect.DeepEqual(got, want) {
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
	if again := capture(t, NewSysroot(root), cfg); !bytes.Equal(again, b) {
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
	want := Run(context.Background(), NewSysroot(root), cfg)
	b := capture(t, NewSysroot(root), cfg)
	dir := t.TempDir()
	cmd := exec.Command("tar", "--zstd", "-xf", "-", "-C", dir)
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	got := Run(context.Background(), NewSysroot(dir), cfg)
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
	want := Run(context.Background(), NewSysroot(""), cfg)
	b := capture(t, NewSysroot(""), cfg)
	dir := t.TempDir()
	if err := ExtractCapture(bytes.NewReader(b), dir); err != nil {
		t.Fatal(err)
	}
	got := Run(context.Background(), NewSysroot(dir), cfg)
	assertStructure(t, got)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("from the capture:\n%+v\nfrom the real root:\n%+v", got, want)
	}
}

func writeTarZst(t *testing.T, hdrs ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
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

func TestExtractRefusesToLeaveTheDirectory(t *testing.T) {
	t.Parallel()
	for _, h := range []*tar.Header{
		{Name: "sys/class/infiniband/x", Typeflag: tar.TypeSymlink, Linkname: "../../../../etc"},
		{Name: "sys/x", Typeflag: tar.TypeSymlink, Linkname: "/etc"},
		{Name: "../x", Typeflag: tar.TypeReg},
		{Name: "dev/gdrdrv", Typeflag: tar.TypeChar},
	} {
		dir := t.TempDir()
		if err := ExtractCapture(bytes.NewReader(writeTarZst(t, h)), dir); err == nil {
			t.Errorf("%s → %q extracted", h.Name, h.Linkname)
		}
	}
	// A link that stays inside is fine.
	dir := t.TempDir()
	ok := &tar.Header{Name: "sys/class/infiniband/x", Typeflag: tar.TypeSymlink, Linkname: "../../devices/x"}
	if err := ExtractCapture(bytes.NewReader(writeTarZst(t, ok)), dir); err != nil {
		t.Error(err)
	}
}

func TestSysrootKeepsLinksInsideAndRecordsThem(t *testing.T) {
	t.Parallel()
	f := hostfixture.New(t)
	f.Write("/sys/devices/virtual/x/value", "42\n")
	// An absolute link must resolve inside the sysroot, not on this machine.
	if err := os.MkdirAll(f.Disk("/sys/class/demo"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/sys/devices/virtual/x", f.Disk("/sys/class/demo/abs")); err != nil {
		t.Fatal(err)
	}
	f.Link("/sys/class/demo/a", "/sys/class/demo/b")
	f.Link("/sys/class/demo/b", "/sys/class/demo/a")
	sys := NewSysroot(f.Root())
	if v, err := sys.ReadString("/sys/class/demo/abs/value"); err != nil || v != "42" {
		t.Errorf("through an absolute link: %q %v", v, err)
	}
	if _, err := sys.ReadFile("/sys/class/demo/a/value"); err == nil || !strings.Contains(err.Error(), "too many levels of symbolic links") {
		t.Errorf("loop: %v", err)
	}
	if _, err := sys.ReadFile("/sys/nothing"); err == nil || strings.Contains(err.Error(), f.Root()) {
		t.Errorf("error must name the host path only: %v", err)
	}
	paths := strings.Join(sys.Paths(), " ")
	for _, want := range []string{"/sys/class/demo/abs", "/sys/devices/virtual/x/value"} {
		if !strings.Contains(paths, want) {
			t.Errorf("record lacks %s: %s", want, paths)
		}
	}
}
