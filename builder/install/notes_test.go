package install

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/verify"
	"github.com/epbuild/epbuild/builder/wheel"
)

// An artifact whose NCCL is built as torch's own nvidia-nccl-cu13 wheel: install refuses
// while the Python environment has another version (exit 3, the pip command with the
// wheel's quoted path and the undo to the version found), refuses a wheel whose bytes are
// not the manifest's, and with PythonWheels installs it with a real pip (offline) and
// says how to put back what was there; a second install finds it in place.
func TestPythonWheels(t *testing.T) {
	fixture.NeedTools(t, "python3")
	ctx := context.Background()
	dir := t.TempDir()
	venv := filepath.Join(dir, "venv")
	// pip from the interpreter's own site-packages installs into the venv (sys.prefix)
	if out, err := exec.Command("python3", "-m", "venv", "--without-pip", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("venv: %v: %s", err, out)
	}
	py := filepath.Join(venv, "bin", "python")
	if out, err := exec.Command(py, "-m", "pip", "--version").CombinedOutput(); err != nil {
		t.Skipf("no pip for python3: %v: %s", err, out)
	}
	env := verify.CleanEnviron(os.Getenv)
	pack := func(version, body, into string) wheel.Info {
		lib := filepath.Join(dir, "lib-"+version)
		fixture.WriteFile(t, lib, body)
		if err := os.MkdirAll(into, 0o755); err != nil {
			t.Fatal(err)
		}
		info, err := wheel.PackLayout(wheel.Layout{Name: "nvidia-nccl-cu13", Version: version, Tag: "py3-none-linux_x86_64",
			Files: map[string]string{"nvidia/nccl/lib/libnccl.so.2": lib}}, into, time.Unix(0, 0))
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	// the environment's own NCCL wheel, as torch's
	old := pack("2.28.9", "torch's nccl\n", dir)
	if out, err := exec.Command(py, "-m", "pip", "install", "--no-index", "--no-deps", filepath.Join(dir, old.File)).CombinedOutput(); err != nil {
		t.Fatalf("pip install %s: %v: %s", old.File, err, out)
	}
	art := filepath.Join(dir, "out dir", "deepep-v2-0123456789ab.tar.zst")
	built := pack("2.30.7+epbuild.0123456789ab", "nccl built here\n", manifest.WheelDir(art))
	m := &manifest.Manifest{Wheels: []manifest.WheelFile{
		{Component: "deepep", Info: wheel.Info{File: "deep_ep-2.1.0-cp312-cp312-linux_x86_64.whl"}},
		{Component: "nccl", Info: built, Replaces: &manifest.Replaced{Package: "nvidia-nccl-cu13", Version: "2.28.9"}},
	}}

	_, err := pythonWheels(ctx, py, env, m, art, false)
	var me *WheelMissingError
	if !errors.As(err, &me) || me.ExitCode() != 3 {
		t.Fatalf("environment with 2.28.9: %v, want a WheelMissingError", err)
	}
	for _, want := range []string{"has 2.28.9", "--python-wheels",
		"-m pip install --no-deps --force-reinstall --no-index '" + filepath.Join(manifest.WheelDir(art), built.File) + "'",
		"undo: " + py + " -m pip install --no-deps --force-reinstall 'nvidia-nccl-cu13==2.28.9'"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}

	bad := *m
	bad.Wheels = append([]manifest.WheelFile(nil), m.Wheels...)
	bad.Wheels[1].SHA256 = strings.Repeat("0", 64)
	if _, err := pythonWheels(ctx, py, env, &bad, art, true); !errors.As(err, &me) || !strings.Contains(err.Error(), "not the "+strings.Repeat("0", 64)) {
		t.Errorf("wheel of other bytes: %v", err)
	}
	if v, _ := distVersion(ctx, py, env, "nvidia-nccl-cu13"); v != "2.28.9" {
		t.Fatalf("a refused wheel changed the environment: %q", v)
	}

	notes, err := pythonWheels(ctx, py, env, m, art, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "in place of nvidia-nccl-cu13 2.28.9 (undo: "+py+" -m pip install --no-deps --force-reinstall 'nvidia-nccl-cu13==2.28.9')") {
		t.Errorf("notes: %q", notes)
	}
	if v, _ := distVersion(ctx, py, env, "nvidia-nccl-cu13"); v != built.Version {
		t.Errorf("after install the environment has %q", v)
	}
	site, err := exec.Command(py, "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])").Output()
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(site)), "nvidia/nccl/lib/libnccl.so.2")); err != nil || string(b) != "nccl built here\n" {
		t.Errorf("libnccl.so.2 in the environment: %q, %v", b, err)
	}

	notes, err = pythonWheels(ctx, py, env, m, art, false)
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], "already") {
		t.Errorf("second install: %q, %v", notes, err)
	}
}
