package pack

import (
	"archive/zip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/builder/wheel"
	"github.com/epbuild/epbuild/recipes"
	"github.com/epbuild/epbuild/recipes/lock"
)

// installedTree writes the installed form of a pure Python package NAME VERSION (what
// the build stage leaves under PREFIX/python) and returns PREFIX.
func installedTree(t *testing.T, name, version, metadata string) string {
	t.Helper()
	prefix := t.TempDir()
	py := filepath.Join(prefix, "python")
	di := filepath.Join(py, wheel.DistInfoName(name, version))
	for p, body := range map[string]string{
		filepath.Join(py, strings.ReplaceAll(name, "-", "_"), "__init__.py"): "",
		filepath.Join(di, "METADATA"):                                        "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n" + metadata,
		filepath.Join(di, "WHEEL"):                                           "Wheel-Version: 1.0\nGenerator: epbuild\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		filepath.Join(di, "INSTALLER"):                                       "epbuild\n",
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return prefix
}

// wheelMetadata reads the METADATA inside a wheel.
func wheelMetadata(t *testing.T, whl string) string {
	t.Helper()
	zr, err := zip.OpenReader(whl)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, ".dist-info/METADATA") {
			r, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r)
			r.Close()
			return string(b)
		}
	}
	t.Fatalf("%s has no METADATA", whl)
	return ""
}

// TestWheelRequiresWhatItWasBuiltAgainst: a wheel of a component built against packages
// of the Python environment (NVSHMEM's and NCCL's wheels, directly or through another
// component) requires each at the version the build recorded, so that pip refuses to
// install it without them; the installed form is left as the build wrote it.
func TestWheelRequiresWhatItWasBuiltAgainst(t *testing.T) {
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve("demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	// the demo, its pydemo built against NVSHMEM's wheel (directly) and NCCL's (through libdemo)
	py := func(name, pkg string, deps ...string) lock.Component {
		var c lock.Component
		c.Name, c.Source.Python, c.Depends = name, &recipes.PythonSource{Package: pkg}, deps
		return c
	}
	p.Components = append(p.Components, py("nvshmem", "nvidia-nvshmem-cu13"), py("nccl", "nvidia-nccl-cu13"))
	for i := range p.Components {
		switch p.Components[i].Name {
		case "pydemo":
			p.Components[i].Depends = append(p.Components[i].Depends, "nvshmem")
		case "libdemo":
			p.Components[i].Depends = append(p.Components[i].Depends, "nccl")
		}
	}
	prefix := installedTree(t, "pydemo", "1.0.0", "Requires-Dist: nvidia-nvshmem-cu13>=3.3\nRequires-Dist: futures; python_version < \"3\"\n\nthe description\n")
	installed := filepath.Join(prefix, "python", "pydemo-1.0.0.dist-info", "METADATA")
	before, _ := os.ReadFile(installed)
	out := t.TempDir()
	pkgs := map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu13": {Version: "3.4.5"}, "nvidia-nccl-cu13": {Version: "2.28.9"}, "torch": {Version: "2.10.0"}}
	wheels, err := packWheels(p, []manifest.ComponentResult{{Name: "pydemo", Prefix: prefix}}, out, 1700000000, pkgs)
	if err != nil || len(wheels) != 1 {
		t.Fatalf("packWheels: %v %v", wheels, err)
	}
	whl := filepath.Join(out, "wheels", wheels[0].File)
	if err := wheel.Check(whl); err != nil {
		t.Fatal(err) // RECORD holds the METADATA the wheel has
	}
	want := "Metadata-Version: 2.1\nName: pydemo\nVersion: 1.0.0\nRequires-Dist: futures; python_version < \"3\"\n" +
		"Requires-Dist: nvidia-nccl-cu13==2.28.9\nRequires-Dist: nvidia-nvshmem-cu13==3.4.5\n\nthe description\n"
	if got := wheelMetadata(t, whl); got != want {
		t.Errorf("the wheel's METADATA:\n%s\nwant:\n%s", got, want)
	}
	if after, _ := os.ReadFile(installed); string(after) != string(before) {
		t.Errorf("the installed METADATA changed:\n%s", after)
	}

	// pip: without NVSHMEM's wheel at hand it refuses; with it, it would install both
	pip := func(links ...string) (string, error) {
		args := []string{"-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index", "pydemo==1.0.0"}
		for _, l := range links {
			args = append(args, "--find-links", l)
		}
		cmd := exec.Command("python3", args...)
		// pip's own configuration (a site's find-links) stays out: only these directories
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INPUT=1", "PIP_CONFIG_FILE=/dev/null"}
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not found on PATH: pip is not asked")
	}
	got, err := pip(filepath.Dir(whl))
	if strings.Contains(got, "No module named pip") {
		t.Skipf("python3 has no pip: %s", got)
	}
	if err == nil || !strings.Contains(got, "nvidia-nvshmem-cu13==3.4.5") && !strings.Contains(got, "nvidia-nccl-cu13==2.28.9") {
		t.Errorf("pip installs the wheel without what it was built against: %v\n%s", err, got)
	}
	deps := t.TempDir()
	for _, d := range [][3]string{{"nvidia-nvshmem-cu13", "3.4.5"}, {"nvidia-nccl-cu13", "2.28.9"}} {
		if _, err := wheel.Pack(filepath.Join(installedTree(t, d[0], d[1], ""), "python"), deps, time.Unix(1700000000, 0)); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := pip(filepath.Dir(whl), deps); err != nil || !strings.Contains(got, "Would install") || !strings.Contains(got, "nvidia-nvshmem-cu13-3.4.5") {
		t.Errorf("pip with the dependencies at hand: %v\n%s", err, got)
	}

	// a Python package whose version the build did not record is an error, not an
	// unpinned requirement
	delete(pkgs, "nvidia-nccl-cu13")
	if _, err := packWheels(p, []manifest.ComponentResult{{Name: "pydemo", Prefix: prefix}}, t.TempDir(), 1700000000, pkgs); err == nil ||
		!strings.Contains(err.Error(), "nvidia-nccl-cu13") {
		t.Errorf("an unrecorded version: %v", err)
	}
}
