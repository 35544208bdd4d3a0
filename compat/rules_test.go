package compat

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// baseFacts is a gcp-b200-like stack as a preflight or host stage sees it: exact
// toolchain versions, a probed host. Each table case changes what its rule is about.
func baseFacts() Facts {
	return Facts{
		Recipe:  "test",
		Cluster: "test cluster",
		Components: []Component{
			{Name: "nvshmem", Version: "3.5.19-1", Repo: nvshmemURL, Commit: "919760f413fb834e76382d129ba9c3314ce722be", Source: "git",
				Options: map[string]string{
					"NVSHMEM_IBGDA_SUPPORT": "1", "NVSHMEM_IBRC_SUPPORT": "1", "NVSHMEM_USE_GDRCOPY": "0",
					"NVSHMEM_BUILD_PYTHON_LIB": "OFF", "CMAKE_CUDA_ARCHITECTURES": "100",
				},
				BuildVars: map[string]string{"NVSHMEM_IBGDA_SUPPORT": "ON", "NVSHMEM_USE_GDRCOPY": "OFF"}},
			{Name: "deepep", Version: "1.2.1", Repo: deepepURL, Commit: c29d31c0, Source: "git", Patches: []string{"deepep-pr466"},
				BuildEnv: map[string]string{"NVSHMEM_DIR": "{{nvshmem.prefix}}", "TORCH_CUDA_ARCH_LIST": "10.0", "DISABLE_AGGRESSIVE_PTX_INSTRS": "1"}},
			{Name: "nccl", Version: "2.21.5-1", Source: "python", Package: "nvidia-nccl-cu12"},
		},
		Toolchain: Toolchain{CUDA: "12.9", Torch: "2.10.0+cu129", Python: "3.12", Arch: []string{"sm_100"},
			Present: []string{"rdma-core"}},
		Env: map[string]string{
			"NVSHMEM_IB_ENABLE_IBGDA": "1", "NVSHMEM_IBGDA_NIC_HANDLER": "gpu", "NVSHMEM_HCA_PREFIX": "mlx5",
			"NVSHMEM_IB_GID_INDEX": "3", "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "enp0s19",
			"LD_PRELOAD": "{{nvshmem.prefix}}/lib/libnvshmem_host.so.3",
		},
		Host: map[string]string{
			"gdrdrv": "loaded", "peermem.memory-peers": "absent", "peermem.module": "present", "dmabuf": "unsupported",
			"regkey.PeerMappingOverride": "1", "nvidia-param.EnableStreamMemOPs": "1",
			"ib.link-layer": "Ethernet", "ib.driver": "mlx5_core", "ib.name-prefix": "mlx5", "ib.gid-type": "RoCE v2",
			"ib.roce-v2-ipv4-gid": "yes", "kernel": "6.14.0", "doca-ofed": "3.2.1",
			"nvshmem.host-libs-mapped": "1", "nvshmem.loaded-version": "3.5.19", "nvshmem.loaded-matches-build": "yes",
			"net.bootstrap-ifname": "address", "cuda.nvcc": "present", "gpu.fabric": "no", "imex.channel": "absent", "container": "no",
			"rdma.libmlx5-mlx5-1.25": "yes", "ib.pkey0": "default", "ib.vf": "no",
		},
	}
}

// Mutators for the table.
type mut func(*Facts)

func comp(f *Facts, name string) *Component {
	c, ok := f.Component(name)
	if !ok {
		panic("no component " + name)
	}
	return c
}

func deepepAt(commit string) mut { return func(f *Facts) { comp(f, "deepep").Commit = commit } }

func nvshmemVer(v string) mut { return func(f *Facts) { comp(f, "nvshmem").Version = v } }

func nvshmemArchive(v string) mut {
	return func(f *Facts) {
		c := comp(f, "nvshmem")
		c.Version, c.Source, c.Commit, c.Repo = v, "archive", "", "https://developer.download.nvidia.com/x.tar.gz"
	}
}

// nvshmemPrebuilt takes NVIDIA's built library from its redist archive (copied, not built).
func nvshmemPrebuilt(v string) mut {
	return func(f *Facts) {
		c := comp(f, "nvshmem")
		c.Version, c.Source, c.Commit, c.Options = v, "prebuilt", "", nil
		c.Repo = "https://developer.download.nvidia.com/compute/nvshmem/redist/libnvshmem/linux-x86_64/libnvshmem-linux-x86_64-" + v + "_cuda13-archive.tar.xz"
	}
}

// nvshmemWheel takes NVSHMEM from the nvidia-nvshmem-cu12 wheel (pkg changes the name).
func nvshmemWheel(v string) mut {
	return func(f *Facts) {
		c := comp(f, "nvshmem")
		c.Version, c.Source, c.Commit, c.Repo, c.Options, c.Package = v, "python", "", "", nil, "nvidia-nvshmem-cu12"
	}
}

// nvshmemGit takes NVSHMEM from a git repository (the release trees of NVSHMEM-archive
// for versions that predate NVIDIA's repository).
func nvshmemGit(v, repo, commit string) mut {
	return func(f *Facts) {
		c := comp(f, "nvshmem")
		c.Version, c.Source, c.Repo, c.Commit = v, "git", repo, commit
	}
}

// deepepArchive takes DeepEP from a tarball of its commit: no commit to decide ancestry by.
func deepepArchive(f *Facts) {
	c := comp(f, "deepep")
	c.Source, c.Repo, c.Commit = "archive", "https://example.com/DeepEP-29d31c0.tar.gz", ""
}

func arch(a ...string) mut { return tool(func(t *Toolchain) { t.Arch = a }) }

func pkg(component, name string) mut { return func(f *Facts) { comp(f, component).Package = name } }

// ncclSource makes NCCL a git source (the wheel in baseFacts).
func ncclGit(f *Facts) {
	c := comp(f, "nccl")
	c.Source, c.Package, c.Repo, c.Commit = "git", "", "https://github.com/NVIDIA/nccl", "1933fdd6360a8bfccaa0166bd71bce363d32e5b6"
}

// ncclMake gives NCCL a command step that builds its library (make -C src lib).
func ncclMake(argv ...string) mut {
	return func(f *Facts) { c := comp(f, "nccl"); c.Commands = append(c.Commands, argv) }
}

// ncclLib is NCCL built from git with CUDA 13 by the recipes' step: R40's ground.
var ncclLib = all(ncclGit, ncclMake("make", "-C", "src", "-j16", "lib", "NVCC_GENCODE=-gencode=arch=compute_90,code=sm_90"), cuda("13.0"))

// withComponent adds a component from a source kind (fmt for EPv2, say).
func withComponent(name, kind string) mut {
	return func(f *Facts) { f.Components = append(f.Components, Component{Name: name, Source: kind}) }
}

// ncclFrom makes NCCL a source of that kind.
func ncclFrom(kind string) mut { return func(f *Facts) { comp(f, "nccl").Source = kind } }

func patches(component string, sets ...string) mut {
	return func(f *Facts) { comp(f, component).Patches = sets }
}

func option(k, v string) mut {
	return func(f *Facts) {
		c := comp(f, "nvshmem")
		if c.Options == nil {
			c.Options = map[string]string{}
		}
		if v == "" {
			delete(c.Options, k)
		} else {
			c.Options[k] = v
		}
	}
}

func buildEnv(component, k, v string) mut {
	return func(f *Facts) {
		c := comp(f, component)
		if c.BuildEnv == nil {
			c.BuildEnv = map[string]string{}
		}
		if v == "" {
			delete(c.BuildEnv, k)
		} else {
			c.BuildEnv[k] = v
		}
	}
}

func env(k, v string) mut {
	return func(f *Facts) {
		if v == "" {
			delete(f.Env, k)
		} else {
			f.Env[k] = v
		}
	}
}

// host sets a host fact; "" removes it (not read).
func host(k, v string) mut {
	return func(f *Facts) {
		if v == "" {
			delete(f.Host, k)
		} else {
			f.Host[k] = v
		}
	}
}

func tool(fn func(*Toolchain)) mut { return func(f *Facts) { fn(&f.Toolchain) } }

func cuda(v string) mut { return tool(func(t *Toolchain) { t.CUDA = v }) }

func torch(v string) mut { return tool(func(t *Toolchain) { t.Torch = v }) }

func nccl(v string) mut { return func(f *Facts) { comp(f, "nccl").Version = v } }

func recipe(n string) mut { return func(f *Facts) { f.Recipe = n } }

// runtime sets a runtime setting of the recipe; "" removes it (not declared).
func runtime(k, v string) mut {
	return func(f *Facts) {
		if f.Runtime == nil {
			f.Runtime = map[string]string{}
		}
		if v == "" {
			delete(f.Runtime, k)
		} else {
			f.Runtime[k] = v
		}
	}
}

// llBuffer is DeepEP 29d31c0's low-latency RDMA buffer for 288 experts, hidden 7168 and
// 128 tokens a rank (get_low_latency_rdma_size_hint): 2146.96 MB, just under 2 GiB.
const llBuffer = "2146961792"

// vmmOff is gcp-b200's runtime env: CUDA VMM off, so the heap is fixed.
var vmmOff = env("NVSHMEM_DISABLE_CUDA_VMM", "1")

func command(argv ...string) mut {
	return func(f *Facts) { c := comp(f, "deepep"); c.Commands = append(c.Commands, argv) }
}

func all(ms ...mut) mut {
	return func(f *Facts) {
		for _, m := range ms {
			m(f)
		}
	}
}

// efa is the efa-aws stack: libfabric, GDRCopy, no IBGDA, the shim on DeepEP.
var efa = all(nvshmemVer("3.4.5-0"), option("NVSHMEM_IBGDA_SUPPORT", "0"), option("NVSHMEM_IBRC_SUPPORT", "0"),
	option("NVSHMEM_LIBFABRIC_SUPPORT", "1"), option("NVSHMEM_USE_GDRCOPY", "1"), option("CMAKE_CUDA_ARCHITECTURES", "90"),
	patches("deepep", "efa-device-shim"), buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", "9.0"),
	tool(func(t *Toolchain) {
		t.Arch = []string{"sm_90"}
		t.Require = []string{"rdma-core", "libfabric", "gdrcopy"}
	}),
	env("NVSHMEM_IB_ENABLE_IBGDA", ""), env("NVSHMEM_IBGDA_NIC_HANDLER", ""), env("NVSHMEM_HCA_PREFIX", ""), env("NVSHMEM_IB_GID_INDEX", ""),
	env("NVSHMEM_REMOTE_TRANSPORT", "libfabric"), env("NVSHMEM_LIBFABRIC_PROVIDER", "efa"), env("FI_EFA_ENABLE_SHM_TRANSFER", "0"),
	host("ib.driver", "efa"), host("ib.name-prefix", "rdmap"), host("ib.link-layer", "Unknown"))

// ibrc is the ibrc-dualport stack: DeepEP a84a248, NVSHMEM 3.2.5-1 patched, GDRCopy.
var ibrc = all(deepepAt(cA84a248), patches("deepep", "ibrc-dualport-deepep"), nvshmemArchive("3.2.5-1"),
	patches("nvshmem", "ibrc-dualport-nvshmem"), option("NVSHMEM_USE_GDRCOPY", "1"), option("CMAKE_CUDA_ARCHITECTURES", "90"),
	option("CMAKE_BUILD_TYPE", "release"), option("NVSHMEM_BUILD_PYTHON_LIB", ""), option("NVSHMEM_IBGDA_SUPPORT", "1"), buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", "9.0"),
	tool(func(t *Toolchain) { t.Arch = []string{"sm_90"}; t.Require = []string{"rdma-core", "gdrcopy"} }),
	env("NVSHMEM_IB_ENABLE_IBGDA", ""), env("NVSHMEM_IBGDA_NIC_HANDLER", ""), env("NVSHMEM_HCA_PREFIX", ""),
	env("NVSHMEM_IB_MAX_TRANSPORT_EP_COUNT", "2"), host("peermem.memory-peers", "present"), host("nvshmem.loaded-version", "3.2.5"))

// single is the single-node stack: the NVSHMEM wheel, no remote transport, no NVSHMEM_DIR.
var single = all(nvshmemWheel("3.4.5"), buildEnv("deepep", "NVSHMEM_DIR", ""), buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", "9.0"),
	buildEnv("deepep", "DISABLE_AGGRESSIVE_PTX_INSTRS", ""), tool(func(t *Toolchain) { t.Arch = []string{"sm_90"} }),
	env("NVSHMEM_IB_ENABLE_IBGDA", ""), env("NVSHMEM_IBGDA_NIC_HANDLER", ""), env("NVSHMEM_HCA_PREFIX", ""),
	env("NVSHMEM_IB_GID_INDEX", ""), env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", ""), env("LD_PRELOAD", ""), env("NCCL_NVLS_ENABLE", "0"),
	host("nvshmem.loaded-version", "3.4.5"))

