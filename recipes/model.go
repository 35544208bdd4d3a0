// Package recipes owns the recipe model: the types, strict loading with file:line:col
// errors, --set overrides and semantic validation. A recipe says what to build for one
// kind of cluster; every source in it is pinned (a full commit or a sha256).
package recipes

import (
	"encoding/json"
	"fmt"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strings"
)

// Recipe is one declarative build: the components, their pinned sources and patch sets
// in order, how each is built, the toolchain it needs, the runtime env and the checks.
type Recipe struct {
	// Name is the recipe's id, as given to `epbuild recipe NAME`.
	Name string `json:"name" jsonschema:"pattern=^[a-z0-9][a-z0-9-]*$"`
	// Cluster says which kind of cluster the recipe is for.
	Cluster string `json:"cluster"`
	// Description is one or two sentences for `epbuild list`.
	Description string `json:"description"`
	// Toolchain is what the build host must have; checked before any work (exit 3).
	Toolchain Toolchain `json:"toolchain,omitzero"`
	// Components are built in dependency order.
	Components []Component `json:"components" jsonschema:"minItems=1"`
	// Env is the runtime environment written to env.sh. Values are one line each and may
	// use {{prefix}} (the install prefix) and {{component.prefix}} of a built component;
	// LD_PRELOAD may only name files under those.
	Env map[string]string `json:"env,omitempty"`
	// Runtime says what a job of this recipe asks of each GPU, for the rules and the node
	// checks that compare it with the runtime env and the node.
	Runtime Runtime `json:"runtime,omitzero"`
	// Matrix holds default CI matrix axes (component name → versions).
	Matrix map[string][]string `json:"matrix,omitempty"`
	// Notes are shown by `epbuild show`: caveats a user must know.
	Notes []string `json:"notes,omitempty"`
}

// Runtime is what a job asks of each GPU at run time.
type Runtime struct {
	// BufferBytes is the memory, in bytes, DeepEP's Buffer takes from NVSHMEM's symmetric
	// heap on each GPU: num_rdma_bytes, which Buffer.get_low_latency_rdma_size_hint gives
	// in low-latency mode. With CUDA VMM off the heap must hold it (R32), and each GPU
	// must have it free (verify-install --host).
	BufferBytes *uint64 `json:"buffer-bytes,omitempty" jsonschema:"minimum=1"`
	// The job's shape, for the rules that depend on it (R25, R47, R48); a key left out
	// leaves those rules undecided. GPUsPerNode is the GPUs (ranks) a node gives the job,
	// Ranks the job's ranks in all. Hidden is the model's hidden size: one number, since a
	// job runs one model (check another with --set runtime.hidden=N). LowLatency says
	// whether the job uses DeepEP's low-latency mode (low_latency_mode) or normal mode.
	GPUsPerNode *uint32 `json:"gpus-per-node,omitempty" jsonschema:"minimum=1"`
	Ranks       *uint32 `json:"ranks,omitempty" jsonschema:"minimum=1"`
	Hidden      *uint32 `json:"hidden,omitempty" jsonschema:"minimum=1"`
	LowLatency  *bool   `json:"low-latency,omitempty"`
	// MNNVL says the job shares GPU memory across the nodes of one NVLink domain (a
	// GB200/GB300 NVL72 rack) through fabric handles (CU_MEM_HANDLE_TYPE_FABRIC): every
	// node then needs an IMEX channel in the job and GPUs registered with the NVLink
	// fabric, which verify-install --host checks. Left out (false), a job may use one node.
	MNNVL bool `json:"mnnvl,omitempty"`
	// NVCC says that a component compiles GPU code at run time with the node's nvcc (EPv2,
	// NCCL EP's high-throughput mode, Hybrid-EP), and where its JIT looks for one. It is
	// here, not a test's need, because every job needs it, not only the tests: verify-install
	// --host checks the node for it, and a test that runs the JIT says needs: [nvcc].
	NVCC *NVCC `json:"nvcc,omitempty"`
}

