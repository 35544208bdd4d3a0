package toolchain

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/compat"
)

// Toolchain is what the build host offers, as probed. It goes into the manifest (as
// Record gives it) and, through Fingerprint, into every build key.
type Toolchain struct {
	OS   string `json:"os"`
	Arch string `json:"arch"`
	// Jobs is the core count: the machine's, not the toolchain's (Record leaves it out).
	Jobs int `json:"jobs,omitempty"`

	CUDAHome string `json:"cuda_home,omitempty"`
	NVCC     string `json:"nvcc,omitempty"`
	CUDA     string `json:"cuda,omitempty"`
	// CCCL is $CUDA_HOME/include/cccl when it exists: CUDA 13 moved cuda/std there (R12).
	CCCL string `json:"cccl,omitempty"`
	// NVCCRandomSeed and NVCCObjTemp: this nvcc takes --frandom-seed (CUDA 12.9 and
	// later) and --objdir-as-tempdir, which make its output reproducible (see
	// builder/stage/repro.go).
	NVCCRandomSeed bool `json:"nvcc_random_seed,omitempty"`
	NVCCObjTemp    bool `json:"nvcc_objtemp,omitempty"`

	// Python is the interpreter found on PATH: the machine's (Record leaves it out).
	Python        string `json:"python,omitempty"`
	PythonVersion string `json:"python_version,omitempty"`
	Setuptools    string `json:"setuptools,omitempty"`
	Wheel         string `json:"wheel,omitempty"`
	Torch         string `json:"torch,omitempty"`
	TorchCUDA     string `json:"torch_cuda,omitempty"`
	// Python packages asked for by the recipe (the NVSHMEM wheel): name → version, dir.
	PythonPackages map[string]PythonPackage `json:"python_packages,omitempty"`
	// NCCL is the NCCL torch's communicator calls (ProbeNCCL: the library libtorch_cuda's
	// ncclCommInitRank* binds to, its ncclGetVersion and path, beside torch's compile-time
	// header version), probed for plans that take NCCL from the Python environment: the
	// manifest records which NCCL such an install runs.
	NCCL *NCCLRuntime `json:"nccl,omitempty"`
	// sitePackages are where Python looks for packages: a change there (pip install)
	// invalidates a cached probe.
	sitePackages []string

	GCC   string `json:"gcc,omitempty"`
	GXX   string `json:"gxx,omitempty"`
	CMake string `json:"cmake,omitempty"`
	Ninja string `json:"ninja,omitempty"`
	Git   string `json:"git,omitempty"`

	// CXX is the C++ compiler the builds run: $CXX (setuptools, torch's cpp_extension and
	// CMake take it), else g++ on PATH. CXXStaticRuntime: it finds no libstdc++.so, only
	// libstdc++.a (`$CXX -print-file-name=libstdc++.so` prints the bare name), so every
	// shared object it links carries a libstdc++ of its own.
	CXX              string `json:"cxx,omitempty"`
	CXXStaticRuntime bool   `json:"cxx_static_runtime,omitempty"`

	// RDMACore is the mlx5dv.h found; RDMADataDirect whether it defines
	// MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT (a fact only: NVSHMEM defines it itself, R22).
	RDMACore       string `json:"rdma_core,omitempty"`
	RDMADataDirect bool   `json:"rdma_data_direct,omitempty"`
	LibfabricHome  string `json:"libfabric_home,omitempty"`
	GDRCopyHome    string `json:"gdrcopy_home,omitempty"`
	MPIHome        string `json:"mpi_home,omitempty"`

	// Protobuf is the protobuf release found (36.2; 21.12 for C++ 3.21.12) and the header
	// it came from; Abseil and GTest are the CMake package files found (see
	// toolchain_cmake.go). Probed only for plans that need them.
	Protobuf       string `json:"protobuf,omitempty"`
	ProtobufCpp    string `json:"protobuf_cpp,omitempty"`
	ProtobufHeader string `json:"protobuf_header,omitempty"`
	Abseil         string `json:"abseil,omitempty"`
	GTest          string `json:"gtest,omitempty"`
}

// PythonPackage is an installed distribution and the directory of its import package.
type PythonPackage struct {
	Version string `json:"version"`
	Dir     string `json:"dir,omitempty"`
}

