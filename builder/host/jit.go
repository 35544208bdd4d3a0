package host

import (
	"path"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/recipes"
)

// FindNVCC follows a JIT's lookup (recipes.NVCCStep) through sys in the job's env, and
// says whether it finds an executable nvcc: present (with its path), absent, or "" when
// that cannot be known here (a path relative to the job's working directory, a file that
// cannot be read).
func FindNVCC(sys sysroot.Root, env map[string]string, steps []recipes.NVCCStep) (state, at string) {
	found := func(p string) (string, string) {
		ok, err := sys.IsExecutable(p)
		switch {
		case err != nil:
			return "", ""
		case ok:
			return "present", p
		}
		return "absent", ""
	}
	onPath := func(name string) string {
		for _, dir := range strings.Split(env["PATH"], ":") {
			if path.IsAbs(dir) {
				if ok, _ := sys.IsExecutable(path.Join(dir, name)); ok {
					return path.Join(dir, name)
				}
			}
		}
		return ""
	}
	for _, st := range steps {
		switch {
		case st.Env != "":
			c := env[st.Env]
			switch {
			case c == "":
				continue
			case !strings.Contains(c, "/"):
				if p := onPath(c); p != "" {
					return "present", p
				}
				return "absent", ""
			case !path.IsAbs(c):
				return "", "" // relative to the job's working directory, which is not known here
			}
			return found(c)
		case st.File != "":
			p, ok := st.Expand(env)
			switch {
			case !ok:
				continue
			case !path.IsAbs(p):
				return "", ""
			}
			if state, at = found(p); state != "absent" || !st.Optional {
				return state, at
			}
		case st.Path != "":
			if p := onPath(st.Path); p != "" {
				return "present", p
			}
		}
	}
	return "absent", ""
}

// checkJITNVCC looks for the nvcc the recipe's runtime.nvcc says a component's JIT runs,
// where that JIT looks, in the job's environment, and for the CUDA headers of its
// toolkit (<toolkit>/include/cuda_runtime.h, the toolkit above nvcc's bin/).
func (r *Node) checkJITNVCC() check.Result {
	n := r.cfg.NVCC
	c := check.Result{ID: "host.jit.nvcc", Why: "a component that compiles its kernels at run time (EPv2, NCCL EP's high-throughput mode, " +
		"Hybrid-EP) runs nvcc on every node of a job; without it the job fails at its first kernel"}
	if n == nil {
		return skip(c, "the recipe compiles nothing at run time (no runtime.nvcc)")
	}
	c.Why = n.Component + " compiles its kernels at run time with nvcc, on every node of a job; without it the job fails at its first kernel"
	lookup := "looked for at " + NVCCLookup(n)
	state, at := FindNVCC(r.sys, r.cfg.Env, n.Steps())
	switch state {
	case "":
		return warn(c, "where nvcc is cannot be told here ("+lookup+": a relative path, or one that cannot be read)", "give the lookup's variables absolute paths")
	case "absent":
		return fail(c, "no executable nvcc "+lookup+", in the job's environment", NVCCFix(n))
	}
	headers := path.Join(path.Dir(path.Dir(at)), "include", "cuda_runtime.h")
	if _, err := r.sys.Stat(headers); err != nil {
		return warn(c, at+", and no CUDA headers beside it ("+headers+"); "+lookup,
			"install the CUDA toolkit's headers with its nvcc (the JIT compiles against them), or point the lookup at a whole toolkit")
	}
	return pass(c, at+" (headers "+headers+"); "+lookup)
}

// LacksNVCC says why a test that compiles kernels at run time cannot run on the node of
// sys in env: no nvcc where n says the JIT looks; "" when there is one, or when that
// cannot be told here (the test then says).
func LacksNVCC(sys sysroot.Root, env map[string]string, n *recipes.NVCC) string {
	if n == nil {
		return "needs nvcc, and the recipe does not say where its JIT looks (runtime.nvcc)"
	}
	if state, _ := FindNVCC(sys, env, n.Steps()); state != "absent" {
		return ""
	}
	return "needs nvcc: " + n.Component + " compiles its kernels at run time, and this node has none at " + NVCCLookup(n) + ": " + NVCCFix(n)
}

// NVCCLookup writes the lookup order: "$NCCL_EP_JIT_NVCC, else $NVCC, else nvcc on PATH".
func NVCCLookup(n *recipes.NVCC) string {
	var order []string
	for _, st := range n.Steps() {
		order = append(order, st.String())
	}
	return strings.Join(order, ", else ")
}

// NVCCFix says how to give the JIT an nvcc where it looks: the toolkit, the variable of
// the lookup's first $VAR/bin/nvcc, and the first variable that names nvcc itself.
func NVCCFix(n *recipes.NVCC) string {
	var home, env string
	for _, st := range n.Steps() {
		if env == "" && st.Env != "" {
			env = st.Env
		}
		if home == "" && strings.HasPrefix(st.File, "$") {
			home = strings.Trim(strings.SplitN(st.File[1:], "/", 2)[0], "{}")
		}
	}
	fix := "install the CUDA toolkit (nvcc and its headers) on every node, or ship it in the job's container"
	if home != "" {
		fix += ", and set " + home + " to it"
	}
	if env != "" {
		fix += "; or set " + env + " to an nvcc"
	}
	return fix
}