// NVCC is a component's run-time compiler: which component runs it, and where it looks.
type NVCC struct {
	// Component is the component whose JIT runs nvcc, named in what the checks report.
	Component string `json:"component"`
	// Lookup is where the JIT looks for nvcc, in order, in the job's environment; left out,
	// EPv2's (DefaultNVCCLookup).
	Lookup []NVCCStep `json:"lookup,omitempty"`
}

// NVCCStep is one place a JIT looks for nvcc; exactly one of Env, File and Path is set.
type NVCCStep struct {
	// Env is a variable that, when set, names the nvcc to run (a path, or a program looked
	// up on PATH): the lookup ends there, found or not.
	Env string `json:"env,omitempty" jsonschema:"pattern=^[A-Za-z_][A-Za-z0-9_]*$"`
	// File is a path that may start with $VAR or ${VAR} ($CUDA_HOME/bin/nvcc); passed over
	// while a variable it names is unset. Once it is set the lookup ends there, unless
	// Optional: then a path without an executable goes on to the next step.
	File     string `json:"file,omitempty"`
	Optional bool   `json:"optional,omitempty"`
	// Path is a program looked up on PATH (nvcc); the lookup goes on where there is none.
	Path string `json:"path,omitempty"`
}

// DefaultNVCCLookup is where EPv2's JIT looks for nvcc (csrc/jit/compiler.hpp and
// deep_ep/__init__.py find_cuda_home at 723716f): EP_JIT_NVCC_COMPILER, else CUDA_HOME,
// else CUDA_PATH, else the toolkit of the nvcc on PATH, else /usr/local/cuda.
func DefaultNVCCLookup() []NVCCStep {
	return []NVCCStep{{Env: "EP_JIT_NVCC_COMPILER"}, {File: "$CUDA_HOME/bin/nvcc"}, {File: "$CUDA_PATH/bin/nvcc"}, {Path: "nvcc"}, {File: "/usr/local/cuda/bin/nvcc"}}
}

// Steps is the lookup order: Lookup, else DefaultNVCCLookup.
func (n *NVCC) Steps() []NVCCStep {
	if len(n.Lookup) == 0 {
		return DefaultNVCCLookup()
	}
	return n.Lookup
}

// fileVarRe is a $VAR or ${VAR} in an nvcc lookup's file.
var fileVarRe = regexp.MustCompile(`\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))`)

// Expand is File with its variables' values from env; ok is false while one of them is
// unset or empty (the JIT passes such a step over).
func (s NVCCStep) Expand(env map[string]string) (file string, ok bool) {
	ok = true
	file = fileVarRe.ReplaceAllStringFunc(s.File, func(m string) string {
		sm := fileVarRe.FindStringSubmatch(m)
		v := env[sm[1]+sm[2]]
		ok = ok && v != ""
		return v
	})
	return file, ok
}

// String writes a step as the lookup's documentation does: $NVCC, $CUDA_HOME/bin/nvcc,
// nvcc on PATH.
func (s NVCCStep) String() string {
	switch {
	case s.Env != "":
		return "$" + s.Env
	case s.File != "":
		return s.File
	}
	return s.Path + " on PATH"
}

// Toolchain lists requirements on the build host. Versions are vendor versions or
// constraints (">=12.9", "2.10.0+cu129").
type Toolchain struct {
	CUDA   string `json:"cuda,omitempty"`
	Torch  string `json:"torch,omitempty"`
	Python string `json:"python,omitempty"`
	GCC    string `json:"gcc,omitempty"`
	CMake  string `json:"cmake,omitempty"`
	// Arch lists the GPU architectures the build must carry code for (sm_90a, sm_100).
	Arch []string `json:"arch,omitempty"`
	// Require names further host facts: rdma-core, libfabric, gdrcopy, nvshmem-wheel, mpi.
	Require []string `json:"require,omitempty"`
	// HostArch lists the build host's machines (uname -m: x86_64, aarch64) the recipe
	// builds on; left out, any. It is the toolchain's, not the runtime's, because nothing
	// here cross-compiles: the wheels and .so files are the build host's machine code, so
	// the build host's machine is the nodes'. GB200/GB300 nodes are aarch64 (Grace).
	HostArch []string `json:"host-arch,omitempty" jsonschema:"uniqueItems=true,enum=x86_64,enum=aarch64"`
}