// Fingerprint hashes what changes a build's output: compilers and their versions, and
// where the tools live. Not the interpreter's path on PATH (a wrapper, a shim) nor the
// core count: they change no byte, and the build key goes into the artifact. The Python
// packages a plan takes from the environment are not in it either: a component built
// against one depends on its component, whose build key names the package's version and
// directory; so a matrix cell that builds NCCL instead of taking torch's rebuilds NCCL,
// not the DeepEP that does not link it.
func (t *Toolchain) Fingerprint() string {
	b, _ := json.Marshal(struct {
		OS, Arch, CUDA, CUDAHome, PythonVersion, Torch, GCC, GXX, CMake string
		NVCCRandomSeed, NVCCObjTemp                                     bool
		// a compiler that links libstdc++.a builds other bytes (omitted when false: the
		// keys of every other toolchain stay as they were)
		CXXStaticRuntime bool `json:",omitempty"`
		// empty for plans that need no CMake packages: their keys stay as they were
		Protobuf       string `json:",omitempty"`
		ProtobufHeader string `json:",omitempty"`
		Abseil         string `json:",omitempty"`
		GTest          string `json:",omitempty"`
	}{t.OS, t.Arch, t.CUDA, t.CUDAHome, t.PythonVersion, t.Torch, t.GCC, t.GXX, t.CMake,
		t.NVCCRandomSeed, t.NVCCObjTemp, t.CXXStaticRuntime, t.Protobuf, t.ProtobufHeader, t.Abseil, t.GTest})
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Record is the toolchain as the manifest keeps it: what identifies the tools (versions,
// where they live), without what identifies the machine that ran them (the core count,
// the interpreter found on PATH), which the build log keeps (BuildHost).
func (t *Toolchain) Record() *Toolchain {
	c := *t
	c.Jobs, c.Python = 0, ""
	return &c
}

// Prober finds the toolchain. Env is the environment it reads (CUDA_HOME, PATH, ...).
type Prober struct {
	Getenv func(string) string
	// Packages are Python distributions to look up (e.g. nvidia-nvshmem-cu12).
	Packages []string
	// Torch: probe torch (slow to import; only when the recipe builds against it).
	Torch bool
	// CMakePackages: look for protobuf, Abseil and GTest, in Prefixes (the plan's
	// CMAKE_PREFIX_PATH) and then the system prefixes.
	CMakePackages bool
	Prefixes      []string
	// NCCL: ask which NCCL torch's communicator calls (the plan takes NCCL from the Python
	// environment).
	NCCL bool
}

var verRe = regexp.MustCompile(`(\d+\.\d+(?:\.\d+)?)`)

// Probe runs the probes. Each is short and bounded; a missing tool leaves its field
// empty, and Preflight says what that means for the recipe.
func (p *Prober) Probe(ctx context.Context) *Toolchain {
	t := &Toolchain{OS: runtime.GOOS, Arch: runtime.GOARCH, Jobs: runtime.NumCPU()}
	look := func(name string) string {
		path, err := exec.LookPath(name)
		if err != nil {
			return ""
		}
		return path
	}
	out := func(name string, args ...string) string {
		// importing torch from a cold disk can take a minute
		c, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		b, err := exec.CommandContext(c, name, args...).CombinedOutput()
		if err != nil {
			return ""
		}
		return string(b)
	}
	firstVer := func(s string) string { return verRe.FindString(s) }

	// The tools are asked at the same time: each question is a process of its own, and
	// the slowest (torch's NCCL: importing torch) takes as long as the rest together. Each
	// goroutine fills fields of its own.
	var wg sync.WaitGroup
	// CUDA: $CUDA_HOME, $CUDA_PATH, nvcc on PATH, /usr/local/cuda.
	for _, h := range []string{p.Getenv("CUDA_HOME"), p.Getenv("CUDA_PATH")} {
		if h != "" && disk.FileExists(filepath.Join(h, "bin", "nvcc")) {
			t.CUDAHome = h
			break
		}
	}
	if t.CUDAHome == "" {
		if n := look("nvcc"); n != "" {
			t.CUDAHome = filepath.Dir(filepath.Dir(n))
		} else if disk.FileExists("/usr/local/cuda/bin/nvcc") {
			t.CUDAHome = "/usr/local/cuda"
		}
	}
	if t.CUDAHome != "" {
		t.NVCC = filepath.Join(t.CUDAHome, "bin", "nvcc")
		wg.Go(func() {
			if m := regexp.MustCompile(`release (\d+\.\d+)`).FindStringSubmatch(out(t.NVCC, "--version")); m != nil {
				t.CUDA = m[1]
			}
		})
		wg.Go(func() {
			help := out(t.NVCC, "--help")
			t.NVCCRandomSeed = strings.Contains(help, "--frandom-seed")
			t.NVCCObjTemp = strings.Contains(help, "--objdir-as-tempdir")
		})
		if disk.DirExists(filepath.Join(t.CUDAHome, "include", "cccl")) {
			t.CCCL = filepath.Join(t.CUDAHome, "include", "cccl")
		}
	}
	if t.Python = look("python3"); t.Python != "" {
		wg.Go(func() { t.probePython(out, p.Packages, p.Torch) })
		if p.NCCL {
			wg.Go(func() {
				if n := ProbeNCCL(ctx, t.Python, p.pythonEnv(), nil); n.Version != "" {
					t.NCCL = &n
				}
			})
		}
	}
	cxx := strings.Fields(p.Getenv("CXX"))
	if len(cxx) == 0 {
		cxx = []string{"g++"}
	}
	for _, v := range []struct {
		tool  string
		field *string
		first bool // the version is on the first line (gcc's has others further down)
	}{{"gcc", &t.GCC, true}, {"cmake", &t.CMake, true}, {"ninja", &t.Ninja, false}, {"git", &t.Git, false}} {
		if path := look(v.tool); path != "" {
			wg.Go(func() {
				s := out(path, "--version")
				if v.first {
					s = firstLine(s)
				}
				*v.field = firstVer(s)
			})
		}
	}
	if path := look(cxx[0]); path != "" {
		t.CXX = path
		// g++'s version is the one of the C++ compiler the builds run (with its arguments)
		wg.Go(func() { t.GXX = firstVer(firstLine(out(path, slices.Concat(cxx[1:], []string{"--version"})...))) })
		wg.Go(func() {
			s := strings.TrimSpace(out(path, slices.Concat(cxx[1:], []string{"-print-file-name=libstdc++.so"})...))
			t.CXXStaticRuntime = s != "" && !filepath.IsAbs(s)
		})
	}
	for _, h := range []string{"/usr/include", "/usr/local/include", "/opt/rdma-core/include"} {
		hdr := filepath.Join(h, "infiniband", "mlx5dv.h")
		if b, err := os.ReadFile(hdr); err == nil {
			t.RDMACore = hdr
			t.RDMADataDirect = strings.Contains(string(b), "MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT")
			break
		}
	}
	for _, h := range []string{p.Getenv("LIBFABRIC_HOME"), "/opt/amazon/efa", "/usr/local/libfabric", "/usr"} {
		if h != "" && disk.FileExists(filepath.Join(h, "include", "rdma", "fabric.h")) {
			t.LibfabricHome = h
			break
		}
	}
	for _, h := range []string{p.Getenv("GDRCOPY_HOME"), "/usr/local/gdrdrv", "/usr/local", "/usr", "/opt/gdrcopy"} {
		if h != "" && disk.FileExists(filepath.Join(h, "include", "gdrapi.h")) {
			t.GDRCopyHome = h
			break
		}
	}
	// MPI_HOME first, as MPI builds (NCCL EP's Makefile) read it, else where mpicc finds
	// mpi.h: the MPI {{mpi.home}} gives a build is the one the manifest records
	if h := p.Getenv("MPI_HOME"); h != "" && disk.FileExists(filepath.Join(h, "include", "mpi.h")) {
		t.MPIHome = h
	} else if m := look("mpicc"); m != "" {
		t.MPIHome = mpiHome(m, out)
	}
	if p.CMakePackages {
		// the system prefixes come after CMAKE_PREFIX_PATH, as CMake searches
		t.probeCMakePackages(append(slices.Clone(p.Prefixes), "/usr/local", "/usr"))
	}
	wg.Wait()
	return t
}

// mpiHome is the MPI installation mpicc compiles against: the directory whose include/
// holds mpi.h, which builds read as $(MPI_HOME)/include and lib. The directory above
// mpicc's bin/ is not always it: Debian's and Ubuntu's Open MPI has /usr/bin/mpicc and
// its headers in /usr/lib/x86_64-linux-gnu/openmpi/include. So the wrapper is asked,
// Open MPI's way (--showme:incdirs) and MPICH's (-show, its -I flags); "" when no
// directory it names, nor bin/../include, holds mpi.h (a wrapper without its headers).
func mpiHome(mpicc string, out func(string, ...string) string) string {
	// each wrapper fails on the other's flag (it hands it to the compiler), giving "";
	// MPICH's is asked only when Open MPI's gave nothing: one process where one answers
	dirs := strings.Fields(out(mpicc, "--showme:incdirs"))
	if len(dirs) == 0 {
		for _, f := range strings.Fields(out(mpicc, "-show")) {
			if d, ok := strings.CutPrefix(f, "-I"); ok {
				dirs = append(dirs, strings.Trim(d, `"'`)) // Intel MPI quotes its -I
			}
		}
	}
	dirs = append(dirs, filepath.Join(filepath.Dir(filepath.Dir(mpicc)), "include"))
	headers := false
	for _, d := range dirs {
		if !filepath.IsAbs(d) || !disk.FileExists(filepath.Join(d, "mpi.h")) {
			continue
		}
		if filepath.Base(d) == "include" {
			return filepath.Dir(d)
		}
		headers = true
	}
	if headers {
		// headers in a directory of their own (Fedora's /usr/include/openmpi-x86_64):
		// the installation is the one above mpicc's bin/ (/usr/lib64/openmpi)
		return filepath.Dir(filepath.Dir(mpicc))
	}
	return ""
}

const probeMarker = "EPBUILD-PROBE "

// probePython asks python3 once for everything: version, setuptools, wheel, torch,
// and the distributions asked for.
func (t *Toolchain) probePython(out func(string, ...string) string, pkgs []string, torch bool) {
	script := `
import json, sys, importlib.util, importlib.metadata as md
import site, sysconfig
r = {"python": "%d.%d.%d" % sys.version_info[:3], "pkgs": {}}
r["site"] = sorted(set([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]] + (site.getsitepackages() if hasattr(site, "getsitepackages") else [])))
for name in ("setuptools", "wheel"):
    try: r[name] = md.version(name)
    except Exception: pass
if WANT_TORCH:
    # the wheel's version names its CUDA (2.11.0+cu130): importing torch takes seconds
    try:
        v = md.version("torch")
        local = v.partition("+")[2]
        if local.startswith("cu") and local[2:].isdigit() and len(local) >= 5:
            r["torch"] = v; r["torch_cuda"] = local[2:-1] + "." + local[-1]
        else:
            # torch/version.py alone (it imports typing): a wheel whose version does not
            # name its CUDA (2.11.0) would otherwise import torch, seconds on the critical path
            tv = None
            try:
                spec = importlib.util.find_spec("torch")
                f = list(spec.submodule_search_locations)[0] + "/version.py"
                vs = importlib.util.spec_from_file_location("_epbuild_torch_version", f)
                tv = importlib.util.module_from_spec(vs); vs.loader.exec_module(tv)
                str(tv.__version__)
            except Exception:
                import torch
                tv = torch.version
            r["torch"] = str(tv.__version__); r["torch_cuda"] = tv.cuda or ""
    except Exception: pass
for dist, mod in PKGS:
    try:
        v = md.version(dist)
        d = ""
        spec = importlib.util.find_spec(mod) if mod else None
        if spec and spec.submodule_search_locations: d = list(spec.submodule_search_locations)[0]
        r["pkgs"][dist] = {"version": v, "dir": d}
    except Exception: pass
print("` + probeMarker + `" + json.dumps(r))
`
	var pairs []string
	for _, p := range pkgs {
		pairs = append(pairs, fmt.Sprintf("(%q, %q)", p, ImportName(p)))
	}
	script = strings.Replace(script, "PKGS", "["+strings.Join(pairs, ", ")+"]", 1)
	script = strings.Replace(script, "WANT_TORCH", map[bool]string{true: "True", false: "False"}[torch], 1)
	var r struct {
		Python     string                   `json:"python"`
		Setuptools string                   `json:"setuptools"`
		Wheel      string                   `json:"wheel"`
		Torch      string                   `json:"torch"`
		TorchCUDA  string                   `json:"torch_cuda"`
		Pkgs       map[string]PythonPackage `json:"pkgs"`
		Site       []string                 `json:"site"`
	}
	// the report is the marked line: importing torch may print to stdout too
	var line string
	for _, l := range strings.Split(out(t.Python, "-c", script), "\n") {
		if rest, ok := strings.CutPrefix(l, probeMarker); ok {
			line = rest
		}
	}
	if json.Unmarshal([]byte(line), &r) != nil {
		return
	}
	t.PythonVersion, t.Setuptools, t.Wheel, t.Torch, t.TorchCUDA = r.Python, r.Setuptools, r.Wheel, r.Torch, r.TorchCUDA
	t.sitePackages = r.Site
	if len(r.Pkgs) > 0 {
		t.PythonPackages = r.Pkgs
	}
}

// importName maps a distribution to the package it installs: the NVSHMEM and NCCL
// wheels install nvidia.nvshmem and nvidia.nccl.
func ImportName(dist string) string {
	switch {
	case strings.HasPrefix(dist, "nvidia-nvshmem"):
		return "nvidia.nvshmem"
	case strings.HasPrefix(dist, "nvidia-nccl"):
		return "nvidia.nccl"
	}
	return strings.ReplaceAll(dist, "-", "_")
}

// Missing is one thing the environment lacks for a recipe.
type Missing struct {
	What  string `json:"what"`
	Need  string `json:"need"`
	Found string `json:"found"`
	Fix   string `json:"fix"`
}

// PreflightError lists everything missing; it exits 3.
type PreflightError struct {
	Recipe  string
	Missing []Missing
}

func (e *PreflightError) Error() string {
	var b strings.Builder
	if e.Recipe == "" {
		b.WriteString("the environment cannot build; missing:")
	} else {
		fmt.Fprintf(&b, "the environment cannot build %s; missing:", e.Recipe)
	}
	for _, m := range e.Missing {
		fmt.Fprintf(&b, "\n  - %s: need %s, found %s; %s", m.What, m.Need, OrNone(m.Found), m.Fix)
	}
	return b.String()
}

// ExitCode: the environment lacks something.
func (e *PreflightError) ExitCode() int { return 3 }

func OrNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Needs says what a plan requires of the toolchain, derived from its steps, options and
// requirements, so that overriding an option (say, libfabric off) drops its need.
type Needs struct {
	CUDA, Torch, Python, GCC, CMake bool
	Setuptools                      bool
	Packages                        map[string]string // python distribution → version constraint
	RDMACore                        bool
	Libfabric, GDRCopy, MPI         bool
	// Protobuf: protobuf >= 22 with Abseil (require protobuf-absl); GTest: a GTest CMake
	// package (require gtest, or NET_GPUDIRECTTCPX_BUILD_TESTS on).
	Protobuf, GTest bool
}

// NeedsOf derives what the plan needs.
func NeedsOf(p *plan.Plan) Needs {
	n := Needs{Packages: map[string]string{}}
	n.CUDA = p.Toolchain.CUDA != "" || len(p.Toolchain.Arch) > 0
	n.Torch = p.Toolchain.Torch != ""
	for _, r := range p.Toolchain.Require {
		switch r {
		case "rdma-core":
			n.RDMACore = true
		case "libfabric":
			n.Libfabric = true
		case "gdrcopy":
			n.GDRCopy = true
		case "mpi":
			n.MPI = true
		case "protobuf-absl":
			n.Protobuf = true
		case "gtest":
			n.GTest = true
		}
	}
	for _, c := range p.Components {
		if c.Source.Python != nil {
			n.Packages[c.Source.Python.Package] = c.Source.Python.Version
			n.Python = true
		}
		for _, s := range c.Build {
			switch {
			case s.CMake != nil:
				n.CMake, n.GCC = true, true
				o := s.CMake.Options
				on := func(k string) bool { v := strings.ToUpper(o[k]); return v == "1" || v == "ON" || v == "TRUE" }
				if on("NVSHMEM_LIBFABRIC_SUPPORT") {
					n.Libfabric = true
				}
				if on("NVSHMEM_USE_GDRCOPY") {
					n.GDRCopy = true
				}
				if on("NVSHMEM_MPI_SUPPORT") {
					n.MPI = true
				}
				if on("NET_GPUDIRECTTCPX_BUILD_TESTS") {
					n.GTest = true // the GPUDirect-TCPX plugin's unit tests
				}
				// NVSHMEM >= 3.4.5 from source with IBGDA or IBRC needs rdma-core headers; any
				// rdma-core will do: it defines what older ones lack itself (R22)
				if (on("NVSHMEM_IBGDA_SUPPORT") || on("NVSHMEM_IBRC_SUPPORT")) && c.Version != "" {
					if v, err := compat.ParseVersion(c.Version); err == nil && !v.Less(compat.MustVersion("3.4.5")) {
						n.RDMACore = true
					}
				}
			case s.PythonExtension != nil:
				n.Python, n.Setuptools, n.GCC = true, true, true
			case s.Command != nil:
			}
		}
	}
	return n
}

// Preflight compares the plan's needs with the toolchain and lists what is missing.
func Preflight(p *plan.Plan, t *Toolchain) error {
	n := NeedsOf(p)
	var miss []Missing
	add := func(what, need, found, fix string) { miss = append(miss, Missing{what, need, found, fix}) }
	checkVer := func(what, constraint, found, fix string) {
		if found == "" {
			add(what, orAny(constraint), "", fix)
			return
		}
		if constraint == "" {
			return
		}
		v, err := compat.ParseVersion(found)
		ok, cerr := v.Satisfies(constraint)
		if err != nil || cerr != nil || !ok {
			add(what, constraint, found, fix)
		}
	}
	if n.CUDA {
		checkVer("CUDA toolkit (nvcc)", p.Toolchain.CUDA, t.CUDA, "install the CUDA toolkit and set CUDA_HOME")
		if t.CUDA != "" {
			cv, _ := compat.ParseVersion(t.CUDA)
			for _, a := range p.Toolchain.Arch {
				need := archMinCUDA(a)
				if need != "" && cv.Less(compat.MustVersion(need)) {
					add("CUDA for "+a, ">="+need+" (R11)", t.CUDA, "use a newer CUDA toolkit")
				}
			}
		}
	}
	if n.Python || n.Torch {
		checkVer("python3", p.Toolchain.Python, t.PythonVersion, "install python3 (3.9 or newer) on PATH")
	}
	if n.Setuptools && t.PythonVersion != "" && t.Setuptools == "" {
		add("python setuptools", "any", "", "python3 -m pip install setuptools")
	}
	if n.Torch {
		checkVer("torch", p.Toolchain.Torch, t.Torch, "install torch in this Python environment ("+t.Python+")")
	}
	for _, dist := range slices.Sorted(maps.Keys(n.Packages)) {
		pk, ok := t.PythonPackages[dist]
		if !ok {
			add("python package "+dist, orAny(n.Packages[dist]), "", "pip install "+dist+" (or --set COMPONENT.package=... for the one you have)")
			continue
		}
		checkVer("python package "+dist, n.Packages[dist], pk.Version, "install a matching "+dist)
	}
	if n.GCC {
		checkVer("gcc", p.Toolchain.GCC, t.GCC, "install gcc and g++ (build-essential)")
	}
	if n.Setuptools && t.CXXStaticRuntime {
		add("C++ runtime of Python extensions", "libstdc++.so", "only libstdc++.a for "+t.CXX,
			"a Python extension it links carries a libstdc++ of its own beside the libstdc++.so.6 torch loads (the cxx-runtime check; EPv2 dies of SIGSEGV in std::regex): "+
				"set CXX and CC to a compiler for which `$CXX -print-file-name=libstdc++.so` prints a path (the distribution's g++ and gcc), "+
				"or put a directory holding libstdc++.so first on LIBRARY_PATH")
	}
	if n.CMake {
		checkVer("cmake", p.Toolchain.CMake, t.CMake, "install cmake (3.19 or newer)")
	}
	if n.RDMACore && t.RDMACore == "" {
		add("rdma-core headers", "infiniband/mlx5dv.h", "", "install rdma-core headers (libibverbs-dev, or DOCA-OFED)")
	}
	if n.Libfabric && t.LibfabricHome == "" {
		add("libfabric", "include/rdma/fabric.h under LIBFABRIC_HOME", "", "install the EFA installer (/opt/amazon/efa) or set LIBFABRIC_HOME; or --set nvshmem.options.NVSHMEM_LIBFABRIC_SUPPORT=0")
	}
	if n.GDRCopy && t.GDRCopyHome == "" {
		add("GDRCopy", "include/gdrapi.h under GDRCOPY_HOME", "", "install GDRCopy and set GDRCOPY_HOME; or --set nvshmem.options.NVSHMEM_USE_GDRCOPY=0")
	}
	if n.MPI && t.MPIHome == "" {
		add("MPI", "include/mpi.h under MPI_HOME, or an mpicc on PATH whose include directory holds mpi.h", "", "install OpenMPI with its headers (Debian and Ubuntu: libopenmpi-dev) or set MPI_HOME to the MPI installation whose include/ holds mpi.h; for NVSHMEM's MPI bootstrap, turning NVSHMEM_MPI_SUPPORT off also does")
	}
	if m := Machine(t.Arch); len(p.Toolchain.HostArch) > 0 && !slices.Contains(p.Toolchain.HostArch, m) {
		add("build host machine", strings.Join(p.Toolchain.HostArch, " or "), m, hostArchFix(p.Toolchain.HostArch))
	}
	preflightCMakePackages(n, t, add)
	if len(miss) > 0 {
		return &PreflightError{Recipe: p.Recipe, Missing: miss}
	}
	return nil
}

// Machine is a Go architecture (runtime.GOARCH, the probe's Arch) by the name uname -m
// gives it, the name a recipe's toolchain.host-arch uses; others are kept as they are.
func Machine(goarch string) string {
	switch goarch {
	case "amd64":
		return "x86_64"
	case "arm64":
		return "aarch64"
	}
	return goarch
}

// hostArchFix says where to build a recipe for other machines: nothing cross-compiles, so
// the build runs on a host of the nodes' machine.
func hostArchFix(want []string) string {
	if slices.Contains(want, "aarch64") {
		return "build on an aarch64 host, a Grace node of the GB200/GB300 rack (or a Grace Hopper or other aarch64 Linux host with the same CUDA, torch and Python): " +
			"the artifact's wheels and .so files are aarch64 machine code, which this host does not build"
	}
	return "build on a " + strings.Join(want, " or ") + " host: the artifact's wheels and .so files are that machine's code, which this host does not build"
}

func orAny(s string) string {
	if s == "" {
		return "any version"
	}
	return s
}

// archMinCUDA is R11: the CUDA release that first compiles for an architecture.
func archMinCUDA(arch string) string {
	a := strings.TrimRight(strings.TrimPrefix(strings.TrimPrefix(arch, "sm_"), "compute_"), "af")
	switch a {
	case "100", "101", "120":
		return "12.8"
	case "103", "121":
		return "12.9"
	case "90":
		return "11.8"
	}
	return ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// probeCache is a probe's result with what it depended on: the tools' files and the
// Python package directories, by size and modification time.
type probeCache struct {
	Key        string            `json:"key"`
	Validators map[string]string `json:"validators"`
	Toolchain  *Toolchain        `json:"toolchain"`
}

// pythonEnv is the environment the NCCL question runs python3 with.
func (p *Prober) pythonEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := p.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// ProbeCached returns the probe stored in dir while nothing it depended on changed, and
// probes (and stores) otherwise: probing runs python3 and every compiler, which would
// dominate a rerun that has nothing else to do.
func (p *Prober) ProbeCached(ctx context.Context, dir string) *Toolchain {
	t, finish := p.ProbeLater(ctx, dir)
	finish()
	return t
}

// ProbeLater is ProbeCached that leaves running the one slow question that no decision
// before the build needs: which NCCL torch loads (Toolchain.NCCL, which the manifest
// records and nothing checks at preflight) imports torch, seconds from a cold start.
// finish waits for it, fills in t.NCCL and stores the probe; until finish has returned
// nothing may read t.NCCL or copy t. An answer cut short by ctx is not stored.
func (p *Prober) ProbeLater(ctx context.Context, dir string) (t *Toolchain, finish func()) {
	key, file := p.cacheFile(dir)
	if t := loadProbe(file, key); t != nil {
		return t, func() {}
	}
	quick := *p
	quick.NCCL = false
	t = quick.Probe(ctx)
	var nccl *NCCLRuntime
	stopped := false
	done := make(chan struct{})
	if p.NCCL && t.Python != "" {
		env := p.pythonEnv()
		go func() {
			defer close(done)
			if n := ProbeNCCL(ctx, t.Python, env, nil); n.Version != "" {
				nccl = &n
			}
			stopped = ctx.Err() != nil
		}()
	} else {
		close(done)
	}
	var once sync.Once
	return t, func() {
		once.Do(func() {
			<-done
			t.NCCL = nccl
			if !stopped {
				p.storeProbe(dir, file, key, t)
			}
		})
	}
}

// cacheFile is the key of a probe with p's questions in this environment, and the file
// in dir that stores it.
func (p *Prober) cacheFile(dir string) (key, file string) {
	var env []string
	for _, k := range []string{"PATH", "CXX", "LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "LIBFABRIC_HOME", "GDRCOPY_HOME", "MPI_HOME", "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME"} {
		env = append(env, k+"="+p.Getenv(k))
	}
	// probe/2: nvcc's reproducibility flags
	key = store.Key("probe/2", env, p.Packages, p.Torch)
	if p.CMakePackages {
		key = store.Key("probe/2", env, p.Packages, p.Torch, p.Prefixes)
	}
	if p.NCCL {
		// /2: the library torch binds, no longer torch.cuda.nccl.version()
		key = store.Key(key, "torch's nccl/2")
	}
	return key, filepath.Join(dir, "probe-"+key[:16]+".json")
}

// loadProbe is the probe stored in file under key while nothing it depended on changed,
// else nil.
func loadProbe(file, key string) *Toolchain {
	var pc probeCache
	b, err := os.ReadFile(file)
	if err != nil || json.Unmarshal(b, &pc) != nil || pc.Key != key || pc.Toolchain == nil {
		return nil
	}
	for path, want := range pc.Validators {
		if statSig(path) != want {
			return nil
		}
	}
	return pc.Toolchain
}

// storeProbe stores t in file under key with what it depended on.
func (p *Prober) storeProbe(dir, file, key string, t *Toolchain) {
	// a probe that could not read python3 says nothing lasting: ask again next time
	if t.Python != "" && t.PythonVersion == "" {
		return
	}
	pc := probeCache{Key: key, Toolchain: t, Validators: map[string]string{}}
	paths := append([]string{}, t.sitePackages...)
	for _, tool := range []string{"python3", "gcc", "g++", "cmake", "ninja", "git", "nvcc", "mpicc"} {
		if lp, err := exec.LookPath(tool); err == nil {
			paths = append(paths, lp)
		}
	}
	paths = append(paths, t.NVCC, t.CXX, t.RDMACore, t.ProtobufHeader, t.Abseil, t.GTest)
	if p.CMakePackages {
		// packages unpacked into a named prefix after a probe found nothing there
		for _, pre := range p.Prefixes {
			paths = append(paths, filepath.Join(pre, "include", "google", "protobuf", "stubs", "common.h"), filepath.Join(pre, "lib"))
		}
	}
	for _, path := range paths {
		if path != "" {
			pc.Validators[path] = statSig(path)
		}
	}
	if b, err := json.Marshal(pc); err == nil {
		// a cache: runs at the same time each write a whole file of their own
		if os.MkdirAll(dir, 0o755) == nil {
			_ = disk.WriteFileAtomic(file, b)
		}
	}
}

// statSig is a file's identity for cache validation: size and mtime, or "absent".
func statSig(path string) string {
	fi, err := os.Stat(path)
	if err != nil {
		return "absent"
	}
	return fmt.Sprintf("%d:%d", fi.Size(), fi.ModTime().UnixNano())
}

// PreflightFacts turns plan facts into preflight facts: the toolchain versions become
// the probed ones (a tool not found stays the recipe's constraint, so rules on it stay
// undecided rather than pass), the requirements found become Present, and a component
// taken from the Python environment gets the installed package's version.
func PreflightFacts(f compat.Facts, p *plan.Plan, t *Toolchain) compat.Facts {
	set := func(dst *string, probed string) {
		if probed != "" {
			*dst = probed
		}
	}
	set(&f.Toolchain.CUDA, t.CUDA)
	set(&f.Toolchain.Torch, t.Torch)
	set(&f.Toolchain.Python, t.PythonVersion)
	set(&f.Toolchain.GCC, t.GCC)
	set(&f.Toolchain.CMake, t.CMake)
	present := []string{}
	for name, ok := range map[string]bool{
		"rdma-core":             t.RDMACore != "",
		"rdma-core-data-direct": t.RDMADataDirect,
		"libfabric":             t.LibfabricHome != "",
		"gdrcopy":               t.GDRCopyHome != "",
		"mpi":                   t.MPIHome != "",
	} {
		if ok {
			present = append(present, name)
		}
	}
	for _, c := range p.Components {
		if c.Source.Python == nil {
			continue
		}
		if pkg, ok := t.PythonPackages[c.Source.Python.Package]; ok && pkg.Version != "" {
			if strings.HasPrefix(c.Source.Python.Package, "nvidia-nvshmem") {
				present = append(present, "nvshmem-wheel")
			}
			if fc, ok := f.Component(c.Name); ok {
				fc.Version = pkg.Version
			}
		}
	}
	slices.Sort(present)
	f.Toolchain.Present = slices.Compact(present)
	return f
}
