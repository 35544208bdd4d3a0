package verify

import (
	"context"
	"fmt"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/plan"
)

// CheckResult is one check's outcome: the check engine's one result type.
type CheckResult = check.Result

// Subject is what one run of the check engine looks at. Which fields are set depends on
// the target: a component and its tree or prefix (tree, staged, installed), an install
// (files, env, process), or a node (host).
type Subject struct {
	Plan      *plan.Plan
	Component *plan.PlanComponent
	// Root is the component's patched tree or prefix.
	Root string
	// Prefixes maps each component to its staged or installed prefix (a component from
	// the Python environment to its package directory).
	Prefixes map[string]string
	// Env is the runtime environment checks run processes with (imports) and resolve
	// libraries against (LD_LIBRARY_PATH, LD_PRELOAD).
	Env    []string
	Python string

	// inst is the install verify-install checks (files, env, installed, process targets).
	inst *verifier
	// node is the host (host target), with what the rules are evaluated against there.
	node *hostSubject
}

// Checks builds the registry of every check kind, in the order kinds run. Recipes declare
// the checks of the kinds made by check.Declared (the field of recipes.Check with the
// kind's name); the others run on every subject of their targets.
func Checks() *check.Registry[*Subject] {
	prefixes := []check.Target{check.Staged, check.Installed}
	kinds := []check.Kind[*Subject]{
		// what recipes declare (recipes.Check): on the staged prefix, again where installed
		check.Declared("file", prefixes, "a file or glob exists in the component's prefix", checkFile),
		check.Declared("arch", prefixes, "ELF files carry device code for the GPU architectures (cubin or PTX in .nv_fatbin)", checkArch),
		check.Declared("symbol", prefixes, "an ELF file defines (or leaves undefined) a dynamic symbol", checkSymbol),
		check.Declared("nvshmem-build-vars", prefixes, "the installed NVSHMEM records these build variables (include/non_abi/nvshmem_version.h)", checkBuildVars),
		check.Declared("nvshmem-options", prefixes, "the installed NVSHMEM records the NVSHMEM_* cmake options the recipe gave", checkNVSHMEMOptions),
		check.Declared("import", prefixes, "python imports the module from the component's prefix, not another copy", checkImport),
		check.Declared("needed", prefixes, "ELF files link a library (DT_NEEDED): DeepEP built against NVSHMEM at all", checkNeeded),
		check.Declared("runpath", prefixes, "the dynamic loader finds the library in the named component, through the install's own paths "+
			"(LD_PRELOAD, DT_RPATH, LD_LIBRARY_PATH, DT_RUNPATH): DeepEP loads the NVSHMEM the recipe built or chose, not another", checkRunpath),
		check.Declared("libs", prefixes, "every library an ELF file needs (transitively) resolves inside the prefix through $ORIGIN-relative RUNPATH entries, "+
			"or is one of the named host libraries: the artifact carries what it needs", checkLibs),
		check.Declared("nccl-version", prefixes, "an NCCL library's ncclGetVersion (called through python3's ctypes: no GPU) and the prefix's nccl.h "+
			"say the component's version: the NCCL built is the release the plan names", checkNCCLVersion),
		// what patch sets state
		{Name: "effect.tree", Targets: []check.Target{check.Tree}, Run: checkTreeEffects,
			Explain: "each patch set's stated effects hold on the patched tree (a def exists and is called, an include replaced, an env variable read)"},
		{Name: "effect.prefix", Targets: prefixes, Run: checkPrefixEffects,
			Explain: "the effects whose patch set says where the file lands hold on the staged and the installed copy: a patch that reached only the source is the field failure"},
		// what a python-extension step builds
		{Name: "cxx-runtime", Targets: prefixes, Run: checkCXXRuntime,
			Explain: "no shared object a python-extension step built exports a libstdc++ of its own (libstdc++.a linked in): Python and torch load libstdc++.so.6, and two C++ runtimes in one process break std::locale facets and exceptions (EPv2's JIT: SIGSEGV in std::regex)"},
	}
	kinds = append(kinds, installKinds()...)
	kinds = append(kinds, processKinds()...)
	kinds = append(kinds, smokeKinds()...)
	kinds = append(kinds, hostKinds()...)
	reg, err := check.NewRegistry(kinds...)
	if err != nil {
		panic(err) // the list above is fixed: a bad entry is a bug any test catches
	}
	return reg
}

// Declarations lists the checks a component's recipe declares, in order, for the engine.
func Declarations(pc *plan.PlanComponent) []check.Spec {
	var out []check.Spec
	for _, ch := range pc.Checks {
		if kind, spec, ok := ch.Declared(); ok {
			out = append(out, check.Spec{Kind: kind, Value: spec})
		}
	}
	return out
}

// ChecksFailed is returned when any check fails: exit 1, with what was expected and found.
type ChecksFailed struct {
	Where   string
	Results []CheckResult
}

func (e *ChecksFailed) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "checks failed on %s:", e.Where)
	for _, r := range e.Results {
		if r.Status == check.Fail {
			fmt.Fprintf(&b, "\n  - %s: expected %s; found %s", r.ID, r.Expected, r.Found)
			if r.Why != "" {
				fmt.Fprintf(&b, " (%s)", r.Why)
			}
		}
	}
	return b.String()
}

// ExitCode: the job failed.
func (e *ChecksFailed) ExitCode() int { return 1 }

// checkComponent runs a component's declared checks and its patch sets' effects on its
// staged or installed prefix.
func CheckComponent(ctx context.Context, reg *check.Registry[*Subject], t check.Target, s *Subject) []CheckResult {
	return reg.Run(ctx, t, s, Declarations(s.Component))
}

// TreeEffects checks every effect of the component's patch sets on its patched tree.
func TreeEffects(pc *plan.PlanComponent, tree string) []CheckResult {
	return Checks().Run(context.Background(), check.Tree, &Subject{Component: pc, Root: tree}, nil)
}