// HostArches are the build host machines a recipe may name (toolchain.host-arch), by
// uname -m.
func HostArches() []string { return []string{"x86_64", "aarch64"} }

// Component is one thing built (or taken from the environment): nvshmem, deepep, nccl.
type Component struct {
	Name string `json:"name" jsonschema:"pattern=^[a-z][a-z0-9-]*$"`
	// Version is the vendor version of the pinned source (3.5.19-1).
	Version string `json:"version,omitempty"`
	Source  Source `json:"source"`
	// Patches are patch-set names (directories under patches/), applied in this order.
	Patches []string `json:"patches,omitempty"`
	// Depends names components whose staged prefix this one builds against.
	Depends []string `json:"depends,omitempty"`
	// Build steps build the component from its pinned source. On a component taken from
	// the Python environment (the NCCL torch ships) they build it instead when
	// `--set C.version=V` names a release of the catalogue, which then pins the source.
	Build  []Step  `json:"build,omitempty"`
	Checks []Check `json:"checks,omitempty"`
	// Preload lists files of the component's prefix that env.sh puts in LD_PRELOAD when the
	// component is built here (lib/libnccl.so.2): torch finds its own NCCL through
	// DT_RPATH, which LD_LIBRARY_PATH cannot override. Nothing when it comes from the Python
	// environment, nor when python-wheel packs it as the package torch loads.
	Preload []string `json:"preload,omitempty"`
	// PythonWheel packs the component, when it is built here, as a wheel that takes the
	// place of the Python environment's package (the NCCL torch ships): installed with
	// pip, it becomes the library torch itself loads, so that one copy is mapped in a job
	// (R41). A component with it is not preloaded.
	PythonWheel *PythonWheel `json:"python-wheel,omitempty"`
	// CheckEnv is added to the runtime env of this component's checks on the build host
	// (after the build, before packing), never to env.sh: what a node has and the build
	// host lacks. A python-wheel library the component depends on is preloaded there too,
	// since its wheel is not installed yet (deepep-v2 sets DeepEP's EP_SUPPRESS_NCCL_CHECK:
	// torch's own NCCL is mapped beside it on the build host; the node checks the real one).
	CheckEnv map[string]string `json:"check-env,omitempty"`
	// Tests are tests of the pinned tree that the artifact carries, for `epbuild test`
	// on the nodes after an install.
	Tests *Tests `json:"tests,omitempty"`
}

// Tests says which files of a component's pinned tree the artifact carries as its
// acceptance tests, and how `epbuild test` runs each.
//
// The files and the runs are apart because they are different things: a test program
// imports helpers that are no test of their own (DeepEP's tests/utils.py), and one
// file may run in several ways. The files land flat in the component's tests/ (a test
// imports its helpers as siblings, as DeepEP's do), so two files may not share a base
// name. A run is an argv, not a shell line: nothing is expanded but {{procs}}, so what
// the recipe says is what runs. Bandwidth patterns are named regular expressions with a
// gbps group, so that reading numbers out of any upstream's prints is data, not code.
type Tests struct {
	// Files are paths in the source tree, copied to tests/ under the component's prefix.
	Files []string `json:"files" jsonschema:"minItems=1"`
	// Run lists the tests, in the order `epbuild test` runs them.
	Run []TestRun `json:"run" jsonschema:"minItems=1"`
}

