package pack

import (
	"archive/zip"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/builder/wheel"
	"github.com/epbuild/epbuild/recipes"
)

// ncclPrefix is a staged prefix as the recipes' NCCL steps install it: the library with
// its links, and headers.
func ncclPrefix(t *testing.T, lib []byte) string {
	t.Helper()
	prefix := t.TempDir()
	for name, data := range map[string][]byte{
		"lib/libnccl.so.2.30.7":           lib,
		"include/nccl.h":                  []byte("#define NCCL_MAJOR 2\n"),
		"include/nccl_device/core.h":      []byte("/* device */\n"),
		"lib/pkgconfig/nccl.pc.not-taken": []byte("x\n"),
	} {
		p := filepath.Join(prefix, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{"libnccl.so.2": "libnccl.so.2.30.7", "libnccl.so": "libnccl.so.2"} {
		if err := os.Symlink(to, filepath.Join(prefix, "lib", link)); err != nil {
			t.Fatal(err)
		}
	}
	return prefix
}

func ncclWheelPlan(w *recipes.PythonWheel) *plan.Plan {
	return &plan.Plan{Recipe: "t", Key: strings.Repeat("0123456789ab", 6)[:64], Components: []plan.PlanComponent{{Component: recipes.Component{
		Name: "nccl", Version: "2.30.7-1", PythonWheel: w,
		Source: recipes.Source{Git: &recipes.GitSource{URL: "https://example.invalid/nccl", Commit: strings.Repeat("a", 40)}},
		Build:  []recipes.Step{{Command: &recipes.CommandStep{Run: []string{"make"}}}}}}}}
}

// A NCCL built here with python-wheel is packed as the package it replaces: its name,
// <release>+epbuild.<plan key's first 12>, exactly the files of the replaced wheel's
// layout (the library under its SONAME, as a regular file, and the headers), RECORD with
// sha256s, the same bytes every time; the manifest records the replaced version and the
// command that puts it back. pip installs it where the replaced wheel's files lie.
func TestNCCLReplacementWheel(t *testing.T) {
	lib := []byte("\x7fELF not really, but the bytes torch will load\n")
	prefix := ncclPrefix(t, lib)
	p := ncclWheelPlan(&recipes.PythonWheel{Package: "nvidia-nccl-cu13", Dir: "nvidia/nccl", Files: []string{"lib/libnccl.so.2", "include"}})
	comps := []manifest.ComponentResult{{Name: "nccl", Prefix: prefix}}
	pkgs := map[string]toolchain.PythonPackage{"nvidia-nccl-cu13": {Version: "2.28.9"}}
	pack := func() manifest.WheelFile {
		t.Helper()
		dir := t.TempDir()
		ws, err := packWheels(p, comps, dir, 1700000000, pkgs)
		if err != nil {
			t.Fatal(err)
		}
		if len(ws) != 1 {
			t.Fatalf("wheels: %+v", ws)
		}
		ws[0].File = filepath.Join(dir, "wheels", ws[0].File)
		return ws[0]
	}
	w := pack()
	if got, want := filepath.Base(w.File), "nvidia_nccl_cu13-2.30.7+epbuild.0123456789ab-"+platformTag()+".whl"; got != want {
		t.Errorf("wheel %s, want %s", got, want)
	}
	if w.Version != "2.30.7+epbuild.0123456789ab" || w.Replaces == nil || *w.Replaces != (manifest.Replaced{Package: "nvidia-nccl-cu13", Version: "2.28.9"}) {
		t.Errorf("wheel %+v replaces %+v", w.Info, w.Replaces)
	}
	if got := w.Replaces.Undo(); got != "pip install --no-deps --force-reinstall 'nvidia-nccl-cu13==2.28.9'" {
		t.Errorf("undo: %s", got)
	}
	if err := wheel.Check(w.File); err != nil {
		t.Fatal(err)
	}
	zr, err := zip.OpenReader(w.File)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	zr.Close()
	di := "nvidia_nccl_cu13-2.30.7+epbuild.0123456789ab.dist-info/"
	if want := []string{"nvidia/nccl/include/nccl.h", "nvidia/nccl/include/nccl_device/core.h", "nvidia/nccl/lib/libnccl.so.2",
		di + "METADATA", di + "WHEEL", di + "RECORD"}; !slices.Equal(names, want) {
		t.Errorf("entries %q, want %q", names, want)
	}
	if again := pack(); again.SHA256 != w.SHA256 {
		t.Errorf("two packs differ: %s, %s", w.SHA256, again.SHA256)
	}

	// pip puts the library where torch's RPATH finds the replaced wheel's
	target := t.TempDir()
	cmd := exec.Command("python3", "-m", "pip", "install", "--no-deps", "--no-index", "--target", target, w.File)
	cmd.Env = append(os.Environ(), "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("pip cannot install here: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(target, "nvidia", "nccl", "lib", "libnccl.so.2"))
	if err != nil || !bytes.Equal(got, lib) {
		t.Errorf("pip installed nvidia/nccl/lib/libnccl.so.2: %v %q", err, got)
	}

	// a DeepEP wheel built against it requires that wheel
	reqs, err := wheelRequirements(p, &plan.PlanComponent{Component: recipes.Component{Name: "deepep", Depends: []string{"nccl"}}}, pkgs)
	if err != nil || len(reqs) != 1 || reqs[0] != (wheel.Requirement{Name: "nvidia-nccl-cu13", Version: "2.30.7+epbuild.0123456789ab"}) {
		t.Errorf("requirements of a wheel built against it: %v %+v", err, reqs)
	}
}

// A python-wheel file that is a link out of the prefix, or missing, fails the pack
// naming it; a component without python-wheel packs nothing.
func TestNCCLReplacementWheelRefuses(t *testing.T) {
	prefix := ncclPrefix(t, []byte("lib"))
	if err := os.Symlink("/etc/hostname", filepath.Join(prefix, "include", "leak.h")); err != nil {
		t.Fatal(err)
	}
	comps := []manifest.ComponentResult{{Name: "nccl", Prefix: prefix}}
	for files, want := range map[string]string{"include": "outside the component's prefix", "lib/libnccl.so.3": "lib/libnccl.so.3: the build installed no such file"} {
		p := ncclWheelPlan(&recipes.PythonWheel{Package: "nvidia-nccl-cu13", Dir: "nvidia/nccl", Files: []string{files}})
		if _, err := packWheels(p, comps, t.TempDir(), 0, nil); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", files, err, want)
		}
	}
	ws, err := packWheels(ncclWheelPlan(nil), comps, t.TempDir(), 0, nil)
	if err != nil || len(ws) != 0 {
		t.Errorf("no python-wheel: %v %+v", err, ws)
	}
}

// TestWheelPreflight: a recipe asking for a wheel needs setuptools, as any setup.py
// build does, and nothing more (the wheel and build modules are not used); without
// setuptools the preflight names it before any work (exit 3).
func TestWheelPreflight(t *testing.T) {
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve("demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	if pc, _ := p.Component("pydemo"); !wantsWheel(pc) {
		t.Fatal("the demo recipe asks for no wheel")
	}
	tc := &toolchain.Toolchain{Python: "/usr/bin/python3", PythonVersion: "3.11.2", Setuptools: "65.5.0", GCC: "12.2.0", CMake: "3.25.1"}
	if err := toolchain.Preflight(p, tc); err != nil {
		t.Errorf("setuptools without the wheel module: %v", err)
	}
	tc.Setuptools = ""
	var pe *toolchain.PreflightError
	if err := toolchain.Preflight(p, tc); !errors.As(err, &pe) || pe.ExitCode() != 3 || !strings.Contains(err.Error(), "python setuptools") {
		t.Errorf("no setuptools: %v", err)
	}
}
