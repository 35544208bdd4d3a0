package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/host/hostfixture"
)

// libmlx5 builds a shared object named libmlx5.so.1 the way rdma-core builds libmlx5: a
// version script with nested version nodes, each defining a function; versions lists
// them oldest first ("MLX5_1.24", "MLX5_1.25").
func libmlx5(t *testing.T, versions ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is needed to build an ELF shared object")
	}
	dir := t.TempDir()
	var src, script string
	prev := ""
	for i, v := range versions {
		src += "int mlx5_fn" + string(rune('a'+i)) + "(void) { return " + string(rune('0'+i)) + "; }\n"
		script += v + " {\n  global: mlx5_fn" + string(rune('a'+i)) + ";\n"
		if i == 0 {
			script += "  local: *;\n"
		}
		script += "}" + prev + ";\n"
		prev = " " + v
	}
	if err := os.WriteFile(filepath.Join(dir, "mlx5.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "libmlx5.map"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "libmlx5.so.1")
	cmd := exec.Command("gcc", "-shared", "-fPIC", "-o", out, "-Wl,-soname,libmlx5.so.1",
		"-Wl,--version-script="+filepath.Join(dir, "libmlx5.map"), filepath.Join(dir, "mlx5.c"))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// R42: the symbol versions of the libmlx5.so.1 the loader would resolve, the job's
// LD_LIBRARY_PATH first.
func TestLibmlx5SymbolVersionFact(t *testing.T) {
	t.Parallel()
	old, gin := libmlx5(t, "MLX5_1.0", "MLX5_1.24"), libmlx5(t, "MLX5_1.0", "MLX5_1.24", "MLX5_1.25")
	if defs, err := symbolVersionDefs(gin); err != nil || len(defs) < 3 {
		t.Fatalf("version definitions of the built library: %v %v", defs, err)
	}
	f := hostfixture.New(t)
	f.Write("/usr/lib/x86_64-linux-gnu/libmlx5.so.1", string(old))
	f.Write("/opt/rdma-core-60/lib/libmlx5.so.1", string(gin))
	f.Write("/opt/broken/lib/libmlx5.so.1", "not an ELF file\n")
	for ldpath, want := range map[string]string{
		"": "no", "/opt/rdma-core-60/lib": "yes", "/opt/none:/opt/rdma-core-60/lib": "yes", "relative/lib:/usr/lib64": "no", "/opt/broken/lib": "",
	} {
		cfg := Config{Transport: TransportNone, GIDIndex: -1, Env: map[string]string{"LD_LIBRARY_PATH": ldpath}}
		if got := factsOf(t, f.Root(), cfg)["rdma.libmlx5-mlx5-1.25"]; got != want {
			t.Errorf("LD_LIBRARY_PATH=%q: %q, want %q", ldpath, got, want)
		}
	}
	if got := factsOf(t, hostfixture.New(t).Root(), Config{Transport: TransportNone, GIDIndex: -1})["rdma.libmlx5-mlx5-1.25"]; got != "absent" {
		t.Errorf("no libmlx5: %q", got)
	}
}

// R46: the versions of the efa and gdrdrv modules, "none" where one is not loaded.
func TestModuleVersionFacts(t *testing.T) {
	t.Parallel()
	root := hostfixture.AWSP5(t)
	f := hostfixture.At(t, root)
	f.ModuleVersion("efa", "2.13.0g")
	got := factsOf(t, root, Config{Transport: TransportNone, GIDIndex: -1})
	// AWSP5 loads gdrdrv without a version file: loaded, version not read
	if got["efa.version"] != "2.13.0" || hasKey(got, "gdrdrv.version") {
		t.Errorf("efa 2.13.0g, gdrdrv without version: %v", got)
	}
	f.Write("/sys/module/gdrdrv/version", "2.4\n")
	if got := factsOf(t, root, Config{Transport: TransportNone, GIDIndex: -1}); got["gdrdrv.version"] != "2.4" {
		t.Errorf("gdrdrv 2.4: %v", got)
	}
	if got := factsOf(t, hostfixture.New(t).Root(), Config{Transport: TransportNone, GIDIndex: -1}); got["efa.version"] != "none" || got["gdrdrv.version"] != "none" {
		t.Errorf("no modules: %v", got)
	}
}

// R50, R51: pkey index 0 of the active ports in use, and virtual functions.
func TestPartitionAndVFFacts(t *testing.T) {
	t.Parallel()
	f := hostfixture.New(t)
	pf, vf := "pci0000:00/0000:00:02.0/0000:17:00.0", "pci0000:00/0000:00:02.0/0000:17:00.1"
	f.PCI(pf, "0x15b3", "0x020700", 0, "mlx5_core")
	f.PCI(vf, "0x15b3", "0x020700", 0, "mlx5_core")
	ib := hostfixture.Port{State: "4: ACTIVE", LinkLayer: "InfiniBand"}
	f.IBDevice("mlx5_0", pf, "mlx5_core", ib)
	down := hostfixture.Port{State: "1: DOWN", LinkLayer: "InfiniBand", PKey0: "0x7fff"}
	f.IBDevice("mlx5_1", vf, "mlx5_core", down)
	cfg := Config{Transport: TransportIBRC, GIDIndex: -1}
	if got := factsOf(t, f.Root(), cfg); got["ib.pkey0"] != "default" || got["ib.vf"] != "no" {
		t.Errorf("default key, no VF (a limited key on a DOWN port is not in use): %v", got)
	}
	f.VirtualFunction(vf, pf)
	f.Write("/sys/devices/"+pf+"/infiniband/mlx5_0/ports/1/pkeys/0", "0x8001\n")
	if got := factsOf(t, f.Root(), cfg); got["ib.pkey0"] != "other" || got["ib.vf"] != "yes" {
		t.Errorf("another key at index 0, mlx5_1 a VF: %v", got)
	}
	// NVSHMEM_HCA_PREFIX narrows the devices: mlx5_0 only is no VF
	cfg.HCAPrefix = "mlx5_0"
	if got := factsOf(t, f.Root(), cfg); got["ib.vf"] != "no" {
		t.Errorf("prefix mlx5_0: %v", got)
	}
}

// R44: the version of the nvcc EPv2's JIT runs on the node, from its toolkit's version.json.
func TestNVCCVersionFact(t *testing.T) {
	t.Parallel()
	f := hostfixture.New(t)
	f.Executable("/usr/local/cuda-13.0/bin/nvcc")
	f.CUDAVersionJSON("/usr/local/cuda-13.0", "13.0.2", "13.0.88")
	f.Link("/usr/local/cuda", "/usr/local/cuda-13.0")
	f.Executable("/opt/cuda-13.1/bin/nvcc")
	f.CUDAVersionJSON("/opt/cuda-13.1", "13.1.0", "13.1.80")
	f.Executable("/opt/bare/bin/nvcc")
	for env, want := range map[string]string{
		"": "13.0.88",
		"EP_JIT_NVCC_COMPILER=/opt/cuda-13.1/bin/nvcc": "13.1.80",
		"CUDA_HOME=/opt/cuda-13.1":                     "13.1.80",
		"CUDA_HOME=/opt/bare":                          "", // no version.json: not read
		"CUDA_HOME=/opt/none":                          "", // no nvcc
	} {
		e := map[string]string{}
		if k, v, ok := strings.Cut(env, "="); ok {
			e[k] = v
		}
		got, ok := factsOf(t, f.Root(), Config{Transport: TransportNone, GIDIndex: -1, Env: e})["cuda.nvcc-version"]
		if got != want || ok != (want != "") {
			t.Errorf("%s: %q, want %q", env, got, want)
		}
	}
}