// TestRun is one test: a program run in the component's tests/ directory with the
// install's runtime env (env.sh's). It passes when it exits 0 before its timeout.
type TestRun struct {
	Name string `json:"name" jsonschema:"pattern=^[a-z][a-z0-9-]*$"`
	// Argv is the program and its arguments; {{procs}} is the number of processes to
	// start on this node (`epbuild test --procs N`, default one per GPU).
	Argv []string `json:"argv" jsonschema:"minItems=1"`
	// Nodes is how many nodes the test needs (default 1). One that needs more is run
	// only when `epbuild test --nodes N` says the job spans enough of them; otherwise it
	// is reported as not run.
	Nodes int `json:"nodes,omitempty" jsonschema:"minimum=1"`
	// Needs names what the node must have for the test to mean anything; without it the
	// test is reported as not run, with the reason. rdma: an RDMA device (a verbs NIC
	// under /sys/class/infiniband), for a test whose traffic cannot take NVLink. nvcc: the
	// nvcc the recipe's runtime.nvcc says the JIT looks for, for a test that compiles
	// kernels at run time.
	Needs []string `json:"needs,omitempty" jsonschema:"uniqueItems=true,enum=rdma,enum=nvcc"`
	// Env is added to the install's runtime env for this test alone (EP_DISABLE_GIN=1: a
	// path the node cannot take without a NIC), plain values, no LD_PRELOAD.
	Env map[string]string `json:"env,omitempty"`
	// Timeout bounds one run (a Go duration: 90s, 20m); its process group is killed then.
	Timeout string `json:"timeout"`
	// Bandwidth names how each bandwidth is read from the test's output: a regular
	// expression (Go syntax) matched on each line, or a label and a value pattern where
	// the program prints the number on the line after its name (BandwidthPattern).
	Bandwidth map[string]BandwidthPattern `json:"bandwidth,omitempty"`
}

// BandwidthPattern is how one bandwidth is read from a test's output, in one of two
// forms. The plain one, a string, is a pattern matched on each line; each match adds its
// gbps group, a number in GB/s. The other is a mapping of Label and Value, for a program
// that prints a figure's name on one line and its number on the next (NCCL EP's
// ep_bench: "Dispatch (BF16): avg=..." then "throughput: avg=... GB/s"), where a pattern
// of one line cannot tell the figures apart: Value is read from the line right after a
// line Label matches, and from no other. The next line only, so that a figure missing
// from one run is not read from a later figure's line.
type BandwidthPattern struct {
	// Line is the plain form; empty in the mapping form.
	Line string `json:"-"`
	// Label matches the line before the number's.
	Label string `json:"label,omitempty"`
	// Value matches the line after Label's; it has a group named gbps, a number in GB/s.
	Value string `json:"value,omitempty"`
}

// Plain reports whether this is the plain form (a pattern of one line).
func (b BandwidthPattern) Plain() bool { return b.Label == "" && b.Value == "" }

// Compile compiles the patterns: value is the one that captures gbps (Line in the plain
// form), label is nil in the plain form. The error names the pattern that does not
// compile (label, value or the plain one).
func (b BandwidthPattern) Compile() (label, value *regexp.Regexp, err error) {
	if b.Plain() {
		value, err = regexp.Compile(b.Line)
		return nil, value, err
	}
	if label, err = regexp.Compile(b.Label); err != nil {
		return nil, nil, fmt.Errorf("label: %w", err)
	}
	if value, err = regexp.Compile(b.Value); err != nil {
		return nil, nil, fmt.Errorf("value: %w", err)
	}
	return label, value, nil
}

// bandwidthMapping is the mapping form as written, decoded strictly (an unknown key is
// an error at its line).
type bandwidthMapping struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// UnmarshalYAML reads either form (goccy/go-yaml's InterfaceUnmarshaler).
func (b *BandwidthPattern) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err == nil {
		*b = BandwidthPattern{Line: s}
		return nil
	}
	var m bandwidthMapping
	if err := unmarshal(&m); err != nil {
		return err
	}
	*b = BandwidthPattern{Label: m.Label, Value: m.Value}
	return nil
}

