package sysroot

import (
	"archive/tar"
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/epbuild/epbuild/builder/host/hostfixture"
)

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
		if err := Extract(bytes.NewReader(writeTarZst(t, h)), dir); err == nil {
			t.Errorf("%s → %q extracted", h.Name, h.Linkname)
		}
	}
	// A link that stays inside is fine.
	dir := t.TempDir()
	ok := &tar.Header{Name: "sys/class/infiniband/x", Typeflag: tar.TypeSymlink, Linkname: "../../devices/x"}
	if err := Extract(bytes.NewReader(writeTarZst(t, ok)), dir); err != nil {
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
	sys := New(f.Root())
	if v, err := sys.ReadString("/sys/class/demo/abs/value"); err != nil || v != "42" {
		t.Errorf("through an absolute link: %q %v", v, err)
	}
	if _, err := sys.ReadFile("/sys/class/demo/a/value"); err == nil || !strings.Contains(err.Error(), "too many levels of symbolic links") {
		t.Errorf("loop: %v", err)
	}
	if _, err := sys.ReadFile("/sys/nothing"); err == nil || strings.Contains(err.Error(), f.Root()) {
		t.Errorf("error must name the host path only: %v", err)
	}
	rec := sys.record()
	for _, want := range []string{"/sys/class/demo/abs", "/sys/devices/virtual/x/value"} {
		if _, ok := rec[want]; !ok {
			t.Errorf("record lacks %s: %v", want, rec)
		}
	}
}