// epv2 is DeepEP main (EPv2, after 723716f) on NCCL 2.30.4 and the NVSHMEM wheel.
var epv2 = all(single, deepepAt(cDd758ca), patches("deepep"), nccl("2.30.4-1"), tool(func(t *Toolchain) { t.Torch = "2.11.0+cu130"; t.CUDA = "13.0" }),
	pkg("nvshmem", "nvidia-nvshmem-cu13"), pkg("nccl", "nvidia-nccl-cu13"), buildEnv("deepep", "CPATH", "/usr/local/cuda/include/cccl"))

// nvshmemMain is NVIDIA/nvshmem's main branch: its version line says 3.5.0, its headers
// already have the RC-QP layout _v2 of the 3.5.19 release; no release is pinned there.
var nvshmemMain = nvshmemGit("3.5.0-0", nvshmemURL, "2c7f5a37b16d74166b7dfd30014bb1de1c6aaa0a")

// nvshmem345Tag is the v3.4.5-0 tag of NVIDIA/nvshmem, a release the catalogue pins.
var nvshmem345Tag = nvshmemGit("3.4.5", nvshmemURL, "131da55f643ac87c810ba0bc51d359258bf433a1")

// built records what the build read of the NVSHMEM headers: the RC-QP layout.
func built(layout string) mut {
	return func(f *Facts) { f.Build = map[string]string{"nvshmem.rc-layout": layout} }
}

// hiddenBuilt records the hidden sizes the build read from the DeepEP tree it compiled.
func hiddenBuilt(list string) mut {
	return func(f *Facts) {
		if f.Build == nil {
			f.Build = map[string]string{}
		}
		f.Build["deepep.hidden-sizes"] = list
	}
}

// lowLatency declares the job's mode (1 low-latency, 0 normal) and its ranks.
func lowLatency(mode, ranks string) mut {
	return all(runtime("low-latency", mode), runtime("ranks", ranks))
}

// efaGIN is EPv2 on an EFA node with what GDAKI needs there.
var efaGIN = all(epv2, host("ib.driver", "efa"), host("ib.name-prefix", "rdmap"), host("ib.link-layer", "Unknown"),
	host("efa.version", "3.3.0"), host("gdrdrv.version", "2.5"), env("NCCL_GIN_TYPE", "5"))

// ruleCase is one row: the facts (baseFacts changed by change) at a stage, and the cases
// of rule id that must hold there, exactly: "case/severity" items separated by commas
// ("/error" for a rule without cases), "" for none.
type ruleCase struct {
	id, name string
	stage    Stage
	change   mut
	want     string
}