// MarshalJSON writes the plain form as the string it was, so that a plan (and its key)
// reads as before the mapping form existed.
func (b BandwidthPattern) MarshalJSON() ([]byte, error) {
	if b.Plain() {
		return json.Marshal(b.Line)
	}
	return json.Marshal(bandwidthMapping{Label: b.Label, Value: b.Value})
}

// UnmarshalJSON reads either form (a manifest's plan).
func (b *BandwidthPattern) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*b = BandwidthPattern{Line: s}
		return nil
	}
	var m bandwidthMapping
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("bandwidth: a pattern or {label, value}: %w", err)
	}
	*b = BandwidthPattern{Label: m.Label, Value: m.Value}
	return nil
}

// ImportCheck is a module python must import from the prefix, and the modules it imports
// first (After), in order.
type ImportCheck struct {
	Module string
	After  []string
}

type importMapping struct {
	Module string   `json:"module" yaml:"module"`
	After  []string `json:"after" yaml:"after"`
}

// UnmarshalYAML reads a module name, or {module, after}.
func (c *ImportCheck) UnmarshalYAML(unmarshal func(any) error) error {
	var s string
	if err := unmarshal(&s); err == nil {
		*c = ImportCheck{Module: s}
		return nil
	}
	var m importMapping
	if err := unmarshal(&m); err != nil {
		return err
	}
	*c = ImportCheck{Module: m.Module, After: m.After}
	return nil
}

// MarshalJSON writes a check with nothing imported first as the module name it was, so
// that a plan (and its key) reads as before the mapping form existed.
func (c ImportCheck) MarshalJSON() ([]byte, error) {
	if len(c.After) == 0 {
		return json.Marshal(c.Module)
	}
	return json.Marshal(importMapping{Module: c.Module, After: c.After})
}

// UnmarshalJSON reads either form (a manifest's plan).
func (c *ImportCheck) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*c = ImportCheck{Module: s}
		return nil
	}
	var m importMapping
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("import: a module or {module, after}: %w", err)
	}
	*c = ImportCheck{Module: m.Module, After: m.After}
	return nil
}

// moduleRe is a Python module's dotted name (uccl.ep).
var moduleRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

func (c *ImportCheck) problems(map[string]int) []checkProblem {
	var out []checkProblem
	field := ""
	if len(c.After) > 0 {
		field = "module"
	}
	if !moduleRe.MatchString(c.Module) {
		out = append(out, checkProblem{field, fmt.Sprintf("%q is not a Python module name (deep_ep, uccl.ep)", c.Module)})
	}
	for k, m := range c.After {
		if !moduleRe.MatchString(m) {
			out = append(out, checkProblem{fmt.Sprintf("after[%d]", k), fmt.Sprintf("%q is not a Python module name (torch)", m)})
		} else if m == c.Module || slices.Contains(c.After[:k], m) {
			out = append(out, checkProblem{fmt.Sprintf("after[%d]", k), fmt.Sprintf("%s is listed twice: after: names each module imported before %s once", m, c.Module)})
		}
	}
	return out
}

// What a test may need of the node (TestRun.Needs): an RDMA device, and the nvcc the
// recipe's runtime.nvcc says its JIT looks for.
const (
	NeedRDMA = "rdma"
	NeedNVCC = "nvcc"
)

// TestNeeds are what a test may need of the node (TestRun.Needs).
func TestNeeds() []string { return []string{NeedRDMA, NeedNVCC} }

// MinNodes is how many nodes the test needs (Nodes, at least 1).
func (t TestRun) MinNodes() int { return max(t.Nodes, 1) }

