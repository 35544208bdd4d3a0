package compat

// Facts is what the rules are evaluated against: the components of a resolved recipe,
// the toolchain, the runtime env, the recipe's name and, on a host, what was read there.
// The builder fills it from a Plan (builder.FactsFromPlan); the preflight and host stages
// add what they probed.
type Facts struct {
	Recipe     string      `json:"recipe,omitempty"`
	Cluster    string      `json:"cluster,omitempty"`
	Components []Component `json:"components"`
	Toolchain  Toolchain   `json:"toolchain"`
	// Env is the runtime environment (the recipe's env, or the process's on a host).
	Env map[string]string `json:"env,omitempty"`
	// Runtime holds the recipe's runtime settings by their recipe key (buffer-bytes: the
	// per-GPU bytes DeepEP's buffer asks of NVSHMEM's symmetric heap, in decimal).
	Runtime map[string]string `json:"runtime,omitempty"`
	// Host holds facts read on a host (see the head of rules.yaml for the keys); nil
	// when no host was probed, which makes every host condition unknown.
	Host map[string]string `json:"host,omitempty"`
	// Build holds the facts the build recorded about what it built (BuildKeys), read
	// back from the install's manifest; nil before the build, which makes every build
	// condition on a value unknown.
	Build map[string]string `json:"build,omitempty"`
}

// Component is one component as the rules see it.
type Component struct {
	Name string `json:"name"`
	// Version is a vendor version ("3.5.19-1") or, for a package taken from the Python
	// environment, the constraint it must satisfy (">=3.3.9"); "" when unknown.
	Version string `json:"version,omitempty"`
	// Repo is the git URL (or the archive URL); Commit the pinned commit of a git source.
	Repo   string `json:"repo,omitempty"`
	Commit string `json:"commit,omitempty"`
	// Source is the source kind: git, archive or python; prebuilt for a vendor's built
	// library that the build copies (its cmake options are not the recipe's: none).
	Source string `json:"source"`
	// Package is the Python distribution of a python source (nvidia-nvshmem-cu13).
	Package string   `json:"package,omitempty"`
	Patches []string `json:"patches,omitempty"`
	// Options are the CMake -D options of the component's build steps.
	Options map[string]string `json:"options,omitempty"`
	// BuildEnv is the environment of the component's build steps.
	BuildEnv map[string]string `json:"build-env,omitempty"`
	// BuildVars are the NVSHMEM build variables the recipe's checks expect.
	BuildVars map[string]string `json:"build-vars,omitempty"`
	// Commands are the argv of the component's command build steps.
	Commands [][]string `json:"commands,omitempty"`
}

// Toolchain is the build toolchain. At plan stage each version is what the recipe asks
// for (a constraint such as ">=12.9"); at preflight it is the probed version.
type Toolchain struct {
	CUDA   string `json:"cuda,omitempty"`
	Torch  string `json:"torch,omitempty"`
	Python string `json:"python,omitempty"`
	GCC    string `json:"gcc,omitempty"`
	CMake  string `json:"cmake,omitempty"`
	// Arch lists the GPU architectures (sm_90a, sm_100) the build targets.
	Arch []string `json:"arch,omitempty"`
	// Require lists what the recipe requires of the host (rdma-core, libfabric, ...).
	Require []string `json:"require,omitempty"`
	// Present lists the requirements the probe found on the build host; nil when no
	// probe ran, which makes every present condition unknown.
	Present []string `json:"present,omitempty"`
}

// Component returns the component with that name.
func (f *Facts) Component(name string) (*Component, bool) {
	for i := range f.Components {
		if f.Components[i].Name == name {
			return &f.Components[i], true
		}
	}
	return nil, false
}

func (t Toolchain) tool(name string) string {
	switch name {
	case "cuda":
		return t.CUDA
	case "torch":
		return t.Torch
	case "python":
		return t.Python
	case "gcc":
		return t.GCC
	case "cmake":
		return t.CMake
	}
	return ""
}