func ruleTable() []ruleCase {
	P, F, H := StagePlan, StagePreflight, StageHost
	rows := []ruleCase{
		{"R1", "3.2.5 era on 3.3.24", P, all(ibrc, nvshmemArchive("3.3.24"), patches("nvshmem")), "deepep-3.2.5-era/error"},
		{"R1", "ibrc patch on 3.5.19", P, all(ibrc, nvshmemVer("3.5.19-1")), "deepep-3.2.5-era/error,patch-for-3.2.5-1-only/error"},
		{"R1", "3.1.7 era on 3.2.5-1", P, all(ibrc, deepepAt(cEbfe47e)), "deepep-3.1.7-era/error"},
		{"R1", "ibrc-dualport as pinned", P, ibrc, ""},
		{"R1", "DeepEP at b6ce310 on stock 3.3.24", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.24")), ""},
		{"R1", "3.1.7 era on 3.1.7 with its patch", P, all(ibrc, deepepAt(cEbfe47e), nvshmemArchive("3.1.7"), patches("nvshmem", "deepep-nvshmem-3.1.7")), ""},

		{"R2", "v1.2.1 on 3.2.5-1", P, all(deepepAt(c9af0e0d), nvshmemArchive("3.2.5-1")), "nvshmem-too-old/error"},
		{"R2", "29d31c0 on patched NVSHMEM", P, patches("nvshmem", "ibrc-dualport-nvshmem"), "nvshmem-patched/error"},
		{"R2", "e995aa2 on patched 3.2.5-1", P, all(ibrc, deepepAt(cE995aa2)), ""},
		{"R2", "b6ce310 on 3.3.9", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.9")), ""},

		{"R4", "v1.2.1 on source 3.3.20", P, all(deepepAt(c9af0e0d), nvshmemArchive("3.3.20")), "/error"},
		{"R4", "v1.2.1 on the 3.5.19 wheel", P, all(deepepAt(c9af0e0d), nvshmemWheel("3.5.19")), "/error"},
		{"R4", "v1.2.1 on source 3.3.9", P, all(deepepAt(c9af0e0d), nvshmemArchive("3.3.9")), ""},
		{"R4", "v1.2.1 on the 3.4.5 wheel", P, all(deepepAt(c9af0e0d), nvshmemWheel("3.4.5")), ""},
		{"R4", "v1.2.1 on 3.3.20 from git", P, all(deepepAt(c9af0e0d), nvshmemVer("3.3.20")), "/error"},

		{"R5", "a84a248 on 3.5.19-1", P, deepepAt(cA84a248), "/error"},
		{"R5", "441833d on 3.5.19-1", P, deepepAt(c441833d), ""},
		{"R5", "a84a248 on 3.4.5", P, all(deepepAt(cA84a248), nvshmemVer("3.4.5")), ""},

		{"R6", "NVSHMEM without IBGDA", P, option("NVSHMEM_IBGDA_SUPPORT", "0"), "/error"},
		{"R6", "IBGDA option unset", P, option("NVSHMEM_IBGDA_SUPPORT", ""), "/error"},
		{"R6", "efa-aws: shimmed", P, efa, ""},
		{"R6", "wheel", P, nvshmemWheel(">=3.3.9"), ""},
		{"R6", "NVSHMEM from an archive without IBGDA", P, all(nvshmemArchive("3.4.5"), option("NVSHMEM_IBGDA_SUPPORT", "0")), "/error"},
		{"R6", "NVSHMEM with IBGDA", P, nil, ""},

		{"R7", "ibrc without GDRCopy", P, all(ibrc, option("NVSHMEM_USE_GDRCOPY", "0")), "/error"},
		{"R7", "ibrc with GDRCopy", P, ibrc, ""},
		{"R7", "ibrc without GDRCopy, with our guard after the Infrawaves patch", P, all(ibrc, option("NVSHMEM_USE_GDRCOPY", "0"), patches("nvshmem", "ibrc-dualport-nvshmem", "nvshmem-3.2-cuda13", "nvshmem-3.2-ibgda-no-gdrcopy")), ""},
		{"R7", "3.3.9 without GDRCopy", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.9")), ""},
		{"R7", "DeepEP's a16af40 patch without GDRCopy", P, all(ibrc, deepepAt(cA16af40), patches("nvshmem", "deepep-nvshmem"), option("NVSHMEM_USE_GDRCOPY", "0")), ""},
		{"R7", "DeepEP's c6051f3 patch without GDRCopy", P, all(ibrc, deepepAt(cC6051f3), patches("nvshmem", "deepep-nvshmem"), option("NVSHMEM_USE_GDRCOPY", "0")), "/error"},
		{"R7", "the Infrawaves patch with DeepEP a16af40, without GDRCopy", P, all(ibrc, deepepAt(cA16af40), option("NVSHMEM_USE_GDRCOPY", "0")), "/error"},

		{"R8", "efa without GDRCopy", P, all(efa, option("NVSHMEM_USE_GDRCOPY", "0")), "build-gdrcopy/error"},
		{"R8", "efa with SHM transfer", P, all(efa, env("FI_EFA_ENABLE_SHM_TRANSFER", "")), "shm-transfer/error"},
		{"R8", "efa host without gdrdrv", H, all(efa, host("gdrdrv", "absent")), "gdrdrv/error"},
		{"R8", "efa-aws as pinned", P, efa, ""},
		{"R8", "efa-aws host with gdrdrv", H, efa, ""},

		{"R9", "patched NVSHMEM without LD_PRELOAD", P, all(ibrc, env("LD_PRELOAD", "")), "/error"},
		{"R9", "patched NVSHMEM preloaded", P, ibrc, ""},
		{"R9", "patched NVSHMEM from git without LD_PRELOAD", P, all(patches("nvshmem", "local-fix"), env("LD_PRELOAD", "")), "/error"},

		{"R11", "sm_100 on CUDA 12.6", F, tool(func(t *Toolchain) { t.CUDA = "12.6" }), "sm100-cuda/error"},
		{"R11", "sm_103 on CUDA 12.8", F, all(tool(func(t *Toolchain) { t.CUDA = "12.8"; t.Arch = []string{"sm_103"} }), option("CMAKE_CUDA_ARCHITECTURES", "103")), "sm103-cuda/error"},
		{"R11", "sm_100 with DeepEP's default arch list", P, buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", ""), "deepep-arch-list/error"},
		{"R11", "NVSHMEM built for 90 only", P, option("CMAKE_CUDA_ARCHITECTURES", "90"), "nvshmem-arch/error"},
		{"R11", "aggressive PTX not said", P, buildEnv("deepep", "DISABLE_AGGRESSIVE_PTX_INSTRS", ""), "aggressive-ptx/advice"},
		{"R11", "gcp-b200 as pinned", P, nil, ""},
		{"R11", "sm_90 on CUDA 12.3, defaults", P, all(tool(func(t *Toolchain) { t.CUDA = "12.3"; t.Arch = []string{"sm_90"} }),
			option("CMAKE_CUDA_ARCHITECTURES", ""), buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", ""), buildEnv("deepep", "DISABLE_AGGRESSIVE_PTX_INSTRS", "")), ""},

		{"R11", "no architecture, no CUDA named", P, tool(func(t *Toolchain) { t.Arch, t.CUDA = nil, "" }), ""},
		{"R11", "sm_100a on CUDA 12.6", F, all(cuda("12.6"), arch("sm_100a")), "sm100-cuda/error"},
		{"R11", "sm_100f on CUDA 12.6", F, all(cuda("12.6"), arch("sm_100f")), "sm100-cuda/error"},
		{"R11", "sm_103a on CUDA 12.8", F, all(cuda("12.8"), arch("sm_103a"), option("CMAKE_CUDA_ARCHITECTURES", "103")), "sm103-cuda/error"},
		{"R11", "sm_103f on CUDA 12.8", F, all(cuda("12.8"), arch("sm_103f"), option("CMAKE_CUDA_ARCHITECTURES", "103")), "sm103-cuda/error"},
		{"R11", "sm_103, NVSHMEM for 103", P, all(arch("sm_103"), option("CMAKE_CUDA_ARCHITECTURES", "103")), ""},
		{"R11", "sm_103, NVSHMEM for 90;103", P, all(arch("sm_103"), option("CMAKE_CUDA_ARCHITECTURES", "90;103")), ""},
		{"R11", "sm_103, NVSHMEM for 100", P, all(arch("sm_103"), option("CMAKE_CUDA_ARCHITECTURES", "100")), "nvshmem-arch/error"},
		{"R11", "sm_100a, NVSHMEM for 90", P, all(arch("sm_100a"), option("CMAKE_CUDA_ARCHITECTURES", "90")), "nvshmem-arch/error"},
		{"R11", "sm_100f, NVSHMEM for 90", P, all(arch("sm_100f"), option("CMAKE_CUDA_ARCHITECTURES", "90")), "nvshmem-arch/error"},
		{"R11", "sm_103a, NVSHMEM for 90", P, all(arch("sm_103a"), option("CMAKE_CUDA_ARCHITECTURES", "90")), "nvshmem-arch/error"},
		{"R11", "sm_103f, NVSHMEM for 90", P, all(arch("sm_103f"), option("CMAKE_CUDA_ARCHITECTURES", "90")), "nvshmem-arch/error"},
		{"R11", "sm_100, NVSHMEM for 90;100", P, option("CMAKE_CUDA_ARCHITECTURES", "90;100"), ""},
		{"R11", "NVSHMEM from an archive built for 90", P, all(nvshmemArchive("3.4.5"), option("CMAKE_CUDA_ARCHITECTURES", "90")), "nvshmem-arch/error"},
		{"R11", "sm_100, TORCH_CUDA_ARCH_LIST=9.0", P, buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", "9.0"), "deepep-arch-list/error"},
		{"R11", "DeepEP from an archive, default arch list, nothing said", P, all(deepepArchive, buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", ""), buildEnv("deepep", "DISABLE_AGGRESSIVE_PTX_INSTRS", "")), "deepep-arch-list/error,aggressive-ptx/advice"},
		{"R11", "sm_90a, defaults", P, all(arch("sm_90a"), option("CMAKE_CUDA_ARCHITECTURES", ""), buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", ""), buildEnv("deepep", "DISABLE_AGGRESSIVE_PTX_INSTRS", "")), ""},

		{"R13", "RoCE IBGDA on 3.4.5", H, nvshmemVer("3.4.5"), "/warn"},
		{"R13", "InfiniBand IBGDA on 3.4.5", H, all(nvshmemVer("3.4.5"), host("ib.link-layer", "InfiniBand")), ""},
		{"R13", "RoCE IBGDA on 3.5.19-1", H, nil, ""},

		{"R14", "rocep prefix on 3.3.24", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.24"), env("NVSHMEM_HCA_PREFIX", "rocep")), "prefix-needs-3.4.5/error"},
		{"R14", "IBGDA on an efa NIC", H, host("ib.driver", "efa"), "ibgda-mlx5-only/error"},
		{"R14", "gcp-b200 with rocep prefix on 3.5.19-1", P, all(recipe("gcp-b200"), env("NVSHMEM_HCA_PREFIX", "rocep")), ""},
		{"R14", "host rocep with prefix", H, all(host("ib.name-prefix", "rocep"), env("NVSHMEM_HCA_PREFIX", "rocep")), ""},

		{"R15", "DOCA-OFED 3.0.0 on 6.14", H, host("doca-ofed", "3.0.0"), "/error"},
		{"R15", "DOCA-OFED 3.2.1 on 6.14", H, nil, ""},
		{"R15", "DOCA-OFED 3.0.0 on 6.8", H, all(host("doca-ofed", "3.0.0"), host("kernel", "6.8.0")), ""},
		{"R15", "DOCA-OFED 3.0.0 on 6.14, plan stage", P, host("doca-ofed", "3.0.0"), ""},

		{"R18", "NCCL 2.22 lazy connect", P, nccl("2.22.3-1"), "runtime-connect/warn"},
		{"R18", "EPv2 on NCCL 2.27", P, all(deepepAt(cB306af0), nccl("2.27.3-1"), env("NCCL_RUNTIME_CONNECT", "0")), "epv2-nccl/error"},
		{"R18", "NCCL 2.22 with NCCL_RUNTIME_CONNECT=0", P, all(nccl("2.22.3-1"), env("NCCL_RUNTIME_CONNECT", "0")), ""},
		{"R18", "NCCL 2.21.5", P, nil, ""},
		{"R18", "torch's NCCL 2.28.9 wheel at preflight", F, nccl("2.28.9"), "runtime-connect/warn"},
		{"R18", "torch's NCCL 2.21.5 wheel at preflight", F, nil, ""},
		{"R18", "EPv2 on the NCCL 2.28.9 wheel at preflight", F, all(deepepAt(cDd758ca), nccl("2.28.9"), env("NCCL_RUNTIME_CONNECT", "0")), "epv2-nccl/error"},
		{"R18", "EPv2 without an nccl component", P, all(deepepAt(cDd758ca), env("NCCL_RUNTIME_CONNECT", "0"), func(f *Facts) {
			f.Components = slices.DeleteFunc(f.Components, func(c Component) bool { return c.Name == "nccl" })
		}), "epv2-nccl-undeclared/error"},
		{"R18", "EPv2, NCCL built from git", P, all(deepepAt(cDd758ca), nccl("2.30.4"), ncclFrom("git"), env("NCCL_RUNTIME_CONNECT", "0")), ""},
		{"R18", "EPv2, NCCL from an archive", P, all(deepepAt(cDd758ca), nccl("2.30.4"), ncclFrom("archive"), env("NCCL_RUNTIME_CONNECT", "0")), ""},
		{"R18", "EPv2 on NCCL 2.30.4", F, all(deepepAt(cDd758ca), nccl("2.30.4"), env("NCCL_RUNTIME_CONNECT", "0")), ""},

		{"R19", "EPv2 on torch 2.9", P, all(deepepAt(cB306af0), patches("deepep"), tool(func(t *Toolchain) { t.Torch = "2.9.1+cu128" })), "fmt/error,torch/error,layout/advice"},
		{"R19", "EPv2 with a v1 patch set", P, deepepAt(cB306af0), "fmt/error,v1-patch-sets/error,layout/advice"},
		{"R19", "EPv2 layout", P, all(deepepAt(cB306af0), patches("deepep")), "fmt/error,layout/advice"},
		{"R19", "29d31c0 on torch 2.9", P, tool(func(t *Toolchain) { t.Torch = "2.9.1" }), ""},
		{"R19", "EPv2 without fmt", P, all(deepepAt(cDd758ca), patches("deepep")), "fmt/error,layout/advice"},
		{"R19", "EPv2 with fmt from git", P, all(deepepAt(cDd758ca), patches("deepep"), withComponent("fmt", "git")), "layout/advice"},
		{"R19", "EPv2 with fmt from an archive", P, all(deepepAt(cDd758ca), patches("deepep"), withComponent("fmt", "archive")), "layout/advice"},
		{"R19", "EPv2 with fmt from a wheel (no headers to copy)", P, all(deepepAt(cDd758ca), patches("deepep"), withComponent("fmt", "python")), "fmt/error,layout/advice"},
		{"R19", "EPv2 with ibrc-dualport-deepep", P, all(deepepAt(cB306af0), patches("deepep", "ibrc-dualport-deepep")), "fmt/error,v1-patch-sets/error,layout/advice"},
		{"R19", "EPv2 with efa-device-shim", P, all(deepepAt(cB306af0), patches("deepep", "efa-device-shim")), "fmt/error,v1-patch-sets/error,layout/advice"},

		{"R20", "git apply", P, command("git", "apply", "fix.patch"), "/error"},
		{"R20", "patch in a shell", P, command("sh", "-c", "cd sub && patch -p1 < fix.patch"), "/error"},
		{"R20", "git -C apply", P, command("git", "-C", "sub", "apply", "x.diff"), "/error"},
		{"R20", "other commands", P, all(command("git", "status"), command("python3", "apply_patch_notes.py")), ""},
		{"R20", "git apply from stdin", P, command("git", "apply"), "/error"},

		{"R10", "NVSHMEM_DIR unset", P, buildEnv("deepep", "NVSHMEM_DIR", ""), "nvshmem-dir/error"},
		{"R10", "torch 2.10 without LD_PRELOAD", P, env("LD_PRELOAD", ""), "preload/warn"},
		{"R10", "two NVSHMEMs mapped, the unpatched one built preloaded (torch maps its own too)", H, host("nvshmem.host-libs-mapped", "2"), ""},
		{"R10", "two NVSHMEMs mapped, a patched one preloaded", H, all(host("nvshmem.host-libs-mapped", "2"), patches("nvshmem", "ibrc-dualport-nvshmem")), "one-nvshmem-mapped/error"},
		{"R10", "two NVSHMEMs mapped, another patch set", H, all(host("nvshmem.host-libs-mapped", "2"), patches("nvshmem", "site-fix")), "one-nvshmem-mapped/error"},
		{"R10", "two NVSHMEMs mapped, nothing preloaded", H, all(host("nvshmem.host-libs-mapped", "2"), env("LD_PRELOAD", "")), "one-nvshmem-mapped/error"},
		{"R10", "two NVSHMEMs mapped, another library preloaded", H, all(host("nvshmem.host-libs-mapped", "2"), env("LD_PRELOAD", "/opt/x/libfoo.so")), "one-nvshmem-mapped/error"},
		{"R10", "no NVSHMEM mapped", H, host("nvshmem.host-libs-mapped", "0"), ""},
		{"R10", "the loaded NVSHMEM is not the one built", H, host("nvshmem.loaded-matches-build", "no"), "loaded-version/error"},
		{"R10", "two mapped, neither the one built", H, all(host("nvshmem.host-libs-mapped", "2"), host("nvshmem.loaded-matches-build", "no")), "one-nvshmem-mapped/error,loaded-version/error"},
		{"R10", "the wheel, nothing set", P, single, ""},
		{"R10", "the NVSHMEM source as an archive, NVSHMEM_DIR unset", P, all(nvshmemArchive("3.4.5"), buildEnv("deepep", "NVSHMEM_DIR", "")), "nvshmem-dir/error"},
		{"R10", "torch 2.8 without LD_PRELOAD", P, all(env("LD_PRELOAD", ""), torch("2.8.0+cu128")), ""},
		{"R10", "one NVSHMEM mapped, the one built", H, nil, ""},
		{"R10", "the wheel on the host, two mapped", H, all(single, host("nvshmem.host-libs-mapped", "2")), "one-nvshmem-mapped/error"},
		{"R10", "DeepEP from an archive, NVSHMEM_DIR unset", P, all(deepepArchive, buildEnv("deepep", "NVSHMEM_DIR", "")), "nvshmem-dir/error"},
		{"R10", "NVSHMEM from an archive without LD_PRELOAD", P, all(nvshmemArchive("3.4.5"), env("LD_PRELOAD", "")), "preload/warn"},
		{"R10", "NVIDIA's prebuilt 3.7.1, NVSHMEM_DIR unset", P, all(nvshmemPrebuilt("3.7.1"), buildEnv("deepep", "NVSHMEM_DIR", "")), "nvshmem-dir/error"},
		{"R10", "NVIDIA's prebuilt 3.7.1 without LD_PRELOAD", P, all(nvshmemPrebuilt("3.7.1"), env("LD_PRELOAD", "")), "preload/warn"},
		{"R10", "DeepEP from an archive, two mapped, not the one built", H, all(deepepArchive, host("nvshmem.host-libs-mapped", "2"), host("nvshmem.loaded-matches-build", "no")), "one-nvshmem-mapped/error,loaded-version/error"},

		{"R12", "CUDA 13 without CCCL path", F, cuda("13.0"), "/advice"},
		{"R12", "CUDA 13, NVSHMEM 3.3.9", F, all(cuda("13.0"), deepepAt(cB6ce310), nvshmemArchive("3.3.9")), "/advice"},
		{"R12", "CUDA 13 with CCCL path", F, all(cuda("13.0"), buildEnv("deepep", "CPATH", "{{cuda.home}}/include/cccl")), ""},
		{"R12", "CUDA 13, NVSHMEM 3.2.5-1", F, all(ibrc, cuda("13.0")), ""},
		{"R12", "CUDA 12.9", F, nil, ""},
		{"R12", "DeepEP from an archive, CUDA 13", F, all(deepepArchive, cuda("13.0")), "/advice"},

		{"R13", "IBGDA=true", H, all(nvshmemVer("3.4.5"), env("NVSHMEM_IB_ENABLE_IBGDA", "true")), "/warn"},
		{"R13", "IBGDA=0", H, all(nvshmemVer("3.4.5"), env("NVSHMEM_IB_ENABLE_IBGDA", "0")), ""},

		{"R14", "IBGDA=yes on an efa NIC", H, all(host("ib.driver", "efa"), env("NVSHMEM_IB_ENABLE_IBGDA", "yes")), "ibgda-mlx5-only/error"},
		{"R14", "IBGDA=false on an efa NIC", H, all(host("ib.driver", "efa"), env("NVSHMEM_IB_ENABLE_IBGDA", "false")), ""},
		{"R14", "mlx5 prefix on 3.3.24", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.24"), env("NVSHMEM_HCA_PREFIX", "mlx5")), ""},
		{"R14", "host mlx5, no prefix", H, env("NVSHMEM_HCA_PREFIX", ""), ""},
		{"R14", "a node without RDMA devices, IBGDA, no prefix", H, all(env("NVSHMEM_HCA_PREFIX", ""), host("ib.link-layer", "none"), host("ib.driver", ""), host("ib.name-prefix", "")), ""},

		{"R16", "IBGDA, GPU handler: host setup", P, nil, "host-setup/advice"},
		{"R16", "IBGDA=true, handler auto: host setup", P, all(env("NVSHMEM_IB_ENABLE_IBGDA", "true"), env("NVSHMEM_IBGDA_NIC_HANDLER", "")), "host-setup/advice"},
		{"R16", "PeerMappingOverride missing", H, host("regkey.PeerMappingOverride", "0"), "peer-mapping-override/error"},
		{"R16", "EnableStreamMemOPs not 1", H, host("nvidia-param.EnableStreamMemOPs", "0"), "stream-memops/warn"},
		{"R16", "IBGDA=false", H, all(env("NVSHMEM_IB_ENABLE_IBGDA", "false"), host("regkey.PeerMappingOverride", "0")), ""},
		{"R16", "CPU NIC handler", P, env("NVSHMEM_IBGDA_NIC_HANDLER", "cpu"), ""},
		{"R16", "CPU NIC handler, no regkeys", H, all(env("NVSHMEM_IBGDA_NIC_HANDLER", "cpu"), host("regkey.PeerMappingOverride", "0"), host("nvidia-param.EnableStreamMemOPs", "0")), ""},
		{"R16", "host set up", H, nil, ""},

		{"R17", "ibrc-dualport plan", P, ibrc, "plan/advice"},
		{"R17", "ibrc-dualport on a node with only nvidia_peermem", H, all(ibrc, host("peermem.memory-peers", "absent")), "nvidia-peermem-only/error"},
		{"R17", "ibrc-dualport on a memory_peers node", H, ibrc, ""},
		{"R17", "ibrc-dualport with dma-buf", H, all(ibrc, host("peermem.memory-peers", "absent"), host("dmabuf", "supported")), ""},
		{"R17", "ibrc-dualport, dma-buf disabled", H, all(ibrc, host("peermem.memory-peers", "absent"), host("dmabuf", "supported"), env("NVSHMEM_IB_DISABLE_DMABUF", "y")), "nvidia-peermem-only/error"},
		{"R17", "ibrc-dualport, no peer memory at all (R34's case)", H, all(ibrc, host("peermem.memory-peers", "absent"), host("peermem.module", "absent")), ""},
		{"R17", "3.3.9 on an nvidia_peermem node", H, all(deepepAt(cB6ce310), nvshmemArchive("3.3.9")), ""},
		{"R17", "3.2.5-1 unpatched, plan", P, all(ibrc, patches("nvshmem")), "plan/advice"},
		{"R17", "3.2.5-1 with DeepEP's patch from c6051f3 on", P, all(ibrc, deepepAt(cA16af40), patches("nvshmem", "deepep-nvshmem")), ""},
		{"R17", "3.2.5-1 with DeepEP's patch before c6051f3", P, all(ibrc, deepepAt(cE995aa2), patches("nvshmem", "deepep-nvshmem")), "plan/advice"},
		{"R17", "3.2.5-1 from the wheel", P, all(ibrc, nvshmemWheel("3.2.5")), ""},
		{"R17", "the Infrawaves patch with DeepEP a16af40", P, all(ibrc, deepepAt(cA16af40)), "plan/advice"},
		{"R17", "3.2.5-1 from git, unpatched", P, all(ibrc, patches("nvshmem"), nvshmemGit("3.2.5-1", "https://github.com/valgur/NVSHMEM-archive", "6d8ab15b5d355d8d5fa5e9664962784de412dd9d")), "plan/advice"},

		{"R21", "3.4.5 with the Python library", P, all(nvshmemVer("3.4.5"), option("NVSHMEM_BUILD_PYTHON_LIB", "")), "/warn"},
		{"R21", "3.3.9 with defaults", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.9"), option("NVSHMEM_BUILD_PYTHON_LIB", "")), "/warn"},
		{"R21", "3.4.5 without the Python library", P, nvshmemVer("3.4.5"), ""},
		{"R21", "off through the environment", P, all(nvshmemVer("3.4.5"), option("NVSHMEM_BUILD_PYTHON_LIB", ""), buildEnv("nvshmem", "NVSHMEM_BUILD_PYTHON_LIB", "OFF")), ""},
		{"R21", "option on, environment off", P, all(nvshmemVer("3.4.5"), option("NVSHMEM_BUILD_PYTHON_LIB", "ON"), buildEnv("nvshmem", "NVSHMEM_BUILD_PYTHON_LIB", "OFF")), "/warn"},
		{"R21", "3.2.5-1 with defaults", P, ibrc, ""},
		{"R21", "the wheel", P, single, ""},

		{"R22", "3.4.5 IBGDA+IBRC, MLX5DV off", P, all(nvshmemVer("3.4.5-0"), option("NVSHMEM_USE_MLX5DV", "OFF")), "measured/error"},
		{"R22", "3.4.5 IBRC by default, MLX5DV off in the environment", P, all(nvshmemVer("3.4.5-0"), option("NVSHMEM_IBGDA_SUPPORT", ""), option("NVSHMEM_IBRC_SUPPORT", ""), buildEnv("nvshmem", "NVSHMEM_USE_MLX5DV", "0")), "measured/error"},
		{"R22", "3.4.5 IBGDA only, MLX5DV off", P, all(nvshmemVer("3.4.5-0"), option("NVSHMEM_IBRC_SUPPORT", "0"), option("NVSHMEM_USE_MLX5DV", "0")), "measured/error"},
		{"R22", "3.4.5 IBDEVX only, MLX5DV off", P, all(nvshmemVer("3.4.5-0"), option("NVSHMEM_IBGDA_SUPPORT", "0"), option("NVSHMEM_IBRC_SUPPORT", "0"), option("NVSHMEM_IBDEVX_SUPPORT", "1"), option("NVSHMEM_USE_MLX5DV", "0")), "measured/error"},
		{"R22", "3.5.19-1 IBGDA, MLX5DV off", P, option("NVSHMEM_USE_MLX5DV", "OFF"), "newer/warn"},
		{"R22", "3.4.5 on Ubuntu 24.04's rdma-core, MLX5DV default", P, nvshmemVer("3.4.5-0"), ""},
		{"R22", "3.4.5, MLX5DV on over the environment's off", P, all(nvshmemVer("3.4.5-0"), option("NVSHMEM_USE_MLX5DV", "ON"), buildEnv("nvshmem", "NVSHMEM_USE_MLX5DV", "OFF")), ""},
		{"R22", "3.4.5 libfabric only, MLX5DV off", P, all(efa, option("NVSHMEM_USE_MLX5DV", "OFF")), ""},
		{"R22", "3.3.20 has no MLX5DV option", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.20"), option("NVSHMEM_USE_MLX5DV", "OFF")), ""},
		{"R22", "the wheel", P, all(single, buildEnv("nvshmem", "NVSHMEM_USE_MLX5DV", "OFF")), ""},
		{"R22", "3.4.5 from an archive, MLX5DV off", P, all(nvshmemArchive("3.4.5"), option("NVSHMEM_USE_MLX5DV", "OFF")), "measured/error"},

		{"R23", "transport ibgda", P, env("NVSHMEM_REMOTE_TRANSPORT", "ibgda"), "transport-ibgda/error"},
		{"R23", "transport IBGDA", P, env("NVSHMEM_REMOTE_TRANSPORT", "IBGDA"), "transport-ibgda/error"},
		{"R23", "transport verbs", P, env("NVSHMEM_REMOTE_TRANSPORT", "verbs"), "transport-value/error"},
		{"R23", "transport ibrc-x", P, env("NVSHMEM_REMOTE_TRANSPORT", "ibrc-x"), "transport-value/error"},
		{"R23", "NVSHMEM_GDRCOPY_SUPPORT check", P, func(f *Facts) { comp(f, "nvshmem").BuildVars["NVSHMEM_GDRCOPY_SUPPORT"] = "ON" }, "gdrcopy-build-var/error"},
		{"R23", "transport ibrc, USE_GDRCOPY check", P, env("NVSHMEM_REMOTE_TRANSPORT", "ibrc"), ""},
		{"R23", "transport IBRC (any case)", P, env("NVSHMEM_REMOTE_TRANSPORT", "IBRC"), ""},
		{"R23", "transport ucx", P, env("NVSHMEM_REMOTE_TRANSPORT", "ucx"), ""},
		{"R23", "transport libfabric", P, env("NVSHMEM_REMOTE_TRANSPORT", "libfabric"), ""},
		{"R23", "transport ibdevx", P, env("NVSHMEM_REMOTE_TRANSPORT", "ibdevx"), ""},
		{"R23", "transport none", P, env("NVSHMEM_REMOTE_TRANSPORT", "none"), ""},
		{"R23", "transport gpunetio on 3.7.0", P, all(nvshmemWheel("3.7.0"), env("NVSHMEM_REMOTE_TRANSPORT", "gpunetio")), ""},
		{"R23", "transport GPUNetIO on 3.5.19-1", P, env("NVSHMEM_REMOTE_TRANSPORT", "GPUNetIO"), "gpunetio-needs-3.7/error"},
		{"R23", "transport unset", P, nil, ""},

		{"R26", "CUDA 13 with NVSHMEM 3.3.9", F, all(cuda("13.0"), deepepAt(cB6ce310), nvshmemArchive("3.3.9")), "/error"},
		{"R26", "CUDA 13 with the 3.3.9 wheel", F, all(single, cuda("13.0"), nvshmemWheel("3.3.9"), pkg("nvshmem", "nvidia-nvshmem-cu13")), "/error"},
		{"R26", "CUDA 13 with NVSHMEM 3.3.20", F, all(cuda("13.0"), deepepAt(cB6ce310), nvshmemArchive("3.3.20")), ""},
		{"R26", "CUDA 12.9 with NVSHMEM 3.3.9", F, all(deepepAt(cB6ce310), nvshmemArchive("3.3.9")), ""},
		{"R26", "CUDA 13 with NVSHMEM 3.5.19-1", F, cuda("13.0"), ""},
		{"R26", "CUDA 13 with the 3.2.5 wheel", F, all(single, cuda("13.0"), nvshmemWheel("3.2.5"), pkg("nvshmem", "nvidia-nvshmem-cu13")), "/error"},
		{"R26", "CUDA 13 with source 3.2.5-1 (R33's)", F, all(ibrc, cuda("13.0")), ""},

		{"R27", "cu12 wheel, CUDA 13", F, all(single, cuda("13.0")), "cu12-wheel-cuda13/error"},
		{"R27", "cu13 wheel, CUDA 12.9", F, all(single, pkg("nvshmem", "nvidia-nvshmem-cu13")), "cu13-wheel-cuda12/error"},
		{"R27", "cu12 wheel, torch 2.11, CUDA 12.8", F, all(single, cuda("12.8"), torch("2.11.0+cu128")), "cu12-wheel-torch-2.11/warn"},
		{"R27", "cu12 wheel, CUDA 12.9, torch 2.10", F, single, ""},
		{"R27", "cu13 wheel, CUDA 13.0, torch 2.11", F, all(single, cuda("13.0"), torch("2.11.0+cu130"), pkg("nvshmem", "nvidia-nvshmem-cu13")), ""},
		{"R27", "NVSHMEM from source, CUDA 13", F, cuda("13.0"), ""},

		{"R28", "gcp-b200 without the bootstrap interface", P, env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", ""), "unset/warn"},
		{"R28", "efa-aws without it", P, all(efa, env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "")), "unset/warn"},
		{"R28", "ibrc-dualport without it", P, all(ibrc, env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "")), "unset/warn"},
		{"R28", "IBGDA built, runtime IBGDA=true, wheel", P, all(single, env("NVSHMEM_IB_ENABLE_IBGDA", "true")), "unset/warn"},
		{"R28", "IBGDA built only", P, all(env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", ""), env("NVSHMEM_IB_ENABLE_IBGDA", ""), option("NVSHMEM_IBRC_SUPPORT", "0")), "unset/warn"},
		{"R28", "the wheel with NVSHMEM_REMOTE_TRANSPORT=ucx", P, all(single, env("NVSHMEM_REMOTE_TRANSPORT", "ucx")), "unset/warn"},
		{"R28", "the wheel with NVSHMEM_REMOTE_TRANSPORT=NONE", P, all(single, env("NVSHMEM_REMOTE_TRANSPORT", "NONE")), ""},
		{"R28", "single node, the wheel", P, single, ""},
		{"R28", "the wheel, IBGDA=0", P, all(single, env("NVSHMEM_IB_ENABLE_IBGDA", "0")), ""},
		{"R28", "source build without IB or libfabric, nothing at run time", P, all(single, nvshmemArchive("3.4.5"), option("NVSHMEM_IBGDA_SUPPORT", "0"), option("NVSHMEM_IBRC_SUPPORT", "0")), ""},
		{"R28", "interface named", P, nil, ""},
		{"R28", "IBRC built only", P, all(env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", ""), env("NVSHMEM_IB_ENABLE_IBGDA", ""), option("NVSHMEM_IBGDA_SUPPORT", "0")), "unset/warn"},
		{"R28", "libfabric built only", P, all(efa, env("NVSHMEM_REMOTE_TRANSPORT", ""), env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "")), "unset/warn"},

		{"R29", "EPv2 (b306af0) on the wheels", P, all(epv2, deepepAt(cB306af0)), "wheel-link/error,nccl-headers-on-nodes/advice,nvcc-on-nodes/advice"},
		{"R29", "EPv2 (b306af0), NCCL from git, NVSHMEM wheel", P, all(epv2, deepepAt(cB306af0), ncclGit), "wheel-link/error,nccl-headers-on-nodes/advice,nvcc-on-nodes/advice"},
		{"R29", "EPv2 (b306af0), NVSHMEM from source, NCCL wheel", P, all(epv2, deepepAt(cB306af0), nvshmemArchive("3.4.5"), buildEnv("deepep", "EP_NVSHMEM_ROOT_DIR", "{{nvshmem.prefix}}")), "wheel-link/error,nccl-headers-on-nodes/advice,nvcc-on-nodes/advice"},
		{"R29", "EPv2 (b306af0), neither a wheel", P, all(epv2, deepepAt(cB306af0), nvshmemArchive("3.4.5"), ncclGit, buildEnv("deepep", "EP_NVSHMEM_ROOT_DIR", "{{nvshmem.prefix}}")), "nccl-headers-on-nodes/advice,nvcc-on-nodes/advice"},
		{"R29", "EPv2 main on the wheels", P, epv2, "nccl-headers-on-nodes/advice,nvcc-on-nodes/advice"},
		{"R29", "EPv2 main, NVSHMEM_DIR without EP_NVSHMEM_ROOT_DIR", P, all(epv2, buildEnv("deepep", "NVSHMEM_DIR", "/opt/nvshmem")), "nvshmem-root-dir/warn,nccl-headers-on-nodes/advice,nvcc-on-nodes/advice"},
		{"R29", "EPv2 main, both set", P, all(epv2, buildEnv("deepep", "NVSHMEM_DIR", "/opt/nvshmem"), buildEnv("deepep", "EP_NVSHMEM_ROOT_DIR", "/opt/nvshmem")), "nccl-headers-on-nodes/advice,nvcc-on-nodes/advice"},
		{"R29", "EPv2 on a node without nvcc", H, all(epv2, host("cuda.nvcc", "absent")), "nvcc-missing/error"},
		{"R29", "EPv2 on a node with nvcc", H, epv2, ""},
		{"R29", "29d31c0 on the wheels", P, single, ""},
		{"R29", "29d31c0 on a node without nvcc", H, all(single, host("cuda.nvcc", "absent")), ""},
		{"R29", "EPv2 from an archive: its commit is unknown", P, all(epv2, deepepArchive), "nccl-headers-on-nodes/advice?,nvcc-on-nodes/advice?,wheel-link/warn?"},

		{"R30", "MNNVL in a container without NVIDIA_IMEX_CHANNELS", H, all(host("gpu.fabric", "yes"), host("imex.channel", "present"), host("container", "yes")), "container-env/warn"},
		{"R30", "MNNVL with a channel", H, all(host("gpu.fabric", "yes"), host("imex.channel", "present")), ""},
		{"R30", "MNNVL in a container with NVIDIA_IMEX_CHANNELS", H, all(host("gpu.fabric", "yes"), host("imex.channel", "present"), host("container", "yes"), env("NVIDIA_IMEX_CHANNELS", "0")), ""},
		{"R30", "no multi-node NVLink", H, host("container", "yes"), ""},

		{"R31", "GID index 3 is RoCE v1", H, host("ib.gid-type", "RoCE v1"), "index-not-roce-v2/error"},
		{"R31", "GID index 3 is RoCE v2", H, nil, ""},
		{"R31", "auto-select without a RoCE v2 IPv4 GID", H, all(env("NVSHMEM_IB_GID_INDEX", ""), host("ib.roce-v2-ipv4-gid", "no")), "auto-select/error"},
		{"R31", "GID index -1 (auto) without a RoCE v2 IPv4 GID", H, all(env("NVSHMEM_IB_GID_INDEX", "-1"), host("ib.roce-v2-ipv4-gid", "no")), "auto-select/error"},
		{"R31", "auto-select with a RoCE v2 IPv4 GID", H, env("NVSHMEM_IB_GID_INDEX", ""), ""},
		{"R31", "auto-select for IPv6", H, all(env("NVSHMEM_IB_GID_INDEX", ""), env("NVSHMEM_IB_ADDR_FAMILY", "AF_INET6"), host("ib.roce-v2-ipv4-gid", "no")), ""},
		{"R31", "auto-select for RoCE v1", H, all(env("NVSHMEM_IB_GID_INDEX", ""), env("NVSHMEM_IB_ROCE_VERSION_NUM", "1"), host("ib.roce-v2-ipv4-gid", "no")), ""},
		{"R31", "InfiniBand", H, all(host("ib.link-layer", "InfiniBand"), host("ib.gid-type", "IB/RoCE v1"), host("ib.roce-v2-ipv4-gid", "no")), ""},
		{"R31", "GID index 3 is RoCE v2, no IPv4 GID for auto-select", H, host("ib.roce-v2-ipv4-gid", "no"), ""},

		{"R32", "VMM off, size unset, no buffer declared", P, vmmOff, "unset/error"},
		{"R32", "VMM off, size unset, the low-latency buffer", P, all(vmmOff, runtime("buffer-bytes", llBuffer)), "too-small/error"},
		{"R32", "VMM off, 1G, the low-latency buffer", P, all(vmmOff, env("NVSHMEM_SYMMETRIC_SIZE", "1G"), runtime("buffer-bytes", llBuffer)), "too-small/error"},
		{"R32", "VMM off, 4G, an 8 GiB buffer", P, all(vmmOff, env("NVSHMEM_SYMMETRIC_SIZE", "4G"), runtime("buffer-bytes", "8589934592")), "too-small/error"},
		{"R32", "VMM off, 4G, the low-latency buffer (gcp-b200)", P, all(vmmOff, env("NVSHMEM_SYMMETRIC_SIZE", "4G"), runtime("buffer-bytes", llBuffer)), ""},
		{"R32", "VMM off, 4294967296 (measured), the low-latency buffer", P, all(vmmOff, env("NVSHMEM_SYMMETRIC_SIZE", "4294967296"), runtime("buffer-bytes", llBuffer)), ""},
		{"R32", "VMM off, 4G, no buffer declared", P, all(vmmOff, env("NVSHMEM_SYMMETRIC_SIZE", "4G")), "undeclared/warn"},
		{"R32", "VMM on, size unset, the low-latency buffer", P, runtime("buffer-bytes", llBuffer), ""},
		{"R32", "VMM=0, size unset, no buffer", P, env("NVSHMEM_DISABLE_CUDA_VMM", "0"), ""},
		{"R32", "VMM=false, size unset, the low-latency buffer", P, all(env("NVSHMEM_DISABLE_CUDA_VMM", "false"), runtime("buffer-bytes", llBuffer)), ""},
		{"R32", "a size NVSHMEM cannot read", P, env("NVSHMEM_SYMMETRIC_SIZE", "four gigabytes"), "invalid/error"},
		{"R32", "VMM off, a negative size", P, all(vmmOff, env("NVSHMEM_SYMMETRIC_SIZE", "-1G"), runtime("buffer-bytes", llBuffer)), "invalid/error,too-small/warn?"},
		{"R32", "VMM off, 4GB (NVSHMEM ignores what follows the suffix)", P, all(vmmOff, env("NVSHMEM_SYMMETRIC_SIZE", "4GB"), runtime("buffer-bytes", llBuffer)), ""},
		{"R32", "the job sets 2G on the node: just enough", H, all(vmmOff, env("NVSHMEM_SYMMETRIC_SIZE", "2G"), runtime("buffer-bytes", llBuffer)), ""},
		{"R32", "the job turns VMM off on the node, the recipe's buffer", H, all(vmmOff, runtime("buffer-bytes", llBuffer)), "too-small/error"},

		{"R33", "3.2.5-1 from an archive on CUDA 13 (ibrc-dualport)", F, all(ibrc, cuda("13.0")), "/error"},
		{"R33", "3.2.5-1 from git on CUDA 13", F, all(ibrc, cuda("13.0"), nvshmemGit("3.2.5-1", "https://github.com/valgur/NVSHMEM-archive", "6d8ab15b5d355d8d5fa5e9664962784de412dd9d")), "/error"},
		{"R33", "3.2.5-1 on CUDA 12.9", F, ibrc, ""},
		{"R33", "3.2.5-1 on CUDA 13 with our C++17 set (ibrc-dualport today)", F, all(ibrc, cuda("13.0"), patches("nvshmem", "ibrc-dualport-nvshmem", "nvshmem-3.2-cuda13")), ""},
		{"R33", "3.2.5-1 on CUDA 13 with another set only", F, all(ibrc, cuda("13.0"), patches("nvshmem", "ibrc-dualport-nvshmem")), "/error"},
		{"R33", "3.3.9 from source on CUDA 13 (R26's)", F, all(cuda("13.0"), deepepAt(cB6ce310), nvshmemArchive("3.3.9")), ""},
		{"R33", "the 3.2.5 wheel on CUDA 13", F, all(single, cuda("13.0"), nvshmemWheel("3.2.5")), ""},

		{"R34", "IBGDA, no peer-memory module, no dma-buf", H, host("peermem.module", "absent"), "/error"},
		{"R34", "IBGDA, dma-buf only", H, all(host("peermem.module", "absent"), host("dmabuf", "supported")), ""},
		{"R34", "dma-buf disabled by NVSHMEM_IB_DISABLE_DMABUF", H, all(host("peermem.module", "absent"), host("dmabuf", "supported"), env("NVSHMEM_IB_DISABLE_DMABUF", "1")), "/error"},
		{"R34", "nv_peer_mem under memory_peers only", H, all(host("peermem.module", "absent"), host("peermem.memory-peers", "present")), ""},
		{"R34", "nvidia_peermem loaded", H, nil, ""},
		{"R34", "InfiniBand, no peer memory", H, all(host("ib.link-layer", "InfiniBand"), host("peermem.module", "absent")), "/error"},
		{"R34", "no RDMA device on the node", H, all(host("ib.link-layer", "none"), host("peermem.module", "absent")), ""},
		{"R34", "built with IBGDA only, runtime env silent", H, all(env("NVSHMEM_IB_ENABLE_IBGDA", ""), option("NVSHMEM_IBRC_SUPPORT", "0"), host("peermem.module", "absent")), "/error"},
		{"R34", "built with IBRC only (ibrc-dualport-like)", H, all(env("NVSHMEM_IB_ENABLE_IBGDA", ""), option("NVSHMEM_IBGDA_SUPPORT", "0"), host("peermem.module", "absent")), "/error"},
		{"R34", "built with IB, runs ucx", H, all(env("NVSHMEM_IB_ENABLE_IBGDA", ""), env("NVSHMEM_REMOTE_TRANSPORT", "ucx"), host("peermem.module", "absent")), ""},
		{"R34", "the wheel, IBRC named", H, all(single, env("NVSHMEM_REMOTE_TRANSPORT", "IBRC"), host("peermem.module", "absent")), "/error"},
		{"R34", "the wheel, IBDEVX named", H, all(single, env("NVSHMEM_REMOTE_TRANSPORT", "ibdevx"), host("peermem.module", "absent")), "/error"},
		{"R34", "the wheel, IBGDA switched on at run time", H, all(single, env("NVSHMEM_IB_ENABLE_IBGDA", "1"), host("peermem.module", "absent")), "/error"},
		{"R34", "the wheel, nothing named (one node)", H, all(single, host("peermem.module", "absent")), ""},
		{"R34", "efa: libfabric", H, all(efa, host("peermem.module", "absent")), ""},

		{"R40", "NCCL 2.21.5-1 from git, CUDA 13.0", F, all(ncclLib, nccl("2.21.5-1")), "/error"},
		{"R40", "NCCL 2.22.3-1 from git, CUDA 13.0", F, all(ncclLib, nccl("2.22.3-1")), "/error"},
		{"R40", "NCCL 2.26.2-1 from git, CUDA 13.0: cudawrap.h still unversioned", F, all(ncclLib, nccl("2.26.2-1")), "/error"},
		{"R40", "NCCL 2.27.3-1 from git, CUDA 13.0: versioned PFN types", F, all(ncclLib, nccl("2.27.3-1")), ""},
		{"R40", "NCCL 2.28.3-1 from git, CUDA 13.0", F, all(ncclLib, nccl("2.28.3-1")), ""},
		{"R40", "NCCL 2.21.5-1 from an archive, CUDA 13.0", F, all(ncclLib, nccl("2.21.5-1"), ncclFrom("archive")), "/error"},
		{"R40", "NCCL 2.21.5-1 from git, CUDA 12.9", F, all(ncclLib, nccl("2.21.5-1"), cuda("12.9")), ""},
		{"R40", "torch's NCCL 2.21.5 wheel, CUDA 13.0", F, all(ncclLib, nccl("2.21.5"), ncclFrom("python")), ""},
		{"R40", "NCCL 2.21.5-1 from git, only nccl.h generated (gcp-a3-tcpx)", F, all(ncclGit, cuda("13.0"), nccl("2.21.5-1"),
			ncclMake("sh", "-c", `make -C src BUILDDIR="$DESTDIR$PREFIX" "$DESTDIR$PREFIX/include/nccl.h"`)), ""},
		{"R40", "NCCL 2.21.5-1 from git, CUDA 13.0, at plan stage", P, all(ncclLib, nccl("2.21.5-1")), ""},

		{"R53", "NCCL 2.27.3-1 from git, torch 2.11.0+cu130: measured, import torch fails", F, all(ncclLib, nccl("2.27.3-1"), torch("2.11.0+cu130")), "/error"},
		{"R53", "NCCL 2.28.3-1 from git, torch 2.11.0+cu130: measured, imports", F, all(ncclLib, nccl("2.28.3-1"), torch("2.11.0+cu130")), ""},
		{"R53", "NCCL 2.29.2-1 from git, torch 2.11.0", F, all(ncclLib, nccl("2.29.2-1"), torch("2.11.0")), ""},
		{"R53", "NCCL 2.27.3-1 from git, torch 2.10.0: not measured", F, all(ncclLib, nccl("2.27.3-1"), torch("2.10.0")), ""},
		{"R53", "an older nvidia-nccl wheel in torch 2.11's environment", F, all(nccl("2.27.7"), torch("2.11.0")), "/error"},
		{"R53", "NCCL 2.27.3-1 headers only (gcp-a3-tcpx's nccl.h), torch 2.11", F, all(ncclGit, cuda("13.0"), nccl("2.27.3-1"), torch("2.11.0"),
			ncclMake("sh", "-c", `make -C src BUILDDIR="$DESTDIR$PREFIX" "$DESTDIR$PREFIX/include/nccl.h"`)), ""},
		{"R53", "NCCL 2.27.3-1 from git, no torch on the build host", F, all(ncclLib, nccl("2.27.3-1"), torch("")), "/warn?"},

		// R3: the layout, from the build's header when recorded, else from a release's version
		{"R3", "v1.2.1 on 3.5.19-1", P, deepepAt(c9af0e0d), "qp-layout/error"},
		{"R3", "EPv2 on 3.5.19-1", P, deepepAt(cB306af0), "epv2-legacy/warn"},
		{"R3", "29d31c0 on 3.5.19-1", P, nil, ""},
		{"R3", "v1.2.1 on the 3.4.5 release tag", P, all(deepepAt(c9af0e0d), nvshmem345Tag), ""},
		{"R3", "v1.2.1 on the 3.4.5 archive", P, all(deepepAt(c9af0e0d), nvshmemArchive("3.4.5")), ""},
		{"R3", "v1.2.1 on NVSHMEM main (calls itself 3.5.0, has _v2): undecided before the build", P, all(deepepAt(c9af0e0d), nvshmemMain), "qp-layout/warn?"},
		{"R3", "v1.2.1 on a-szegel's devel tree (3.5.20+devel, no release): undecided before the build", P, all(deepepAt(c9af0e0d), nvshmemGit("3.5.20+devel.b03fa74", "https://github.com/a-szegel/NVSHMEM", "b03fa743a088ea358daa04effd3e990c8e61df17")), "qp-layout/warn?"},
		{"R3", "v1.2.1 on NVSHMEM main, the build read _v2", H, all(deepepAt(c9af0e0d), nvshmemMain, built("v2")), "qp-layout/error"},
		{"R3", "v1.2.1 on NVSHMEM main, the build read _v1", H, all(deepepAt(c9af0e0d), nvshmemMain, built("v1")), ""},
		{"R3", "v1.2.1 on the 3.5.19-1 release, the build read _v1: the header wins", H, all(deepepAt(c9af0e0d), built("v1")), ""},
		{"R3", "v1.2.1 on the 3.4.5 archive, the build read _v2: the header wins", H, all(deepepAt(c9af0e0d), nvshmemArchive("3.4.5"), built("v2")), "qp-layout/error"},
		{"R3", "EPv2 on NVSHMEM main, the build read _v2", H, all(deepepAt(cB306af0), nvshmemMain, built("v2")), "epv2-legacy/warn"},
		{"R3", "EPv2 on NVSHMEM main, undecided before the build", P, all(deepepAt(cB306af0), nvshmemMain), "epv2-legacy/warn?"},
		{"R3", "EPv2 on the 3.4.5 archive", P, all(deepepAt(cB306af0), nvshmemArchive("3.4.5")), ""},
		{"R3", "EPv2 on the 3.4.5 archive, the build read _v2", H, all(deepepAt(cB306af0), nvshmemArchive("3.4.5"), built("v2")), "epv2-legacy/warn"},

		// R14: the name filter is IBGDA's and IBDEVX's, and only before 3.5.19
		{"R14", "gcp-b200 on 3.5.19-1 without HCA prefix: every name is accepted", P, all(recipe("gcp-b200"), env("NVSHMEM_HCA_PREFIX", "")), ""},
		{"R14", "gcp-b200 on 3.4.5, IBGDA, no prefix", P, all(recipe("gcp-b200"), env("NVSHMEM_HCA_PREFIX", ""), nvshmemArchive("3.4.5")), "gcp-names/warn"},
		{"R14", "gcp-b200 on 3.4.5, IBDEVX, no prefix", P, all(recipe("gcp-b200"), env("NVSHMEM_HCA_PREFIX", ""), nvshmemArchive("3.4.5"), env("NVSHMEM_IB_ENABLE_IBGDA", ""), env("NVSHMEM_REMOTE_TRANSPORT", "IBDEVX")), "gcp-names/warn"},
		{"R14", "gcp-b200 on 3.4.5, IBRC only, no prefix", P, all(recipe("gcp-b200"), env("NVSHMEM_HCA_PREFIX", ""), nvshmemArchive("3.4.5"), env("NVSHMEM_IB_ENABLE_IBGDA", "")), ""},
		{"R14", "gcp-b200 on 3.4.5, IBGDA, prefix set", P, all(recipe("gcp-b200"), env("NVSHMEM_HCA_PREFIX", "rocep"), nvshmemArchive("3.4.5")), ""},
		{"R14", "another recipe on 3.4.5, IBGDA, no prefix", P, all(env("NVSHMEM_HCA_PREFIX", ""), nvshmemArchive("3.4.5")), ""},
		{"R14", "rocep prefix on 3.3.24, IBRC only", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.24"), env("NVSHMEM_HCA_PREFIX", "rocep"), env("NVSHMEM_IB_ENABLE_IBGDA", "")), ""},
		{"R14", "rocep prefix on 3.3.24, IBDEVX", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.24"), env("NVSHMEM_HCA_PREFIX", "rocep"), env("NVSHMEM_IB_ENABLE_IBGDA", ""), env("NVSHMEM_REMOTE_TRANSPORT", "IBDEVX")), "prefix-needs-3.4.5/error"},
		{"R14", "host NICs rocep*, no prefix, IBGDA on 3.4.5", H, all(host("ib.name-prefix", "rocep"), env("NVSHMEM_HCA_PREFIX", ""), nvshmemArchive("3.4.5")), "host-names/error"},
		{"R14", "host NICs rocep*, no prefix, IBDEVX on 3.4.5", H, all(host("ib.name-prefix", "rocep"), env("NVSHMEM_HCA_PREFIX", ""), nvshmemArchive("3.4.5"), env("NVSHMEM_IB_ENABLE_IBGDA", ""), env("NVSHMEM_REMOTE_TRANSPORT", "IBDEVX")), "host-names/error"},
		{"R14", "host NICs rocep*, no prefix, NVSHMEM 3.5.19-1 accepts every name", H, all(host("ib.name-prefix", "rocep"), env("NVSHMEM_HCA_PREFIX", "")), ""},
		{"R14", "ibrc-dualport on rocep* NICs: IBRC has no name filter", H, all(ibrc, host("ib.name-prefix", "rocep")), ""},
		{"R14", "host mlx5, no prefix, IBGDA on 3.4.5", H, all(env("NVSHMEM_HCA_PREFIX", ""), nvshmemArchive("3.4.5")), ""},
		{"R14", "host rocep with prefix, IBGDA on 3.4.5", H, all(host("ib.name-prefix", "rocep"), env("NVSHMEM_HCA_PREFIX", "rocep"), nvshmemArchive("3.4.5")), ""},
		{"R14", "no RDMA devices, IBGDA on 3.4.5, no prefix", H, all(env("NVSHMEM_HCA_PREFIX", ""), nvshmemArchive("3.4.5"), host("ib.link-layer", "none"), host("ib.driver", ""), host("ib.name-prefix", "")), ""},

		// R18: the 2.22 finding is internode only
		{"R18", "NCCL 2.22 on one node (the wheel, no remote transport)", P, all(single, nccl("2.22.3-1")), ""},
		{"R18", "NCCL 2.22, the wheel, runtime IBGDA=true", P, all(single, nccl("2.22.3-1"), env("NVSHMEM_IB_ENABLE_IBGDA", "true")), "runtime-connect/warn"},
		{"R18", "NCCL 2.22, the wheel, IBGDA=0", P, all(single, nccl("2.22.3-1"), env("NVSHMEM_IB_ENABLE_IBGDA", "0")), ""},
		{"R18", "NCCL 2.22, the wheel, NVSHMEM_REMOTE_TRANSPORT=ucx", P, all(single, nccl("2.22.3-1"), env("NVSHMEM_REMOTE_TRANSPORT", "ucx")), "runtime-connect/warn"},
		{"R18", "NCCL 2.22, the wheel, NVSHMEM_REMOTE_TRANSPORT=NONE", P, all(single, nccl("2.22.3-1"), env("NVSHMEM_REMOTE_TRANSPORT", "NONE")), ""},
		{"R18", "NCCL 2.22, IBGDA built only", P, all(nccl("2.22.3-1"), env("NVSHMEM_IB_ENABLE_IBGDA", ""), option("NVSHMEM_IBRC_SUPPORT", "0")), "runtime-connect/warn"},
		{"R18", "NCCL 2.22, IBRC built only", P, all(nccl("2.22.3-1"), env("NVSHMEM_IB_ENABLE_IBGDA", ""), option("NVSHMEM_IBGDA_SUPPORT", "0")), "runtime-connect/warn"},
		{"R18", "NCCL 2.22, libfabric built only", P, all(efa, nccl("2.22.3-1"), env("NVSHMEM_REMOTE_TRANSPORT", "")), "runtime-connect/warn"},
		{"R18", "NCCL 2.22, source build without IB or libfabric", P, all(single, nvshmemArchive("3.4.5"), nccl("2.22.3-1"), option("NVSHMEM_IBGDA_SUPPORT", "0"), option("NVSHMEM_IBRC_SUPPORT", "0")), ""},

		// R24: the built side by layout, the loaded side by release version
		{"R24", "built 3.4.5, loads 3.5.19", H, nvshmemArchive("3.4.5"), "built-before-loaded-after/error"},
		{"R24", "built 3.5.19-1, loads torch's 3.4.5", H, host("nvshmem.loaded-version", "3.4.5"), "built-after-loaded-before/error"},
		{"R24", "v1.2.1, loads 3.5.19", H, all(deepepAt(c9af0e0d), nvshmemArchive("3.4.5")), "old-deepep-loaded-after/error"},
		{"R24", "built 3.5.19-1, loads 3.5.19", H, nil, ""},
		{"R24", "built 3.4.5, loads 3.4.5", H, all(nvshmemArchive("3.4.5"), host("nvshmem.loaded-version", "3.4.5")), ""},
		{"R24", "v1.2.1 on 3.4.5, loads 3.4.5", H, all(deepepAt(c9af0e0d), nvshmemArchive("3.4.5"), host("nvshmem.loaded-version", "3.4.5")), ""},
		{"R24", "EPv2, loads 3.4.5", H, all(deepepAt(cB306af0), host("nvshmem.loaded-version", "3.4.5")), ""},
		{"R24", "EPv2 built 3.4.5, loads 3.5.19: the legacy kernels", H, all(deepepAt(cB306af0), nvshmemArchive("3.4.5")), "epv2-legacy-loaded-after/warn"},
		{"R24", "built from NVSHMEM main (3.5.0, _v2 recorded), loads torch's 3.4.5", H, all(nvshmemMain, built("v2"), host("nvshmem.loaded-version", "3.4.5")), "built-after-loaded-before/error"},
		{"R24", "built from NVSHMEM main (3.5.0, _v2 recorded), loads 3.5.19", H, all(nvshmemMain, built("v2")), ""},
		{"R24", "built from NVSHMEM main (_v1 recorded), loads 3.5.19", H, all(nvshmemMain, built("v1")), "built-before-loaded-after/error"},
		{"R24", "built 3.5.19-1 but _v1 recorded, loads 3.5.19", H, built("v1"), "built-before-loaded-after/error"},
		{"R24", "built 3.4.5 but _v2 recorded, loads 3.4.5", H, all(nvshmemArchive("3.4.5"), built("v2"), host("nvshmem.loaded-version", "3.4.5")), "built-after-loaded-before/error"},
		{"R24", "built from NVSHMEM main, nothing recorded, loads 3.5.19", H, nvshmemMain, "built-before-loaded-after/warn?"},
		{"R24", "built from NVSHMEM main, nothing recorded, loads 3.4.5", H, all(nvshmemMain, host("nvshmem.loaded-version", "3.4.5")), "built-after-loaded-before/warn?"},
		{"R24", "torch 2.10 loads its 3.4.5 before the built 3.5.19-1", P, env("LD_PRELOAD", ""), "torch-wheel-v1/error"},
		{"R24", "torch 2.12 (cu13 3.4.5) before the built 3.5.19-1", P, all(env("LD_PRELOAD", ""), torch("2.12.0+cu130")), "torch-wheel-v1/error"},
		{"R24", "torch 2.14 before the built 3.5.19-1", P, all(env("LD_PRELOAD", ""), torch("2.14.1+cu130")), "torch-wheel-v1/error"},
		{"R24", "torch 2.15 (3.7.2) with the built 3.5.19-1: the same layout", P, all(env("LD_PRELOAD", ""), torch("2.15.0+cu130")), ""},
		{"R24", "torch 2.15 (3.7.2) before the built 3.4.5: the reverse case", P, all(env("LD_PRELOAD", ""), torch("2.15.0+cu130"), nvshmemArchive("3.4.5")), "torch-wheel-v2/error"},
		{"R24", "torch 2.15, the built 3.4.5 preloaded", P, all(torch("2.15.0+cu130"), nvshmemArchive("3.4.5")), ""},
		{"R24", "torch 2.16, built 3.4.5: its pin is not read yet", P, all(env("LD_PRELOAD", ""), torch("2.16.0+cu130"), nvshmemArchive("3.4.5")), ""},
		{"R24", "torch 2.15, built from NVSHMEM main: undecided before the build", P, all(env("LD_PRELOAD", ""), torch("2.15.0+cu130"), nvshmemMain), "torch-wheel-v2/warn?"},
		{"R24", "torch 2.10, built from NVSHMEM main: undecided before the build", P, all(env("LD_PRELOAD", ""), nvshmemMain), "torch-wheel-v1/warn?"},
		{"R24", "torch 2.10, built from NVSHMEM main, _v2 recorded", P, all(env("LD_PRELOAD", ""), nvshmemMain, built("v2")), "torch-wheel-v1/error"},
		{"R24", "torch 2.15, built from NVSHMEM main, _v1 recorded", P, all(env("LD_PRELOAD", ""), torch("2.15.0+cu130"), nvshmemMain, built("v1")), "torch-wheel-v2/error"},
		{"R24", "torch 2.15, the 3.4.5 wheel", P, all(single, torch("2.15.0+cu130")), ""},
		{"R24", "torch 2.15, EPv2, built 3.4.5", P, all(env("LD_PRELOAD", ""), torch("2.15.0+cu130"), nvshmemArchive("3.4.5"), deepepAt(cB306af0)), ""},
		{"R24", "torch 2.15, v1.2.1, built 3.4.5", P, all(env("LD_PRELOAD", ""), torch("2.15.0+cu130"), nvshmemArchive("3.4.5"), deepepAt(c9af0e0d)), ""},
		{"R24", "torch 2.9 without preload, EPv2", P, all(env("LD_PRELOAD", ""), torch("2.9.1+cu128"), deepepAt(cB306af0)), ""},
		{"R24", "torch 2.8 without preload", P, all(env("LD_PRELOAD", ""), torch("2.8.0+cu128")), ""},
		{"R24", "torch 2.10, built 3.4.5, no preload", P, all(env("LD_PRELOAD", ""), nvshmemArchive("3.4.5")), ""},
		{"R24", "torch 2.10, the 3.5.19 wheel", P, all(single, nvshmemWheel("3.5.19")), ""},
		{"R24", "torch 2.10, v1.2.1", P, all(env("LD_PRELOAD", ""), deepepAt(c9af0e0d)), ""},
		{"R24", "torch 2.10 with preload", P, nil, ""},
		{"R24", "torch 2.10, built 3.5.19-1 from an archive, no preload", P, all(env("LD_PRELOAD", ""), nvshmemArchive("3.5.19-1")), "torch-wheel-v1/error"},
		{"R24", "torch 2.10 before NVIDIA's prebuilt 3.7.1, no preload", P, all(env("LD_PRELOAD", ""), nvshmemPrebuilt("3.7.1")), "torch-wheel-v1/error"},
		{"R24", "torch 2.15 (3.7.2) before a prebuilt 3.4.5, no preload", P, all(env("LD_PRELOAD", ""), torch("2.15.0+cu130"), nvshmemPrebuilt("3.4.5")), "torch-wheel-v2/error"},

		// R25: internode low-latency mode only
		{"R25", "29d31c0 on the 3.7.0 wheel, low-latency across 16 ranks", P, all(single, nvshmemWheel("3.7.0"), lowLatency("1", "16")), "/warn"},
		{"R25", "29d31c0 on the 3.7.0 wheel, low-latency across 9 ranks", P, all(single, nvshmemWheel("3.7.0"), lowLatency("1", "9")), "/warn"},
		{"R25", "29d31c0 on the 3.7.0 wheel, low-latency on one node of 8", P, all(single, nvshmemWheel("3.7.0"), lowLatency("1", "8")), ""},
		{"R25", "29d31c0 on the 3.7.0 wheel, normal mode across 16 ranks", P, all(single, nvshmemWheel("3.7.0"), lowLatency("0", "16")), ""},
		{"R25", "29d31c0 on the 3.7.0 wheel, the runtime says nothing", P, all(single, nvshmemWheel("3.7.0")), "/warn?"},
		{"R25", "EPv2 on 3.7.0, low-latency across 32 ranks", P, all(epv2, nvshmemWheel("3.7.0"), lowLatency("1", "32")), "/warn"},
		{"R25", "29d31c0 on 3.5.19-1", P, lowLatency("1", "16"), ""},
		{"R25", "c6051f3 (before df4debe) on 3.7.0", P, all(deepepAt(cC6051f3), nvshmemWheel("3.7.0"), lowLatency("1", "16")), ""},
		{"R25", "df4debe on 3.7.0", P, all(deepepAt(cDf4debe), nvshmemWheel("3.7.0"), lowLatency("1", "16")), "/warn"},

		{"R28", "no interface named has an IPv4 address on the node", H, host("net.bootstrap-ifname", "no-address"), "interface-down/error"},
		{"R28", "the interface named is missing on the node", H, host("net.bootstrap-ifname", "absent"), "interface-down/error"},
		{"R28", "an interface named has an IPv4 address", H, nil, ""},

		{"R30", "MNNVL without an IMEX channel, DeepEP v1", H, host("gpu.fabric", "yes"), "no-channel/error"},
		{"R30", "MNNVL without an IMEX channel, EPv2 falls back silently", H, all(epv2, host("gpu.fabric", "yes")), "no-channel-silent/warn"},

		// R41: the preloaded NCCL runs torch's communicator (measured)
		{"R41", "NCCL 2.28.3-1 from git beside torch 2.11, not preloaded", F, all(ncclLib, nccl("2.28.3-1"), torch("2.11.0+cu130")), "/warn"},
		{"R41", "NCCL 2.28.3-1 from git beside torch 2.11, preloaded (measured: torch calls it)", F, all(ncclLib, nccl("2.28.3-1"), torch("2.11.0+cu130"), env("LD_PRELOAD", "{{nccl.prefix}}/lib/libnccl.so.2")), ""},
		{"R41", "NCCL 2.30.7-1 from git beside torch 2.11, installed as torch's wheel (python-wheel)", F, all(ncclLib, nccl("2.30.7-1"), torch("2.11.0+cu130"), pkg("nccl", "nvidia-nccl-cu13")), ""},
		{"R41", "NCCL 2.28.3-1 from an archive beside torch 2.11", F, all(ncclLib, nccl("2.28.3-1"), ncclFrom("archive"), torch("2.11.0+cu130")), "/warn"},
		{"R41", "torch's NCCL wheel, torch 2.11", F, all(ncclLib, nccl("2.28.9"), ncclFrom("python"), torch("2.11.0+cu130")), ""},
		{"R41", "NCCL from git beside torch 2.10: not measured", F, all(ncclLib, nccl("2.28.3-1")), ""},
		{"R41", "NCCL from git, only nccl.h generated (gcp-a3-tcpx), torch 2.11", F, all(ncclGit, cuda("13.0"), nccl("2.21.5-1"), torch("2.11.0+cu130"),
			ncclMake("sh", "-c", `make -C src BUILDDIR="$DESTDIR$PREFIX" "$DESTDIR$PREFIX/include/nccl.h"`)), ""},

		{"R42", "EPv2, libmlx5 without MLX5_1.25", H, all(epv2, host("rdma.libmlx5-mlx5-1.25", "no")), "/error"},
		{"R42", "EPv2, libmlx5 without MLX5_1.25, EP_DISABLE_GIN=1", H, all(epv2, host("rdma.libmlx5-mlx5-1.25", "no"), env("EP_DISABLE_GIN", "1")), ""},
		{"R42", "EPv2, libmlx5 without MLX5_1.25, EP_DISABLE_GIN=0", H, all(epv2, host("rdma.libmlx5-mlx5-1.25", "no"), env("EP_DISABLE_GIN", "0")), "/error"},
		{"R42", "EPv2, libmlx5 with MLX5_1.25", H, epv2, ""},
		{"R42", "EPv2, no libmlx5", H, all(epv2, host("rdma.libmlx5-mlx5-1.25", "absent")), ""},
		{"R42", "DeepEP v1, libmlx5 without MLX5_1.25", H, host("rdma.libmlx5-mlx5-1.25", "no"), ""},

		{"R43", "EPv2, the job loads NCCL 2.28.9 (downgraded)", H, all(epv2, nccl("2.28.9")), "/error"},
		{"R43", "EPv2, the job loads NCCL 2.30.4", H, epv2, ""},
		{"R43", "DeepEP v1, NCCL 2.28.9", H, nccl("2.28.9"), ""},

		{"R44", "EPv2 JIT for sm_100 with CUDA 13.0", P, all(epv2, arch("sm_100")), "build-cuda/warn"},
		{"R44", "EPv2 JIT for sm_100a with CUDA 13.0", P, all(epv2, arch("sm_100a")), "build-cuda/warn"},
		{"R44", "EPv2 JIT for sm_103 with CUDA 13.0", P, all(epv2, arch("sm_103")), "build-cuda/warn"},
		{"R44", "EPv2 JIT for sm_103a with CUDA 12.9", P, all(epv2, arch("sm_103a"), cuda("12.9")), "build-cuda/warn"},
		{"R44", "EPv2 JIT for sm_100 with CUDA 13.1", P, all(epv2, arch("sm_100"), cuda("13.1")), ""},
		{"R44", "EPv2 JIT for sm_90", P, epv2, ""},
		{"R44", "DeepEP v1 for sm_100 with CUDA 12.9", P, nil, ""},
		{"R44", "EPv2 for sm_100 on a node with nvcc 13.0", H, all(epv2, arch("sm_100"), host("cuda.nvcc-version", "13.0.88")), "node-nvcc/warn"},
		{"R44", "EPv2 for sm_100 on a node with nvcc 13.1", H, all(epv2, arch("sm_100"), cuda("12.9"), host("cuda.nvcc-version", "13.1.80")), ""},

		{"R45", "EPv2 with NCCL_GIN_TYPE=2 (proxy)", P, all(epv2, env("NCCL_GIN_TYPE", "2")), "/warn"},
		{"R45", "EPv2 with NCCL_GIN_TYPE=3", P, all(epv2, env("NCCL_GIN_TYPE", "3")), ""},
		{"R45", "DeepEP v1 with NCCL_GIN_TYPE=2", P, env("NCCL_GIN_TYPE", "2"), ""},

		{"R46", "EPv2 on EFA, efa.ko 2.10.0", H, all(efaGIN, host("efa.version", "2.10.0")), "efa-module/error"},
		{"R46", "EPv2 on EFA, gdrdrv 2.4", H, all(efaGIN, host("gdrdrv.version", "2.4")), "gdrdrv-module/error"},
		{"R46", "EPv2 on EFA, NCCL_GIN_TYPE unset", H, all(efaGIN, env("NCCL_GIN_TYPE", "")), "gin-type/warn"},
		{"R46", "EPv2 on EFA, all there", H, efaGIN, ""},
		{"R46", "EPv2 on mlx5, gdrdrv 2.4", H, all(epv2, host("gdrdrv.version", "2.4")), ""},
		{"R46", "DeepEP v1 on EFA, efa.ko 2.10.0", H, all(efaGIN, deepepAt(c29d31c0), host("efa.version", "2.10.0")), ""},

		{"R47", "v1 normal mode across 16 ranks on 4-GPU nodes", P, all(lowLatency("0", "16"), runtime("gpus-per-node", "4")), "/error"},
		{"R47", "v1 normal mode across 9 ranks on 4-GPU nodes", P, all(lowLatency("0", "9"), runtime("gpus-per-node", "4")), "/error"},
		{"R47", "v1 normal mode across 16 ranks on 8-GPU nodes", P, all(lowLatency("0", "16"), runtime("gpus-per-node", "8")), ""},
		{"R47", "v1 normal mode on one node of 4", P, all(lowLatency("0", "4"), runtime("gpus-per-node", "4")), ""},
		{"R47", "v1 low-latency across 16 ranks on 4-GPU nodes", P, all(lowLatency("1", "16"), runtime("gpus-per-node", "4")), ""},
		{"R47", "v1 normal mode, GPUs a node not declared", P, lowLatency("0", "16"), "/warn?"},
		{"R47", "v1, the runtime says nothing", P, nil, ""},
		{"R47", "EPv2 normal mode on 4-GPU nodes", P, all(epv2, lowLatency("0", "16"), runtime("gpus-per-node", "4")), ""},

		{"R48", "29d31c0 without patch sets, low-latency, hidden 3000", P, all(patches("deepep"), lowLatency("1", "16"), runtime("hidden", "3000")), "by-commit/error"},
		{"R48", "29d31c0 with PR 466, before the build: the build reads the list", P, all(lowLatency("1", "16"), runtime("hidden", "3000")), ""},
		{"R48", "29d31c0 with PR 466, built: 3000 not compiled in", P, all(lowLatency("1", "16"), runtime("hidden", "3000"), hiddenBuilt("2048,2560,3072,4096,5120,6144,7168,8192")), "compiled/error"},
		{"R48", "a patch set added 3000, built", P, all(lowLatency("1", "16"), runtime("hidden", "3000"), hiddenBuilt("2048,3000,7168")), ""},
		{"R48", "29d31c0 without patch sets, built with 3000 in the list", P, all(patches("deepep"), lowLatency("1", "16"), runtime("hidden", "3000"), hiddenBuilt("2048, 3000")), ""},
		{"R48", "29d31c0 without patch sets, built, normal mode", P, all(patches("deepep"), lowLatency("0", "16"), runtime("hidden", "3000"), hiddenBuilt("2048")), ""},
		{"R48", "29d31c0 normal mode, hidden 3000", P, all(patches("deepep"), lowLatency("0", "16"), runtime("hidden", "3000")), ""},
		{"R48", "29d31c0 low-latency, hidden not declared", P, all(patches("deepep"), lowLatency("1", "16")), ""},
		{"R48", "built, low-latency, hidden not declared", P, all(lowLatency("1", "16"), hiddenBuilt("2048")), ""},
		{"R48", "v1.2.1 (before 29d31c0) low-latency, hidden 3000", P, all(deepepAt(c9af0e0d), lowLatency("1", "16"), runtime("hidden", "3000")), ""},
		{"R48", "EPv2 low-latency, hidden 3000", P, all(epv2, lowLatency("1", "16"), runtime("hidden", "3000")), ""},

		{"R49", "traffic class with IBGDA, before the nodes are read", P, all(env("NVSHMEM_IB_TRAFFIC_CLASS", "106"), host("ib.link-layer", "")), "traffic-class-set/warn?"},
		{"R49", "traffic class with IBGDA on an InfiniBand cluster", P, all(env("NVSHMEM_IB_TRAFFIC_CLASS", "106"), host("ib.link-layer", "InfiniBand")), "traffic-class-set/warn"},
		{"R49", "traffic class with IBGDA on RoCE", P, env("NVSHMEM_IB_TRAFFIC_CLASS", "106"), ""},
		{"R49", "traffic class with IBGDA on an InfiniBand node", H, all(env("NVSHMEM_IB_TRAFFIC_CLASS", "106"), host("ib.link-layer", "InfiniBand")), "infiniband/error"},
		{"R49", "traffic class with IBGDA on a RoCE node", H, env("NVSHMEM_IB_TRAFFIC_CLASS", "106"), ""},
		{"R49", "traffic class without IBGDA on an InfiniBand node", H, all(env("NVSHMEM_IB_TRAFFIC_CLASS", "106"), env("NVSHMEM_IB_ENABLE_IBGDA", ""), host("ib.link-layer", "InfiniBand")), ""},
		{"R49", "no traffic class on an InfiniBand node", H, host("ib.link-layer", "InfiniBand"), ""},

		{"R50", "IBRC on 3.4.5, pkey index 0 not the default", H, all(nvshmemArchive("3.4.5"), env("NVSHMEM_IB_ENABLE_IBGDA", ""), host("ib.pkey0", "other")), "/error"},
		{"R50", "IBRC on 3.7.0, pkey index 0 not the default", H, all(nvshmemArchive("3.7.0"), env("NVSHMEM_IB_ENABLE_IBGDA", ""), host("ib.pkey0", "other")), ""},
		{"R50", "IBGDA on 3.4.5, pkey index 0 not the default", H, all(nvshmemArchive("3.4.5"), host("ib.pkey0", "other")), ""},
		{"R50", "IBRC on 3.4.5, the default pkey at index 0", H, all(nvshmemArchive("3.4.5"), env("NVSHMEM_IB_ENABLE_IBGDA", "")), ""},

		{"R51", "NCCL's = in NVSHMEM_HCA_LIST", P, env("NVSHMEM_HCA_LIST", "=mlx5_0:1,mlx5_1:1"), "nccl-syntax/error"},
		{"R51", "= on a later entry", P, env("NVSHMEM_HCA_LIST", "mlx5_0:1, =mlx5_1:1"), "nccl-syntax/error"},
		{"R51", "NVSHMEM's syntax", P, env("NVSHMEM_HCA_LIST", "mlx5_0:1,mlx5_1:1"), ""},
		{"R51", "a virtual function in use", H, host("ib.vf", "yes"), "virtual-function/warn"},
		{"R51", "physical functions", H, nil, ""},

		{"R52", "3.2.5-1 from an archive, epbuild's Release", P, all(ibrc, option("CMAKE_BUILD_TYPE", "")), "/error"},
		{"R52", "3.2.5-1 from git, Release", P, all(ibrc, option("CMAKE_BUILD_TYPE", "Release"), nvshmemGit("3.2.5-1", "https://github.com/valgur/NVSHMEM-archive", "6d8ab15b5d355d8d5fa5e9664962784de412dd9d")), "/error"},
		{"R52", "3.2.5-1 from git with release", P, all(ibrc, nvshmemGit("3.2.5-1", "https://github.com/valgur/NVSHMEM-archive", "6d8ab15b5d355d8d5fa5e9664962784de412dd9d")), ""},
		{"R52", "3.2.5-1 with release (ibrc-dualport)", P, all(ibrc, option("CMAKE_BUILD_TYPE", "release")), ""},
		{"R52", "3.3.9 from an archive, Release", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.9")), ""},
		{"R52", "the 3.2.5 wheel", P, all(single, nvshmemWheel("3.2.5")), ""},
	}
	// every hidden size 29d31c0 compiles: one row each, so that none drops from R48 unseen
	for _, h := range []string{"2048", "2560", "3072", "4096", "5120", "6144", "7168", "8192"} {
		rows = append(rows, ruleCase{"R48", "29d31c0 low-latency, hidden " + h, P, all(patches("deepep"), lowLatency("1", "16"), runtime("hidden", h)), ""})
	}
	return rows
}

// outcome is what a rule says about a row: its findings' "case/severity" (with "?" for an
// undecided one), sorted, comma-separated.
func outcome(fs []Finding, id string) string {
	var got []string
	for _, x := range fs {
		if x.ID != id {
			continue
		}
		s := x.Case + "/" + string(x.Severity)
		if x.Unknown {
			s += "?"
		}
		got = append(got, s)
	}
	sort.Strings(got)
	return strings.Join(got, ",")
}

func sortedWant(w string) string {
	if w == "" {
		return ""
	}
	parts := strings.Split(w, ",")
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func TestRulesTable(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	// real git answers each (mark, commit) pair once; rows ask the same pairs again
	anc := &memoAncestry{a: deepepFixture(t), m: map[[3]string]memoAnswer{}}
	ctx := context.Background()
	trig, miss := map[string]int{}, map[string]int{}
	fired := map[string]bool{}
	for _, tc := range ruleTable() {
		t.Run(tc.id+"/"+tc.name, func(t *testing.T) {
			f := baseFacts()
			if tc.change != nil {
				tc.change(&f)
			}
			fs, err := Evaluate(ctx, rules, f, tc.stage, anc)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := outcome(fs, tc.id), sortedWant(tc.want); got != want {
				t.Fatalf("%s at %s: got %q, want %q\nfindings: %s", tc.id, tc.stage, got, want, describe(fs))
			}
			for _, x := range fs {
				if x.ID == tc.id && (x.Stage != tc.stage || x.Title == "" || x.Message == "" || len(x.Sources) == 0 || len(x.Because) == 0 || x.Fix == nil) {
					t.Errorf("finding lacks stage, title, message, sources, because or fix: %+v", x)
				}
			}
		})
		if tc.want != "" {
			trig[tc.id]++
			for _, w := range strings.Split(tc.want, ",") {
				c, _, _ := strings.Cut(w, "/")
				fired[tc.id+"/"+c] = true
			}
		} else {
			miss[tc.id]++
		}
	}
	ids := rules.IDs()
	for _, i := range append(seq(1, 34), 40) {
		if id := fmt.Sprintf("R%d", i); !slices.Contains(ids, id) {
			t.Errorf("rules.yaml lacks %s", id)
		}
	}
	for _, id := range ids {
		if trig[id] == 0 || miss[id] == 0 {
			t.Errorf("rule %s needs a triggering and a non-triggering row in ruleTable (has %d and %d)", id, trig[id], miss[id])
		}
	}
	// every case of every rule is exercised by a triggering row
	for _, r := range rules.All() {
		for _, c := range r.Cases {
			if !fired[r.ID+"/"+c.Name] {
				t.Errorf("case %s/%s has no triggering row", r.ID, c.Name)
			}
		}
	}
}

// seq is lo, lo+1, ..., hi.
func seq(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

type memoAnswer struct {
	ok  bool
	err error
}

// memoAncestry remembers another Ancestry's answers.
type memoAncestry struct {
	a Ancestry
	m map[[3]string]memoAnswer
}

func (c *memoAncestry) IsAncestor(ctx context.Context, repo, ancestor, commit string) (bool, error) {
	k := [3]string{repo, ancestor, commit}
	if r, ok := c.m[k]; ok {
		return r.ok, r.err
	}
	ok, err := c.a.IsAncestor(ctx, repo, ancestor, commit)
	c.m[k] = memoAnswer{ok, err}
	return ok, err
}

func describe(fs []Finding) string {
	var parts []string
	for _, f := range fs {
		parts = append(parts, fmt.Sprintf("%s/%s(%s,unknown=%v)", f.ID, f.Case, f.Severity, f.Unknown))
	}
	return strings.Join(parts, " ")
}

// A commit no ancestry source knows makes the rule unknown, reported as a warning.
func TestUnknownCommitWarns(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	f := baseFacts()
	comp(&f, "deepep").Commit = strings.Repeat("ab", 20)
	for name, anc := range map[string]Ancestry{"git fixture": deepepFixture(t), "no source": nil, "empty chain": ChainAncestry()} {
		fs, err := Evaluate(context.Background(), rules, f, StagePlan, anc)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var r3 *Finding
		for i := range fs {
			if fs[i].ID == "R3" && fs[i].Case == "qp-layout" {
				r3 = &fs[i]
			}
		}
		if r3 == nil || !r3.Unknown || r3.Severity != SeverityWarn || !strings.HasPrefix(r3.Message, "unknown") {
			t.Fatalf("%s: R3 on an unknown commit should be an unknown warning, got %+v", name, r3)
		}
		if HasErrors(fs) {
			t.Errorf("%s: an undecided rule must not be an error: %s", name, describe(fs))
		}
	}
}

// A failing ancestry source (not a missing commit) stops the evaluation with an error.
func TestAncestryFailureIsAnError(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	broken := deepepFixture(t)
	broken.dir = t.TempDir() // not a repository
	_, err = Evaluate(context.Background(), rules, baseFacts(), StagePlan, broken)
	if err == nil || !strings.Contains(err.Error(), "deepep") {
		t.Fatalf("want an error naming the component, got %v", err)
	}
}

// The chain falls through to the next source only for an unknown commit.
func TestChainAncestry(t *testing.T) {
	h, err := LoadHistory()
	if err != nil {
		t.Fatal(err)
	}
	fx := deepepFixture(t)
	ctx := context.Background()
	// a commit only the fixture has: the history does not know it, the chain does
	only := fx.alias[c29d31c0]
	if _, err := h.IsAncestor(ctx, deepepURL, cB6ce310, only); err == nil {
		t.Fatal("the history should not know a fixture commit")
	}
	fxOnly := &gitAncestry{repoKey: fx.repoKey, dir: fx.dir}
	ok, err := ChainAncestry(h, fxOnly).IsAncestor(ctx, deepepURL, fx.alias[cB6ce310], only)
	if err != nil || !ok {
		t.Fatalf("chain: %v %v", ok, err)
	}
	ok, err = ChainAncestry(fxOnly, h).IsAncestor(ctx, deepepURL+".git", cB306af0, c29d31c0)
	if err != nil || ok {
		t.Fatalf("chain through to history: %v %v", ok, err)
	}
}

func TestFindingsOrderAndJSONShape(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	f := baseFacts()
	all(deepepAt(c9af0e0d), nccl("2.22.3-1"))(&f)
	fs, err := Evaluate(context.Background(), rules, f, StagePlan, deepepFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) < 3 || fs[0].Severity != SeverityError || fs[len(fs)-1].Severity == SeverityError {
		t.Fatalf("findings not most severe first: %s", describe(fs))
	}
	ids := IDs(fs)
	if !slices.Contains(ids, "R3") || !slices.Contains(ids, "R4") || !slices.Contains(ids, "R18") {
		t.Errorf("want R3, R4, R18 among %v", ids)
	}
}

// Host conditions without a probed host are unknown, never silently false.
func TestHostFactsUnknownWithoutHost(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	f := baseFacts()
	f.Host = nil
	fs, err := Evaluate(context.Background(), rules, f, StageHost, deepepFixture(t))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range fs {
		if !x.Unknown {
			t.Errorf("%s/%s decided without host facts", x.ID, x.Case)
		}
		n++
	}
	if n == 0 {
		t.Fatal("no host rule reported as unknown")
	}
}