// Source is where a component comes from; exactly one field is set.
type Source struct {
	Git     *GitSource     `json:"git,omitempty"`
	Archive *ArchiveSource `json:"archive,omitempty"`
	// Python: the component is a package already installed in the Python environment
	// (the NVSHMEM wheel that vLLM and SGLang use); nothing is fetched.
	Python *PythonSource `json:"python,omitempty"`
}

// GitSource pins a repository at a full commit; Ref, when given, must point at Commit.
type GitSource struct {
	URL    string `json:"url" jsonschema:"format=uri"`
	Commit string `json:"commit" jsonschema:"pattern=^[0-9a-f]{40}$"`
	Ref    string `json:"ref,omitempty"`
}

// ArchiveSource pins a tarball by sha256.
type ArchiveSource struct {
	URL    string `json:"url" jsonschema:"format=uri"`
	SHA256 string `json:"sha256" jsonschema:"pattern=^[0-9a-f]{64}$"`
	// Strip drops this many leading directories (1 for nvshmem_src/).
	Strip int `json:"strip,omitempty" jsonschema:"minimum=0"`
}

// PythonWheel says how a component built here is packed as the Python package it
// replaces. It is a field of its own, not python-extension's wheel: true, because
// nothing here is built by setup.py: the files are the component's prefix, laid out
// where the replaced wheel keeps them, and the wheel's name and version are not the
// component's own (NAME==<version>+epbuild.<plan>, a PEP 440 local version that pip
// orders after the release it was built from).
type PythonWheel struct {
	// Package is the distribution replaced (nvidia-nccl-cu13); default: the package the
	// recipe's python source names (after --set C.package), the one the build replaces.
	Package string `json:"package,omitempty"`
	// Dir is where the files go in the wheel, as the replaced wheel lays them out
	// (nvidia/nccl).
	Dir string `json:"dir"`
	// Files are files or directories of the component's prefix, packed under Dir at the
	// same relative path (lib/libnccl.so.2, include); a symbolic link is packed as the
	// file it names (a wheel holds regular files).
	Files []string `json:"files" jsonschema:"minItems=1"`
}

// PythonSource names a package of the Python environment and the version it must have.
type PythonSource struct {
	Package string `json:"package"`
	Version string `json:"version,omitempty"`
}

// Step is one build step; exactly one field is set.
type Step struct {
	CMake           *CMakeStep           `json:"cmake,omitempty"`
	PythonExtension *PythonExtensionStep `json:"python-extension,omitempty"`
	Command         *CommandStep         `json:"command,omitempty"`
}

