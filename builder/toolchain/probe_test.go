package toolchain

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/recipes"
)

// A Python package the recipe asks for is found with its version and directory; the
// probe's report survives a package whose import prints to stdout.
func TestProbePythonPackage(t *testing.T) {
	site := t.TempDir()
	pkg := filepath.Join(site, "nvidia", "nvshmem")
	if err := os.MkdirAll(filepath.Join(pkg, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	dist := filepath.Join(site, "nvidia_nvshmem_cu13-3.4.5.dist-info")
	if err := os.MkdirAll(dist, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, "METADATA"), []byte("Metadata-Version: 2.1\nName: nvidia-nvshmem-cu13\nVersion: 3.4.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// a sitecustomize that prints JSON-looking noise, as some environments do
	if err := os.WriteFile(filepath.Join(site, "sitecustomize.py"), []byte("print('{\"noise\": {\"a\": 1}}')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PYTHONPATH": site, "PATH": os.Getenv("PATH"), "HOME": os.Getenv("HOME")}
	getenv := func(k string) string { return env[k] }
	t.Setenv("PYTHONPATH", site)
	tc := (&Prober{Getenv: getenv, Packages: []string{"nvidia-nvshmem-cu13", "not-installed-xyz"}}).Probe(context.Background())
	if tc.Python == "" {
		t.Skip("no python3 here")
	}
	if tc.PythonVersion == "" {
		t.Fatalf("python probe failed: %+v", tc)
	}
	got, ok := tc.PythonPackages["nvidia-nvshmem-cu13"]
	if !ok || got.Version != "3.4.5" || !strings.HasSuffix(got.Dir, filepath.Join("nvidia", "nvshmem")) {
		t.Fatalf("package not found right: %+v", tc.PythonPackages)
	}
	if _, ok := tc.PythonPackages["not-installed-xyz"]; ok {
		t.Errorf("an absent package was reported")
	}
}

// torch's version and CUDA come from its metadata when the version names the CUDA, so
// the probe need not import torch (seconds on a cold disk).
func TestProbeTorchFromMetadata(t *testing.T) {
	t.Setenv("PYTHONPATH", writeSite(t, map[string]string{
		"torch-2.11.0+cu130.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0+cu130\n",
		// an importable torch that fails: the probe must not import it
		"torch/__init__.py": "raise ImportError('imported')\n",
	}))
	tc := (&Prober{Getenv: os.Getenv, Torch: true}).Probe(context.Background())
	if tc.Python == "" {
		t.Skip("no python3 here")
	}
	if tc.Torch != "2.11.0+cu130" || tc.TorchCUDA != "13.0" {
		t.Fatalf("torch %q cuda %q, want 2.11.0+cu130 and 13.0", tc.Torch, tc.TorchCUDA)
	}
}

// A torch whose metadata does not name its CUDA (the GPU machine's says 2.11.0) is read
// from torch/version.py, as torch.__version__ and torch.version.cuda would say, without
// importing torch: importing it took 5 to 8 s there, before any build could start.
func TestProbeTorchFromVersionFile(t *testing.T) {
	files := map[string]string{
		"torch-2.11.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: torch\nVersion: 2.11.0\n",
		"torch/__init__.py":               "raise ImportError('imported')\n",
		// as torch's build writes it
		"torch/version.py": "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']\n" +
			"__version__ = '2.11.0+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\ngit_version = '70d99e998b2bd0a5b6f1ab2b1bd3b9f1e6e0a3f4'\nhip: Optional[str] = None\nxpu: Optional[str] = None\n",
	}
	t.Setenv("PYTHONPATH", writeSite(t, files))
	tc := (&Prober{Getenv: os.Getenv, Torch: true}).Probe(context.Background())
	if tc.Python == "" {
		t.Skip("no python3 here")
	}
	if tc.Torch != "2.11.0+cu130" || tc.TorchCUDA != "13.0" {
		t.Fatalf("torch %q cuda %q, want 2.11.0+cu130 and 13.0 from torch/version.py", tc.Torch, tc.TorchCUDA)
	}
}

// writeSite writes files (slash paths → content) into a new directory for PYTHONPATH.
func writeSite(t *testing.T, files map[string]string) string {
	t.Helper()
	site := t.TempDir()
	for name, body := range files {
		p := filepath.Join(site, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return site
}

// MPI comes from MPI_HOME when it holds an MPI (include/mpi.h), as NCCL EP's Makefile
// reads it, else from where mpicc finds mpi.h; an MPI_HOME without mpi.h is not an MPI,
// and neither is a wrapper without headers. The wrappers answer as the real ones do:
// Ubuntu 24.04's Open MPI (/usr/bin/mpicc, `--showme:incdirs` printing its two include
// directories under /usr/lib/x86_64-linux-gnu/openmpi, as on the GPU image), Fedora's
// (headers in /usr/include/openmpi-x86_64, mpicc in /usr/lib64/openmpi/bin), MPICH's
// `-show` (the compiler line, its -I); each fails on the other's flag, as the flag goes
// to the compiler. {{mpi.home}} and the manifest take what this finds.
func TestProbeMPIHome(t *testing.T) {
	dir := t.TempDir()
	write := func(path, body string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	// Debian's layout: the wrapper in /usr/bin, the headers in the multiarch lib dir
	deb := filepath.Join(dir, "deb", "usr")
	debHome := filepath.Join(deb, "lib", "x86_64-linux-gnu", "openmpi")
	write(filepath.Join(debHome, "include", "mpi.h"), "/* mpi */\n", 0o644)
	write(filepath.Join(deb, "bin", "mpicc"), "#!/bin/sh\n"+
		`[ "$1" = --showme:incdirs ] && { echo "`+debHome+`/include `+debHome+`/include/openmpi"; exit 0; }`+"\n"+
		"echo 'gcc: fatal error: no input files' >&2; exit 1\n", 0o755)
	// MPICH under its own prefix: bin/../include
	mpich := filepath.Join(dir, "mpich")
	write(filepath.Join(mpich, "include", "mpi.h"), "/* mpi */\n", 0o644)
	write(filepath.Join(mpich, "bin", "mpicc"), "#!/bin/sh\n"+
		`[ "$1" = -show ] && { echo "gcc -I`+mpich+`/include -L`+mpich+`/lib -Wl,-rpath -Wl,`+mpich+`/lib -lmpi"; exit 0; }`+"\n"+
		"echo 'gcc: error: unrecognized command-line option' >&2; exit 1\n", 0o755)
	// Fedora's: headers in a directory of their own, the installation in /usr/lib64/openmpi
	fed := filepath.Join(dir, "fedora", "usr")
	fedHome := filepath.Join(fed, "lib64", "openmpi")
	fedInc := filepath.Join(fed, "include", "openmpi-x86_64")
	write(filepath.Join(fedInc, "mpi.h"), "/* mpi */\n", 0o644)
	write(filepath.Join(fedHome, "bin", "mpicc"), "#!/bin/sh\n"+
		`[ "$1" = --showme:incdirs ] && { echo "`+fedInc+`"; exit 0; }`+"\n"+
		"echo 'gcc: fatal error: no input files' >&2; exit 1\n", 0o755)
	// a wrapper whose MPI has no headers (the runtime package alone)
	bare := filepath.Join(dir, "bare")
	write(filepath.Join(bare, "bin", "mpicc"), "#!/bin/sh\nexit 1\n", 0o755)
	named := filepath.Join(dir, "hpcx", "ompi")
	write(filepath.Join(named, "include", "mpi.h"), "/* mpi */\n", 0o644)
	for _, c := range []struct{ path, mpiHome, want string }{
		{deb, "", debHome},
		{mpich, "", mpich},
		{fedHome, "", fedHome},
		{bare, "", ""},
		{deb, named, named},
		{deb, filepath.Join(dir, "empty"), debHome},
		{bare, filepath.Join(dir, "empty"), ""},
	} {
		path := filepath.Join(c.path, "bin")
		t.Setenv("PATH", path) // the probe looks programs up on the process's PATH
		env := map[string]string{"PATH": path, "MPI_HOME": c.mpiHome}
		tc := (&Prober{Getenv: func(k string) string { return env[k] }}).Probe(context.Background())
		if tc.MPIHome != c.want {
			t.Errorf("mpicc in %s, MPI_HOME=%q: MPIHome %q, want %q", path, c.mpiHome, tc.MPIHome, c.want)
		}
	}
}

// A recipe that names its build host's machine (toolchain.host-arch) is refused, with
// where to build it, on a host of another machine, and only there: the GB200 variant of
// hybrid-ep on an x86_64 host says to build on a Grace node; the same toolchain on aarch64,
// and hybrid-ep itself on x86_64, pass.
func TestPreflightHostArch(t *testing.T) {
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	resolve := func(sets ...string) *plan.Plan {
		p, err := res.Resolve("hybrid-ep", sets)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	gb200 := resolve("toolchain.host-arch=aarch64", "runtime.gpus-per-node=4", "runtime.mnnvl=true")
	host := func(goarch string) *Toolchain {
		return &Toolchain{OS: "linux", Arch: goarch, CUDA: "13.0", Torch: "2.11.0+cu130", PythonVersion: "3.12.3", Setuptools: "68.1.2", GCC: "13.3.0",
			PythonPackages: map[string]PythonPackage{"nvidia-nvshmem-cu13": {Version: "3.4.5"}, "nvidia-nccl-cu13": {Version: "2.28.9"}}}
	}
	err = Preflight(gb200, host("amd64"))
	var pe *PreflightError
	if !errors.As(err, &pe) || pe.ExitCode() != 3 || len(pe.Missing) != 1 {
		t.Fatalf("the GB200 variant on x86_64: %v", err)
	}
	if m := pe.Missing[0]; m.What != "build host machine" || m.Need != "aarch64" || m.Found != "x86_64" ||
		!strings.Contains(m.Fix, "Grace node") || !strings.Contains(m.Fix, "aarch64 machine code") {
		t.Errorf("the GB200 variant on x86_64: %+v", m)
	}
	if err := Preflight(gb200, host("arm64")); err != nil {
		t.Errorf("the GB200 variant on aarch64: %v", err)
	}
	if err := Preflight(resolve(), host("amd64")); err != nil {
		t.Errorf("hybrid-ep, which names no build host machine, on x86_64: %v", err)
	}
	if m := Machine("riscv64"); m != "riscv64" {
		t.Errorf("a machine uname and Go name alike: %s", m)
	}
}

// The C++ compiler builds run is $CXX (its first word; the rest are its arguments), else
// g++ on PATH; one that finds only libstdc++.a is marked, and a recipe with a
// python-extension step is refused on it with the fix. The compiler standing in for one
// without libstdc++.so answers -print-file-name as GCC does for a file it cannot find,
// with the bare name (the GPU host's relocated GCC 13.3 printed "libstdc++.so").
func TestProbeCXXStaticRuntime(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++ here")
	}
	dir := t.TempDir()
	static := filepath.Join(dir, "g++-static")
	if err := os.WriteFile(static, []byte("#!/bin/sh\n# stands in for a GCC whose lib/gcc has libstdc++.a only\nfor a; do case \"$a\" in -print-file-name=*) echo \"${a#-print-file-name=}\"; exit 0;; esac; done\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	probe := func(cxx string) *Toolchain {
		env := map[string]string{"CXX": cxx}
		return (&Prober{Getenv: func(k string) string { return env[k] }}).Probe(context.Background())
	}
	if tc := probe(""); tc.CXX != gxx || tc.CXXStaticRuntime {
		t.Errorf("g++ on PATH: CXX %q static %v, want %s and false (it prints %s)", tc.CXX, tc.CXXStaticRuntime, gxx, mustOut(t, gxx, "-print-file-name=libstdc++.so"))
	}
	tc := probe(static + " -m64")
	if tc.CXX != static || !tc.CXXStaticRuntime {
		t.Fatalf("CXX with libstdc++.a only: CXX %q static %v", tc.CXX, tc.CXXStaticRuntime)
	}
	if tc.Fingerprint() == probe("").Fingerprint() {
		t.Errorf("a compiler that links libstdc++.a builds other bytes: the build keys must differ")
	}
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	host := &Toolchain{OS: "linux", Arch: "amd64", CUDA: "13.0", Torch: "2.11.0+cu130", PythonVersion: "3.12.3", Setuptools: "68.1.2", GCC: "13.3.0",
		PythonPackages: map[string]PythonPackage{"nvidia-nvshmem-cu13": {Version: "3.4.5"}, "nvidia-nccl-cu13": {Version: "2.30.7"}},
		CXX:            static, CXXStaticRuntime: true}
	v2, err := res.Resolve("deepep-v2", nil)
	if err != nil {
		t.Fatal(err)
	}
	var pe *PreflightError
	if err := Preflight(v2, host); !errors.As(err, &pe) || len(pe.Missing) != 1 ||
		pe.Missing[0].Need != "libstdc++.so" || !strings.Contains(pe.Missing[0].Found, static) || !strings.Contains(pe.Missing[0].Fix, "-print-file-name=libstdc++.so") {
		t.Fatalf("deepep-v2 with a compiler that links libstdc++.a: %v", err)
	}
	host.CXXStaticRuntime = false
	if err := Preflight(v2, host); err != nil {
		t.Errorf("deepep-v2 with libstdc++.so: %v", err)
	}
}

func mustOut(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).Output()
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return strings.TrimSpace(string(b))
}
