package builder

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/verify"

	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/wheel"
)

// TestWheelWithPip: pip (in a venv python3 -m venv made) sees the package an install
// carries, through the install's env, and cannot uninstall it; it installs the wheel
// beside the artifact with --no-index, and the installed copy runs with the install's
// library.
func TestWheelWithPip(t *testing.T) {
	arts := artifacts(t)
	whl := filepath.Join(filepath.Dir(arts.A), pack.WheelDir(arts.Plan), "pydemo-1.0.0-py3-none-any.whl")
	if err := wheel.Check(whl); err != nil {
		t.Fatal(err)
	}
	// the venv borrows the base interpreter's pip (system site packages) rather than
	// installing its own: pip installs into the venv all the same, in a second, not ten
	venv := filepath.Join(t.TempDir(), "venv")
	if b, err := exec.Command("python3", "-m", "venv", "--without-pip", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("python3 -m venv: %v\n%s", err, b)
	}
	py := filepath.Join(venv, "bin", "python")
	run := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(py, args...)
		cmd.Dir = t.TempDir()
		cmd.Env = append(env, "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PIP_NO_INDEX=1")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}

	// the install's environment: pip show and importlib.metadata find the package there
	prefix := freshInstall(t)
	env, err := envsh.InstallEnv(prefix, verify.CleanEnviron(os.Getenv))
	if err != nil {
		t.Fatal(err)
	}
	out, err := run(env, "-m", "pip", "show", "pydemo")
	loc := filepath.Join(prefix, "pydemo", "python")
	if err != nil || !strings.Contains(out, "Name: pydemo\n") || !strings.Contains(out, "Version: 1.0.0\n") || !strings.Contains(out, "Location: "+loc+"\n") {
		t.Fatalf("pip show in the install's env: %v\n%s", err, out)
	}
	out, err = run(env, "-c", "import importlib.metadata as m, pydemo; d = m.distribution('pydemo'); print(m.version('pydemo'), d.read_text('INSTALLER').strip(), pydemo.Channel(1).describe())")
	if err != nil || strings.TrimSpace(out) != "1.0.0 epbuild channel 1 of 4, 1 lanes" {
		t.Fatalf("importlib.metadata in the install's env: %v\n%s", err, out)
	}
	// epbuild's install is not pip's to remove: no RECORD, so pip refuses (in a venv it
	// leaves what is outside the venv alone anyway), and the install stays whole
	cmd := exec.Command("python3", "-m", "pip", "uninstall", "-y", "pydemo")
	cmd.Env = append(env, "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1")
	b, err := cmd.CombinedOutput()
	if refused := err != nil && strings.Contains(string(b), "RECORD"); !refused && !strings.Contains(string(b), "outside environment") {
		t.Errorf("pip uninstall of the install's package: %v\n%s", err, b)
	}
	wantStatus(t, mustVerify(t, prefix), map[string]string{"files": "pass"})

	// the wheel beside the artifact, as vLLM and SGLang users install DeepEP
	base := verify.CleanEnviron(os.Getenv)
	if out, err := run(base, "-m", "pip", "install", "--no-deps", whl); err != nil {
		t.Fatalf("pip install %s: %v\n%s", filepath.Base(whl), err, out)
	}
	out, err = run(base, "-m", "pip", "show", "-f", "pydemo")
	if err != nil || !strings.Contains(out, "Version: 1.0.0\n") || !strings.Contains(out, "pydemo/channel.py") || strings.Contains(out, loc) {
		t.Fatalf("pip show after pip install: %v\n%s", err, out)
	}
	lib := filepath.Join(prefix, "libdemo", "lib", "libdemo.so.1")
	out, err = run(append(base, "DEMO_LIB="+lib, "DEMO_LANE_MAPPING=0:2,1:1"), "-c", fmt.Sprintf("import pydemo; print(pydemo.__file__.startswith(%q), pydemo.Channel(1).describe())", venv))
	if err != nil || strings.TrimSpace(out) != "True channel 1 of 4, 1 lanes" {
		t.Fatalf("the pip-installed package: %v\n%s", err, out)
	}
}