// CMakeStep configures, builds and installs a CMake project into the staged prefix.
type CMakeStep struct {
	// Options become -D KEY=VALUE, one argument each (cmake runs without a shell). A
	// CMAKE_*FLAGS value is a list of flags, read like shell words without expansion
	// ("-O2 '-DMSG=a b'" is two flags); each reaches the compiler as one literal argument.
	Options map[string]string `json:"options,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Dir is the CMake source directory inside the tree (default: the root); it may not
	// leave the tree.
	Dir string `json:"dir,omitempty"`
}

// PythonExtensionStep builds a Python package with a compiled extension (DeepEP's
// setup.py) and installs it into the staged prefix's python/ with its .dist-info (pip
// and importlib.metadata see it); Wheel also packs that tree into a reproducible wheel
// beside the artifact (<recipe>-<plan>.wheels/).
type PythonExtensionStep struct {
	Env   map[string]string `json:"env,omitempty"`
	Wheel bool              `json:"wheel,omitempty"`
}

// CommandStep runs a command in the tree; for what cmake and python-extension don't cover.
type CommandStep struct {
	Run []string          `json:"run" jsonschema:"minItems=1"`
	Env map[string]string `json:"env,omitempty"`
	Dir string            `json:"dir,omitempty"`
}

// Check is a post-build check on the component's staged prefix (and again by
// verify-install on the installed prefix); exactly one kind is set. Each field is a kind
// of the builder's check engine, of the same name: a new kind is a field here, an entry
// in the engine's registry and its implementation.
type Check struct {
	// Import: python3 can import this module from the prefix, from outside the build tree
	// (import: MODULE), after others where the module needs them loaded first (import:
	// {module: uccl.ep, after: [torch]}: an extension that finds libtorch through the torch
	// already imported).
	Import *ImportCheck `json:"import,omitempty"`
	// Arch: the ELF files matching File carry code for these GPU architectures.
	Arch *ArchCheck `json:"arch,omitempty"`
	// Symbol: the ELF file defines (or, with Defined false, leaves undefined) a symbol.
	Symbol *SymbolCheck `json:"symbol,omitempty"`
	// NVSHMEMBuildVars: the installed NVSHMEM was built with these variables.
	NVSHMEMBuildVars map[string]string `json:"nvshmem-build-vars,omitempty"`
	// NVSHMEMOptions: the installed NVSHMEM records, among its build variables, every
	// NVSHMEM_* cmake option of this component with the value the recipe (and --set) gave.
	NVSHMEMOptions bool `json:"nvshmem-options,omitempty"`
	// File: a file exists in the prefix (a relative glob that stays inside it).
	File string `json:"file,omitempty"`
	// Needed: the ELF files matching File link Lib (a DT_NEEDED entry).
	Needed *NeededCheck `json:"needed,omitempty"`
	// Runpath: the dynamic loader, searching as it would for the ELF files matching File,
	// finds Lib inside component From's prefix.
	Runpath *RunpathCheck `json:"runpath,omitempty"`
	// Libs: every library the ELF files need (DT_NEEDED, transitively) resolves inside the
	// prefix through RUNPATH entries that stay inside it, or is a named system library.
	Libs *LibsCheck `json:"libs,omitempty"`
	// NCCLVersion: the NCCL libraries matching this glob (lib/libnccl.so.2) say the
	// component's version through ncclGetVersion (called in a python3 process: no GPU
	// needed), and so does the prefix's include/nccl.h where there is one.
	NCCLVersion string `json:"nccl-version,omitempty"`
}

// LibsCheck says which libraries File may take from the host; everything else it needs
// must travel in the prefix.
type LibsCheck struct {
	File string `json:"file"`
	// System lists sonames (globs: libcudart.so.*) the host provides.
	System []string `json:"system,omitempty"`
}

func (c *LibsCheck) problems(map[string]int) []checkProblem {
	out := required("file", c.File)
	for k, s := range c.System {
		if _, err := path.Match(s, ""); err != nil || s == "" || strings.Contains(s, "/") {
			out = append(out, checkProblem{fmt.Sprintf("system[%d]", k), fmt.Sprintf("%q is not a library name or glob (libcudart.so.*)", s)})
		}
	}
	return out
}

// NeededCheck requires the ELF files matching File (a glob in the prefix) to link Lib: a
// DT_NEEDED entry of that name ("libx.so" also matches the versioned "libx.so.3").
type NeededCheck struct {
	File string `json:"file"`
	Lib  string `json:"lib"`
}

// RunpathCheck requires the dynamic loader to find Lib for the ELF files matching File
// inside component From's prefix (the NVSHMEM the recipe built, or the wheel it chose),
// searching as ld.so does: a preloaded library of that name (LD_PRELOAD), DT_RPATH,
// LD_LIBRARY_PATH, DT_RUNPATH, with $ORIGIN expanded, under the runtime env the install
// gives. A library found only in the system directories, or in another prefix, fails.
type RunpathCheck struct {
	File string `json:"file"`
	Lib  string `json:"lib"`
	From string `json:"from"`
}

func (c *NeededCheck) problems(map[string]int) []checkProblem {
	return append(required("file", c.File), required("lib", c.Lib)...)
}

func (c *RunpathCheck) problems(components map[string]int) []checkProblem {
	out := append(required("file", c.File), required("lib", c.Lib)...)
	if _, ok := components[c.From]; !ok {
		out = append(out, checkProblem{"from", fmt.Sprintf("from: %q names no component of this recipe (the one that provides %s)", c.From, c.Lib)})
	}
	return out
}

func (c *ArchCheck) problems(map[string]int) []checkProblem {
	out := required("file", c.File)
	for k, a := range c.Want {
		if !archRe.MatchString(a) {
			out = append(out, checkProblem{fmt.Sprintf("want[%d]", k), fmt.Sprintf("GPU architecture %q is not of the form sm_90, sm_90a, sm_100", a)})
		}
	}
	return out
}

// checkedSpec is a check's declaration that says what is wrong with its own fields, given
// the recipe's components (name → index).
type checkedSpec interface {
	problems(components map[string]int) []checkProblem
}

// checkProblem is a problem in one field of a check's declaration.
type checkProblem struct{ field, msg string }

func required(field, v string) []checkProblem {
	if strings.TrimSpace(v) == "" {
		return []checkProblem{{field, "missing " + field + ":"}}
	}
	return nil
}

// CheckKinds lists the kinds a check may declare (its fields' names), in field order.
func CheckKinds() []string {
	t := reflect.TypeFor[Check]()
	out := make([]string, t.NumField())
	for i := range out {
		out[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return out
}

// Kinds lists the kinds this check sets; a valid check sets exactly one.
func (c Check) Kinds() []string {
	v := reflect.ValueOf(c)
	var out []string
	for i, name := range CheckKinds() {
		if !v.Field(i).IsZero() {
			out = append(out, name)
		}
	}
	return out
}

// Declared gives the check's kind and its declaration (the one field set: a string, a
// map, a bool or a *XCheck); ok is false unless exactly one field is set.
func (c Check) Declared() (kind string, spec any, ok bool) {
	v := reflect.ValueOf(c)
	for i, name := range CheckKinds() {
		if v.Field(i).IsZero() {
			continue
		}
		if ok {
			return "", nil, false
		}
		kind, spec, ok = name, v.Field(i).Interface(), true
	}
	return kind, spec, ok
}

// ArchCheck requires GPU code for archs in the files matching File (a glob in the prefix).
type ArchCheck struct {
	File string   `json:"file"`
	Want []string `json:"want" jsonschema:"minItems=1"`
	// Native: every arch of Want needs machine code (a cubin) of its own; one met only by
	// PTX, which the driver compiles at load (or cannot, for an arch-specific target like
	// sm_103a), fails instead of warning.
	Native bool `json:"native,omitempty"`
}

// SymbolCheck requires a dynamic symbol to be defined (or undefined) in File.
type SymbolCheck struct {
	File    string `json:"file"`
	Name    string `json:"name"`
	Defined *bool  `json:"defined,omitempty"`
}

// Component returns the component with that name.
func (r *Recipe) Component(name string) (*Component, bool) {
	for i := range r.Components {
		if r.Components[i].Name == name {
			return &r.Components[i], true
		}
	}
	return nil, false
}

// Kind names the source kind: git, archive or python.
func (s Source) Kind() string {
	switch {
	case s.Git != nil:
		return "git"
	case s.Archive != nil:
		return "archive"
	case s.Python != nil:
		return "python"
	}
	return ""
}

// Pin is the one-line pin of a source: a commit, a sha256 or a Python package.
func (s Source) Pin() string {
	switch {
	case s.Git != nil:
		return s.Git.Commit
	case s.Archive != nil:
		return "sha256:" + s.Archive.SHA256
	case s.Python != nil:
		if s.Python.Version != "" {
			return "python:" + s.Python.Package + " " + s.Python.Version
		}
		return "python:" + s.Python.Package
	}
	return ""
}

// Kind names the step kind.
func (s Step) Kind() string {
	switch {
	case s.CMake != nil:
		return "cmake"
	case s.PythonExtension != nil:
		return "python-extension"
	case s.Command != nil:
		return "command"
	}
	return ""
}
