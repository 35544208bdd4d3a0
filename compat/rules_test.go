package compat

import (
	"context"
	"fmt"
	"slices"
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
			{Name: "nccl", Version: "2.21.5-1", Source: "python"},
		},
		Toolchain: Toolchain{CUDA: "12.9", Torch: "2.10.0+cu129", Python: "3.12", Arch: []string{"sm_100"},
			Require: []string{"rdma-core-data-direct"}, Present: []string{"rdma-core", "rdma-core-data-direct"}},
		Env: map[string]string{
			"NVSHMEM_IB_ENABLE_IBGDA": "1", "NVSHMEM_IBGDA_NIC_HANDLER": "gpu", "NVSHMEM_HCA_PREFIX": "mlx5",
			"LD_PRELOAD": "{{nvshmem.prefix}}/lib/libnvshmem_host.so.3",
		},
		Host: map[string]string{
			"gdrdrv": "loaded", "peermem": "nvidia_peermem", "regkey.PeerMappingOverride": "1", "regkey.EnableStreamMemOPs": "1",
			"ib.link-layer": "Ethernet", "ib.driver": "mlx5_core", "ib.name-prefix": "mlx5", "kernel": "6.14.0",
			"doca-ofed": "3.2.1", "nvshmem.host-libs-mapped": "1",
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

func nvshmemWheel(v string) mut {
	return func(f *Facts) {
		c := comp(f, "nvshmem")
		c.Version, c.Source, c.Commit, c.Repo, c.Options = v, "python", "", "", nil
	}
}

func patches(component string, sets ...string) mut {
	return func(f *Facts) { comp(f, component).Patches = sets }
}

func option(k, v string) mut {
	return func(f *Facts) {
		if v == "" {
			delete(comp(f, "nvshmem").Options, k)
		} else {
			comp(f, "nvshmem").Options[k] = v
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

func host(k, v string) mut { return func(f *Facts) { f.Host[k] = v } }

func tool(fn func(*Toolchain)) mut { return func(f *Facts) { fn(&f.Toolchain) } }

func nccl(v string) mut { return func(f *Facts) { comp(f, "nccl").Version = v } }

func recipe(n string) mut { return func(f *Facts) { f.Recipe = n } }

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
	env("NVSHMEM_IB_ENABLE_IBGDA", ""), env("NVSHMEM_IBGDA_NIC_HANDLER", ""), env("NVSHMEM_HCA_PREFIX", ""),
	env("NVSHMEM_REMOTE_TRANSPORT", "libfabric"), env("NVSHMEM_LIBFABRIC_PROVIDER", "efa"), env("FI_EFA_ENABLE_SHM_TRANSFER", "0"),
	host("ib.driver", "efa"), host("ib.name-prefix", "rdmap"))

// ibrc is the ibrc-dualport stack: DeepEP a84a248, NVSHMEM 3.2.5-1 patched, GDRCopy.
var ibrc = all(deepepAt(cA84a248), patches("deepep", "ibrc-dualport-deepep"), nvshmemArchive("3.2.5-1"),
	patches("nvshmem", "ibrc-dualport-nvshmem"), option("NVSHMEM_USE_GDRCOPY", "1"), option("CMAKE_CUDA_ARCHITECTURES", "90"),
	option("NVSHMEM_BUILD_PYTHON_LIB", ""), buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", "9.0"),
	tool(func(t *Toolchain) { t.Arch = []string{"sm_90"}; t.Require = []string{"rdma-core", "gdrcopy"} }),
	env("NVSHMEM_IB_ENABLE_IBGDA", ""), env("NVSHMEM_IBGDA_NIC_HANDLER", ""), env("NVSHMEM_HCA_PREFIX", ""),
	host("peermem", "memory_peers"))

type ruleCase struct {
	id, name string
	stage    Stage
	change   mut
	trigger  bool
	// wantCase and wantSev, when set, are the case and severity the finding must have.
	wantCase string
	wantSev  Severity
}

func ruleTable() []ruleCase {
	P, F, H := StagePlan, StagePreflight, StageHost
	return []ruleCase{
		{"R1", "3.2.5 era on 3.3.24", P, all(ibrc, nvshmemArchive("3.3.24"), patches("nvshmem")), true, "deepep-3.2.5-era", SeverityError},
		{"R1", "ibrc patch on 3.5.19", P, all(ibrc, nvshmemVer("3.5.19-1")), true, "patch-for-3.2.5-1-only", SeverityError},
		{"R1", "3.1.7 era on 3.2.5-1", P, all(ibrc, deepepAt(cEbfe47e)), true, "deepep-3.1.7-era", SeverityError},
		{"R1", "ibrc-dualport as pinned", P, ibrc, false, "", ""},
		{"R1", "DeepEP at b6ce310 on stock 3.3.24", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.24")), false, "", ""},

		{"R2", "v1.2.1 on 3.2.5-1", P, all(deepepAt(c9af0e0d), nvshmemArchive("3.2.5-1")), true, "nvshmem-too-old", SeverityError},
		{"R2", "29d31c0 on patched NVSHMEM", P, patches("nvshmem", "ibrc-dualport-nvshmem"), true, "nvshmem-patched", SeverityError},
		{"R2", "e995aa2 on patched 3.2.5-1", P, all(ibrc, deepepAt(cE995aa2)), false, "", ""},
		{"R2", "b6ce310 on 3.3.9", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.9")), false, "", ""},

		{"R3", "v1.2.1 on 3.5.19-1", P, deepepAt(c9af0e0d), true, "qp-layout", SeverityError},
		{"R3", "EPv2 on 3.5.19-1", P, deepepAt(cB306af0), true, "epv2-legacy", SeverityWarn},
		{"R3", "29d31c0 on 3.5.19-1", P, nil, false, "", ""},
		{"R3", "v1.2.1 on 3.4.5", P, all(deepepAt(c9af0e0d), nvshmemVer("3.4.5")), false, "", ""},

		{"R4", "v1.2.1 on source 3.3.20", P, all(deepepAt(c9af0e0d), nvshmemArchive("3.3.20")), true, "", SeverityError},
		{"R4", "v1.2.1 on the 3.5.19 wheel", P, all(deepepAt(c9af0e0d), nvshmemWheel("3.5.19")), true, "", SeverityError},
		{"R4", "v1.2.1 on source 3.3.9", P, all(deepepAt(c9af0e0d), nvshmemArchive("3.3.9")), false, "", ""},
		{"R4", "v1.2.1 on the 3.4.5 wheel", P, all(deepepAt(c9af0e0d), nvshmemWheel("3.4.5")), false, "", ""},

		{"R5", "a84a248 on 3.5.19-1", P, deepepAt(cA84a248), true, "", SeverityError},
		{"R5", "441833d on 3.5.19-1", P, deepepAt(c441833d), false, "", ""},
		{"R5", "a84a248 on 3.4.5", P, all(deepepAt(cA84a248), nvshmemVer("3.4.5")), false, "", ""},

		{"R6", "NVSHMEM without IBGDA", P, option("NVSHMEM_IBGDA_SUPPORT", "0"), true, "", SeverityError},
		{"R6", "IBGDA option unset", P, option("NVSHMEM_IBGDA_SUPPORT", ""), true, "", SeverityError},
		{"R6", "efa-aws: shimmed", P, efa, false, "", ""},
		{"R6", "wheel", P, nvshmemWheel(">=3.3.9"), false, "", ""},

		{"R7", "ibrc without GDRCopy", P, all(ibrc, option("NVSHMEM_USE_GDRCOPY", "0")), true, "", SeverityError},
		{"R7", "ibrc with GDRCopy", P, ibrc, false, "", ""},
		{"R7", "3.3.9 without GDRCopy", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.9")), false, "", ""},

		{"R8", "efa without GDRCopy", P, all(efa, option("NVSHMEM_USE_GDRCOPY", "0")), true, "build-gdrcopy", SeverityError},
		{"R8", "efa with SHM transfer", P, all(efa, env("FI_EFA_ENABLE_SHM_TRANSFER", "")), true, "shm-transfer", SeverityError},
		{"R8", "efa host without gdrdrv", H, all(efa, host("gdrdrv", "absent")), true, "gdrdrv", SeverityError},
		{"R8", "efa-aws as pinned", P, efa, false, "", ""},
		{"R8", "efa-aws host with gdrdrv", H, efa, false, "", ""},

		{"R9", "patched NVSHMEM without LD_PRELOAD", P, all(ibrc, env("LD_PRELOAD", "")), true, "", SeverityError},
		{"R9", "patched NVSHMEM preloaded", P, ibrc, false, "", ""},

		{"R10", "NVSHMEM_DIR unset", P, buildEnv("deepep", "NVSHMEM_DIR", ""), true, "nvshmem-dir", SeverityError},
		{"R10", "torch 2.10 without LD_PRELOAD", P, env("LD_PRELOAD", ""), true, "preload", SeverityWarn},
		{"R10", "two NVSHMEMs mapped", H, host("nvshmem.host-libs-mapped", "2"), true, "one-nvshmem-mapped", SeverityError},
		{"R10", "the wheel, nothing set", P, all(nvshmemWheel(">=3.3.9"), buildEnv("deepep", "NVSHMEM_DIR", ""), env("LD_PRELOAD", "")), false, "", ""},
		{"R10", "one NVSHMEM mapped", H, nil, false, "", ""},

		{"R11", "sm_100 on CUDA 12.6", F, tool(func(t *Toolchain) { t.CUDA = "12.6" }), true, "sm100-cuda", SeverityError},
		{"R11", "sm_103 on CUDA 12.8", F, all(tool(func(t *Toolchain) { t.CUDA = "12.8"; t.Arch = []string{"sm_103"} }), option("CMAKE_CUDA_ARCHITECTURES", "103")), true, "sm103-cuda", SeverityError},
		{"R11", "sm_100 with DeepEP's default arch list", P, buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", ""), true, "deepep-arch-list", SeverityError},
		{"R11", "NVSHMEM built for 90 only", P, option("CMAKE_CUDA_ARCHITECTURES", "90"), true, "nvshmem-arch", SeverityError},
		{"R11", "aggressive PTX not said", P, buildEnv("deepep", "DISABLE_AGGRESSIVE_PTX_INSTRS", ""), true, "aggressive-ptx", SeverityAdvice},
		{"R11", "gcp-b200 as pinned", P, nil, false, "", ""},
		{"R11", "sm_90 on CUDA 12.3, defaults", P, all(tool(func(t *Toolchain) { t.CUDA = "12.3"; t.Arch = []string{"sm_90"} }),
			option("CMAKE_CUDA_ARCHITECTURES", ""), buildEnv("deepep", "TORCH_CUDA_ARCH_LIST", ""), buildEnv("deepep", "DISABLE_AGGRESSIVE_PTX_INSTRS", "")), false, "", ""},

		{"R11", "no architecture, no CUDA named", P, tool(func(t *Toolchain) { t.Arch, t.CUDA = nil, "" }), false, "", ""},

		{"R12", "CUDA 13 without CCCL path", F, tool(func(t *Toolchain) { t.CUDA = "13.0" }), true, "", SeverityAdvice},
		{"R12", "CUDA 13 with CCCL path", F, all(tool(func(t *Toolchain) { t.CUDA = "13.0" }), buildEnv("deepep", "CPATH", "{{cuda.home}}/include/cccl")), false, "", ""},
		{"R12", "CUDA 13, NVSHMEM 3.3.24", F, all(tool(func(t *Toolchain) { t.CUDA = "13.0" }), deepepAt(c9af0e0d), nvshmemArchive("3.3.24")), false, "", ""},

		{"R13", "RoCE IBGDA on 3.4.5", H, nvshmemVer("3.4.5"), true, "", SeverityWarn},
		{"R13", "InfiniBand IBGDA on 3.4.5", H, all(nvshmemVer("3.4.5"), host("ib.link-layer", "InfiniBand")), false, "", ""},
		{"R13", "RoCE IBGDA on 3.5.19-1", H, nil, false, "", ""},

		{"R14", "gcp-b200 without HCA prefix", P, all(recipe("gcp-b200"), env("NVSHMEM_HCA_PREFIX", "")), true, "gcp-names", SeverityWarn},
		{"R14", "rocep prefix on 3.3.24", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.24"), env("NVSHMEM_HCA_PREFIX", "rocep")), true, "prefix-needs-3.4.5", SeverityError},
		{"R14", "host NICs rocep*, no prefix", H, all(host("ib.name-prefix", "rocep"), env("NVSHMEM_HCA_PREFIX", "")), true, "host-names", SeverityError},
		{"R14", "IBGDA on an efa NIC", H, host("ib.driver", "efa"), true, "ibgda-mlx5-only", SeverityError},
		{"R14", "gcp-b200 with rocep prefix on 3.5.19-1", P, all(recipe("gcp-b200"), env("NVSHMEM_HCA_PREFIX", "rocep")), false, "", ""},
		{"R14", "host rocep with prefix", H, all(host("ib.name-prefix", "rocep"), env("NVSHMEM_HCA_PREFIX", "rocep")), false, "", ""},

		{"R15", "DOCA-OFED 3.0.0 on 6.14", H, host("doca-ofed", "3.0.0"), true, "", SeverityError},
		{"R15", "DOCA-OFED 3.2.1 on 6.14", H, nil, false, "", ""},
		{"R15", "DOCA-OFED 3.0.0 on 6.8", H, all(host("doca-ofed", "3.0.0"), host("kernel", "6.8.0")), false, "", ""},
		{"R15", "DOCA-OFED 3.0.0 on 6.14, plan stage", P, host("doca-ofed", "3.0.0"), false, "", ""},

		{"R16", "IBGDA, GPU handler: host setup", P, nil, true, "host-setup", SeverityAdvice},
		{"R16", "PeerMappingOverride missing", H, host("regkey.PeerMappingOverride", "0"), true, "peer-mapping-override", SeverityError},
		{"R16", "EnableStreamMemOPs missing", H, host("regkey.EnableStreamMemOPs", "0"), true, "stream-memops", SeverityWarn},
		{"R16", "no peer memory", H, host("peermem", "none"), true, "peer-memory", SeverityError},
		{"R16", "CPU NIC handler", P, env("NVSHMEM_IBGDA_NIC_HANDLER", "cpu"), false, "", ""},
		{"R16", "CPU NIC handler, no regkeys", H, all(env("NVSHMEM_IBGDA_NIC_HANDLER", "cpu"), host("regkey.PeerMappingOverride", "0"), host("peermem", "none")), false, "", ""},
		{"R16", "host set up", H, nil, false, "", ""},

		{"R17", "ibrc-dualport plan", P, ibrc, true, "plan", SeverityAdvice},
		{"R17", "ibrc-dualport on an nvidia_peermem host", H, all(ibrc, host("peermem", "nvidia_peermem")), true, "nvidia-peermem-only", SeverityError},
		{"R17", "ibrc-dualport on a memory_peers host", H, ibrc, false, "", ""},
		{"R17", "3.3.9 on an nvidia_peermem host", H, all(deepepAt(cB6ce310), nvshmemArchive("3.3.9")), false, "", ""},

		{"R18", "NCCL 2.22 lazy connect", P, nccl("2.22.3-1"), true, "runtime-connect", SeverityWarn},
		{"R18", "EPv2 on NCCL 2.27", P, all(deepepAt(cB306af0), nccl("2.27.3-1"), env("NCCL_RUNTIME_CONNECT", "0")), true, "epv2-nccl", SeverityError},
		{"R18", "EPv2 on the NCCL 2.28.9 wheel at preflight", F, all(deepepAt(cDd758ca), nccl("2.28.9"), env("NCCL_RUNTIME_CONNECT", "0")), true, "epv2-nccl", SeverityError},
		{"R18", "EPv2 without an nccl component", P, all(deepepAt(cDd758ca), env("NCCL_RUNTIME_CONNECT", "0"), func(f *Facts) {
			f.Components = slices.DeleteFunc(f.Components, func(c Component) bool { return c.Name == "nccl" })
		}), true, "epv2-nccl-undeclared", SeverityError},
		{"R18", "EPv2 on NCCL 2.30.4", F, all(deepepAt(cDd758ca), nccl("2.30.4"), env("NCCL_RUNTIME_CONNECT", "0")), false, "", ""},
		{"R18", "NCCL 2.22 with NCCL_RUNTIME_CONNECT=0", P, all(nccl("2.22.3-1"), env("NCCL_RUNTIME_CONNECT", "0")), false, "", ""},
		{"R18", "NCCL 2.21.5", P, nil, false, "", ""},

		{"R19", "EPv2 on torch 2.9", P, all(deepepAt(cB306af0), patches("deepep"), tool(func(t *Toolchain) { t.Torch = "2.9.1+cu128" })), true, "torch", SeverityError},
		{"R19", "EPv2 with a v1 patch set", P, deepepAt(cB306af0), true, "v1-patch-sets", SeverityError},
		{"R19", "EPv2 layout", P, all(deepepAt(cB306af0), patches("deepep")), true, "layout", SeverityAdvice},
		{"R19", "EPv2 without fmt", P, all(deepepAt(cDd758ca), patches("deepep")), true, "fmt", SeverityError},
		{"R19", "29d31c0 on torch 2.9", P, tool(func(t *Toolchain) { t.Torch = "2.9.1" }), false, "", ""},

		{"R20", "git apply", P, command("git", "apply", "fix.patch"), true, "", SeverityError},
		{"R20", "patch in a shell", P, command("sh", "-c", "cd sub && patch -p1 < fix.patch"), true, "", SeverityError},
		{"R20", "git -C apply", P, command("git", "-C", "sub", "apply", "x.diff"), true, "", SeverityError},
		{"R20", "other commands", P, all(command("git", "status"), command("python3", "apply_patch_notes.py")), false, "", ""},

		{"R21", "3.4.5 with the Python library", P, all(nvshmemVer("3.4.5"), option("NVSHMEM_BUILD_PYTHON_LIB", "")), true, "", SeverityWarn},
		{"R21", "3.4.5 without the Python library", P, nvshmemVer("3.4.5"), false, "", ""},
		{"R21", "3.3.24 with defaults", P, all(deepepAt(cB6ce310), nvshmemArchive("3.3.24"), option("NVSHMEM_BUILD_PYTHON_LIB", "")), false, "", ""},

		{"R22", "recipe does not require data-direct", P, tool(func(t *Toolchain) { t.Require = []string{"rdma-core"} }), true, "not-required", SeverityWarn},
		{"R22", "build host lacks data-direct", F, tool(func(t *Toolchain) { t.Present = []string{"rdma-core"} }), true, "missing", SeverityError},
		{"R22", "IBRC by default", P, all(option("NVSHMEM_IBGDA_SUPPORT", "0"), option("NVSHMEM_IBRC_SUPPORT", ""), tool(func(t *Toolchain) { t.Require = nil })), true, "not-required", SeverityWarn},
		{"R22", "efa-aws: no IBGDA, no IBRC", P, efa, false, "", ""},
		{"R22", "required and present", F, nil, false, "", ""},

		{"R23", "transport ibgda", P, env("NVSHMEM_REMOTE_TRANSPORT", "ibgda"), true, "transport-ibgda", SeverityError},
		{"R23", "transport verbs", P, env("NVSHMEM_REMOTE_TRANSPORT", "verbs"), true, "transport-value", SeverityError},
		{"R23", "NVSHMEM_GDRCOPY_SUPPORT check", P, func(f *Facts) { comp(f, "nvshmem").BuildVars["NVSHMEM_GDRCOPY_SUPPORT"] = "ON" }, true, "gdrcopy-build-var", SeverityError},
		{"R23", "transport ibrc, USE_GDRCOPY check", P, env("NVSHMEM_REMOTE_TRANSPORT", "ibrc"), false, "", ""},
	}
}

func TestRulesTable(t *testing.T) {
	rules, err := LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	anc := deepepFixture(t)
	ctx := context.Background()
	trig, miss := map[string]int{}, map[string]int{}
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
			var got []Finding
			for _, x := range fs {
				if x.ID == tc.id {
					got = append(got, x)
				}
			}
			if !tc.trigger {
				if len(got) > 0 {
					t.Fatalf("%s should not hold at %s, got %+v", tc.id, tc.stage, got)
				}
				return
			}
			var hit *Finding
			for i := range got {
				if tc.wantCase == "" || got[i].Case == tc.wantCase {
					hit = &got[i]
					break
				}
			}
			if hit == nil {
				t.Fatalf("%s (case %q) should hold at %s; findings: %s", tc.id, tc.wantCase, tc.stage, describe(fs))
			}
			if hit.Unknown {
				t.Fatalf("%s should be decided, got unknown: %s", tc.id, hit.Message)
			}
			if tc.wantSev != "" && hit.Severity != tc.wantSev {
				t.Errorf("%s severity %s, want %s", tc.id, hit.Severity, tc.wantSev)
			}
			if hit.Stage != tc.stage || hit.Title == "" || hit.Message == "" || len(hit.Sources) == 0 || len(hit.Because) == 0 {
				t.Errorf("finding lacks stage, title, message, sources or because: %+v", hit)
			}
		})
		if tc.trigger {
			trig[tc.id]++
		} else {
			miss[tc.id]++
		}
	}
	ids := rules.IDs()
	for i := 1; i <= 23; i++ {
		if id := fmt.Sprintf("R%d", i); !slices.Contains(ids, id) {
			t.Errorf("rules.yaml lacks %s (KNOWLEDGE.md has R1..R23)", id)
		}
	}
	for _, id := range ids {
		if trig[id] == 0 || miss[id] == 0 {
			t.Errorf("rule %s needs a triggering and a non-triggering case in ruleTable (has %d and %d)", id, trig[id], miss[id])
		}
	}
	// every case of every rule is exercised by a triggering row
	for _, r := range rules.All() {
		for _, c := range r.Cases {
			found := false
			for _, tc := range ruleTable() {
				found = found || tc.trigger && tc.id == r.ID && tc.wantCase == c.Name
			}
			if !found {
				t.Errorf("case %s/%s has no triggering row", r.ID, c.Name)
			}
		}
	}
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
