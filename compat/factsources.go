package compat

import "slices"

// FactSource says of a build fact or a runtime key what values it takes and where it is
// read, for compat explain and docs/rules.md.
type FactSource struct {
	Key    string
	Values []string
	Read   string
}

// BuildFactSources are the build facts (BuildKeys) and where the build reads them.
func BuildFactSources() []FactSource {
	return []FactSource{
		{Key: "nvshmem.rc-layout", Values: []string{"v1", "v2"}, Read: "After the nvshmem component is built, from " +
			"include/device_host_transport/nvshmem_common_ibgda.h of the NVSHMEM DeepEP compiles against (the built " +
			"prefix's include/, or nvidia/nvshmem/include of the wheel's package): the typedef of " +
			"nvshmemi_ibgda_device_state_t names nvshmemi_ibgda_device_state_v1 or _v2; a plain struct (before the " +
			"versioned ones) is v1. Two definitions, or none of these forms, leave it unset with a note in the " +
			"manifest (build_fact_notes) naming the file; so does a tree without the header (no IBGDA). Recorded " +
			"in the manifest's build_facts; verify-install and host check --prefix read it from there (R3, R24)."},
		{Key: "nvshmem.header-version", Read: "From the same include directory's non_abi/nvshmem_version.h " +
			"(NVSHMEM_VENDOR_MAJOR/MINOR/PATCH_VERSION), as X.Y.Z: the version DeepEP was compiled against, which " +
			"nvshmem.loaded-matches-build compares with the loaded library's (before the version label of the plan)."},
		{Key: "deepep.hidden-sizes", Read: "From the patched DeepEP tree the build compiled, csrc/kernels/launch.cuh: the " +
			"case labels of the SWITCH_HIDDEN macro, the hidden sizes its low-latency kernels are instantiated for, " +
			"comma-separated in the order the file lists them (a patch set that adds a size is read with it). A tree " +
			"without that file or macro (EPv2 main) records nothing (R48)."},
	}
}

// RuntimeFactSources are the recipe's runtime keys (RuntimeKeys) and where they come from.
func RuntimeFactSources() []FactSource {
	recipe := "The recipe's runtime: section (or --set runtime."
	return []FactSource{
		{Key: "buffer-bytes", Read: recipe + "buffer-bytes=N): the bytes DeepEP's buffer takes on each GPU, in decimal."},
		{Key: "gpus-per-node", Read: recipe + "gpus-per-node=N): the GPUs a node gives the job."},
		{Key: "ranks", Read: recipe + "ranks=N): the job's ranks in all."},
		{Key: "hidden", Read: recipe + "hidden=N): the model's hidden size, one number (a job runs one model)."},
		{Key: "low-latency", Values: []string{"1", "0"}, Read: recipe + "low-latency=true|false): whether the job uses DeepEP's low-latency mode."},
	}
}

// BuildKeys lists the build facts the rule's conditions read.
func (r Rule) BuildKeys() []string {
	var out []string
	r.eachCond(func(c *Cond) {
		for _, k := range []string{keyOf(c.Build), inBuildOf(c.Runtime)} {
			if k != "" && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	})
	return out
}

// RuntimeKeys lists the recipe's runtime keys the rule's conditions read.
func (r Rule) RuntimeKeys() []string {
	var out []string
	r.eachCond(func(c *Cond) {
		for _, k := range []string{keyOf(c.Runtime), sizeBelow(c.Size)} {
			if k != "" && !slices.Contains(out, k) {
				out = append(out, k)
			}
		}
	})
	return out
}

func keyOf(k *KeyCond) string {
	if k == nil {
		return ""
	}
	return k.Key
}

func inBuildOf(k *KeyCond) string {
	if k == nil {
		return ""
	}
	return k.InBuild
}

func sizeBelow(s *SizeCond) string {
	if s == nil {
		return ""
	}
	return s.Below
}
