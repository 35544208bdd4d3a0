package recipes

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEmbeddedRecipesValidate(t *testing.T) {
	lib := NewLibrary()
	names, err := lib.Names()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"efa-aws", "gcp-b200", "ibrc-dualport", "single-node"} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("recipe %s is not embedded (have %v)", want, names)
		}
	}
	for _, n := range names {
		doc, err := lib.Load(n)
		if err != nil {
			t.Fatalf("load %s: %v", n, err)
		}
		if doc.Recipe.Name != n {
			t.Errorf("recipes/%s.yaml declares name %q", n, doc.Recipe.Name)
		}
		if err := doc.Validate(nil); err != nil {
			t.Errorf("validate %s: %v", n, err)
		}
		data, _ := fs.ReadFile(Embedded(), n+".yaml")
		if !strings.HasPrefix(string(data), "# yaml-language-server: $schema=./schema.json") {
			t.Errorf("recipes/%s.yaml does not reference the schema on its first line", n)
		}
	}
}

// The pins of KNOWLEDGE.md, as the recipes must carry them.
func TestRecipePins(t *testing.T) {
	want := map[string]map[string]string{
		"gcp-b200":      {"deepep": "29d31c095796f3c8ece47ee9cdcc167051bbeed9", "nvshmem": "919760f413fb834e76382d129ba9c3314ce722be"},
		"efa-aws":       {"deepep": "29d31c095796f3c8ece47ee9cdcc167051bbeed9", "nvshmem": "131da55f643ac87c810ba0bc51d359258bf433a1"},
		"ibrc-dualport": {"deepep": "a84a24808fb0ea732f49b874cc456a69dde69076", "nvshmem": "sha256:eb2c8fb3b7084c2db86bd9fd905387909f1dfd483e7b45f7b3c3d5fcf5374b5a"},
		"single-node":   {"deepep": "29d31c095796f3c8ece47ee9cdcc167051bbeed9"},
	}
	lib := NewLibrary()
	for name, pins := range want {
		doc, err := lib.Load(name)
		if err != nil {
			t.Fatal(err)
		}
		for comp, pin := range pins {
			c, ok := doc.Recipe.Component(comp)
			if !ok {
				t.Fatalf("%s has no component %s", name, comp)
			}
			if got := c.Source.Pin(); got != pin {
				t.Errorf("%s %s pinned at %s, want %s", name, comp, got, pin)
			}
		}
	}
}

func writeRecipe(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "r.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodRecipe = `name: t
cluster: test
description: a test recipe
components:
  - name: nvshmem
    version: 3.4.5-0
    source:
      git:
        url: https://github.com/NVIDIA/nvshmem
        commit: 131da55f643ac87c810ba0bc51d359258bf433a1
  - name: deepep
    source:
      git:
        url: https://github.com/deepseek-ai/DeepEP
        commit: 29d31c095796f3c8ece47ee9cdcc167051bbeed9
    depends: [nvshmem]
    build:
      - python-extension:
          env:
            NVSHMEM_DIR: "{{nvshmem.prefix}}"
`

func loadAndValidate(t *testing.T, body string, sets ...string) error {
	t.Helper()
	doc, err := LoadFile(writeRecipe(t, body))
	if err != nil {
		return err
	}
	if err := doc.Apply(sets); err != nil {
		return err
	}
	return doc.Validate(nil)
}

func TestRecipeErrors(t *testing.T) {
	cases := []struct {
		name, body string
		sets       []string
		want       []string // substrings of the error
		line, col  int      // where the first error points (0: not checked)
	}{
		{"good", goodRecipe, nil, nil, 0, 0},
		{"misspelt key", strings.Replace(goodRecipe, "    depends:", "    depend:", 1), nil, []string{"unknown field \"depend\"", "r.yaml:16:5"}, 16, 5},
		{"duplicate key", strings.Replace(goodRecipe, "cluster: test\n", "cluster: test\ncluster: again\n", 1), nil, []string{"duplicate", "r.yaml:3:1"}, 3, 1},
		{"wrong type", strings.Replace(goodRecipe, "    depends: [nvshmem]", "    depends: {a: b}", 1), nil, []string{"r.yaml:16"}, 16, 0},
		{"short sha", strings.Replace(goodRecipe, "29d31c095796f3c8ece47ee9cdcc167051bbeed9", "29d31c0", 1), nil, []string{"short SHA", "full 40-hex commit is required", "r.yaml:15:17"}, 15, 17},
		{"not hex", strings.Replace(goodRecipe, "29d31c095796f3c8ece47ee9cdcc167051bbeed9", "main", 1), nil, []string{"not a commit id", "ref:"}, 0, 0},
		{"unknown dep", strings.Replace(goodRecipe, "depends: [nvshmem]", "depends: [nccl]", 1), nil, []string{"depends on \"nccl\"", "r.yaml:16"}, 0, 0},
		{"bad env", strings.Replace(goodRecipe, "NVSHMEM_DIR:", "1BAD:", 1), nil, []string{"1BAD"}, 0, 0},
		{"bad template", strings.Replace(goodRecipe, "{{nvshmem.prefix}}", "{{nvshmem.home}}", 1), nil, []string{"unknown template"}, 0, 0},
		// the build host's MPI: only where the toolchain requires one, so preflight finds it
		{"mpi.home without mpi", strings.Replace(goodRecipe, "{{nvshmem.prefix}}", "{{mpi.home}}", 1), nil, []string{"template {{mpi.home}} needs an MPI", "require:"}, 0, 0},
		{"mpi.home", strings.Replace(strings.Replace(goodRecipe, "{{nvshmem.prefix}}", "{{mpi.home}}", 1), "components:\n", "toolchain:\n  require: [mpi]\ncomponents:\n", 1), nil, nil, 0, 0},
		{"cycle", strings.Replace(goodRecipe, "        commit: 131da55f643ac87c810ba0bc51d359258bf433a1\n", "        commit: 131da55f643ac87c810ba0bc51d359258bf433a1\n    depends: [deepep]\n", 1), nil, []string{"dependency cycle", "→"}, 0, 0},
		{"two sources", strings.Replace(goodRecipe, "    source:\n      git:\n        url: https://github.com/NVIDIA/nvshmem", "    source:\n      python: {package: nvidia-nvshmem-cu12}\n      git:\n        url: https://github.com/NVIDIA/nvshmem", 1), nil, []string{"exactly one of git, archive, python"}, 0, 0},
		{"bad version", strings.Replace(goodRecipe, "3.4.5-0", "3.4.5-rc", 1), nil, []string{"package revision"}, 0, 0},
		{"set short sha", goodRecipe, []string{"nvshmem.commit=919760f"}, []string{"--set nvshmem.commit=919760f", "short SHA"}, 0, 0},
		{"set unknown component", goodRecipe, []string{"nccl.commit=919760f413fb834e76382d129ba9c3314ce722be"}, []string{"no component \"nccl\""}, 0, 0},
		{"set no equals", goodRecipe, []string{"nvshmem.commit"}, []string{"KEY=VALUE"}, 0, 0},
		{"set archive key on git", goodRecipe, []string{"nvshmem.sha256=00"}, []string{"not an archive"}, 0, 0},
		{"buffer bytes", goodRecipe + "runtime:\n  buffer-bytes: 2146961792\n", nil, nil, 0, 0},
		{"buffer bytes zero", goodRecipe + "runtime:\n  buffer-bytes: 0\n", nil, []string{"r.yaml:22:17", "at least 1"}, 22, 17},
		{"buffer bytes with a suffix", goodRecipe + "runtime:\n  buffer-bytes: 2G\n", nil, []string{"r.yaml:22"}, 22, 0},
		{"buffer bytes negative", goodRecipe + "runtime:\n  buffer-bytes: -1\n", nil, []string{"r.yaml:22"}, 22, 0},
		{"unknown runtime key", goodRecipe + "runtime:\n  heap-bytes: 1\n", nil, []string{"unknown field \"heap-bytes\"", "r.yaml:22"}, 22, 0},
		{"set buffer bytes with a suffix", goodRecipe, []string{"runtime.buffer-bytes=2G"}, []string{"--set runtime.buffer-bytes=2G", "number of bytes"}, 0, 0},
		{"set buffer bytes zero", goodRecipe, []string{"runtime.buffer-bytes=0"}, []string{"--set runtime.buffer-bytes=0", "at least 1"}, 0, 0},
		{"set another runtime key", goodRecipe, []string{"runtime.heap=1"}, []string{"unknown runtime key \"heap\""}, 0, 0},
		{"job shape", goodRecipe + "runtime:\n  gpus-per-node: 4\n  ranks: 16\n  hidden: 7168\n  low-latency: false\n", nil, nil, 0, 0},
		{"ranks zero", goodRecipe + "runtime:\n  ranks: 0\n", nil, []string{"r.yaml:22:10", "ranks is the job's ranks in all, at least 1"}, 22, 10},
		{"hidden a list", goodRecipe + "runtime:\n  hidden: [4096, 7168]\n", nil, []string{"r.yaml:22"}, 22, 0},
		{"low-latency not a bool", goodRecipe + "runtime:\n  low-latency: 2\n", nil, []string{"r.yaml:22"}, 22, 0},
		{"set gpus-per-node not a number", goodRecipe, []string{"runtime.gpus-per-node=four"}, []string{"--set runtime.gpus-per-node=four", "whole number"}, 0, 0},
		{"set hidden zero", goodRecipe, []string{"runtime.hidden=0"}, []string{"--set runtime.hidden=0", "at least 1"}, 0, 0},
		{"set low-latency not a bool", goodRecipe, []string{"runtime.low-latency=maybe"}, []string{"--set runtime.low-latency=maybe", "true or false"}, 0, 0},
		{"host arch", goodRecipe + "toolchain:\n  host-arch: [aarch64, x86_64]\n", nil, nil, 0, 0},
		{"host arch by Go's name", goodRecipe + "toolchain:\n  host-arch: [arm64]\n", nil, []string{"r.yaml:22:15", `host-arch "arm64": write aarch64`}, 22, 15},
		{"host arch unknown", goodRecipe + "toolchain:\n  host-arch: [x86_64, riscv64]\n", nil, []string{"r.yaml:22:23", `"riscv64" is no build host machine`, "x86_64 or aarch64 (uname -m", "leave host-arch out"}, 22, 23},
		{"host arch twice", goodRecipe + "toolchain:\n  host-arch: [aarch64, aarch64]\n", nil, []string{"r.yaml:22:24", "listed twice"}, 22, 24},
		{"host arch not a list", goodRecipe + "toolchain:\n  host-arch: {a: b}\n", nil, []string{"r.yaml:22"}, 22, 0},
		{"set host arch amd64", goodRecipe, []string{"toolchain.host-arch=amd64"}, []string{"--set toolchain.host-arch=amd64", "write x86_64"}, 0, 0},
		{"mnnvl", goodRecipe + "runtime:\n  gpus-per-node: 4\n  mnnvl: true\n", nil, nil, 0, 0},
		{"mnnvl not a bool", goodRecipe + "runtime:\n  mnnvl: yes-please\n", nil, []string{"r.yaml:22"}, 22, 0},
		{"set mnnvl not a bool", goodRecipe, []string{"runtime.mnnvl=maybe"}, []string{"--set runtime.mnnvl=maybe", "true or false"}, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := loadAndValidate(t, c.body, c.sets...)
			if len(c.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			var ec interface{ ExitCode() int }
			if !errors.As(err, &ec) || ec.ExitCode() != 2 {
				t.Errorf("error is not bad input (exit 2): %T", err)
			}
			if c.line > 0 {
				var e *Error
				var es Errors
				switch {
				case errors.As(err, &es):
					e = es[0]
				case errors.As(err, &e):
				}
				if e == nil || e.Line != c.line || (c.col > 0 && e.Col != c.col) {
					t.Errorf("error located at %+v, want line %d col %d", e, c.line, c.col)
				}
			}
		})
	}
}

func TestSetOverrides(t *testing.T) {
	doc, err := LoadFile(writeRecipe(t, goodRecipe))
	if err != nil {
		t.Fatal(err)
	}
	err = doc.Apply([]string{
		"nvshmem.commit=919760f413fb834e76382d129ba9c3314ce722be",
		"nvshmem.version=3.5.19-1",
		"deepep.env.TORCH_CUDA_ARCH_LIST=10.0",
		"env.NVSHMEM_IB_GID_INDEX=3",
		"toolchain.arch=sm_90a,sm_100",
		"deepep.patches=a,b",
		"runtime.buffer-bytes=2146961792",
		"runtime.gpus-per-node=4",
		"runtime.ranks=16",
		"runtime.hidden=7168",
		"runtime.low-latency=true",
		"toolchain.host-arch=aarch64",
		"runtime.mnnvl=true",
	})
	if err != nil {
		t.Fatal(err)
	}
	r := doc.Recipe
	nv, _ := r.Component("nvshmem")
	dp, _ := r.Component("deepep")
	if nv.Source.Git.Commit != "919760f413fb834e76382d129ba9c3314ce722be" || nv.Version != "3.5.19-1" {
		t.Errorf("nvshmem not overridden: %+v %s", nv.Source.Git, nv.Version)
	}
	if dp.Build[0].PythonExtension.Env["TORCH_CUDA_ARCH_LIST"] != "10.0" || r.Env["NVSHMEM_IB_GID_INDEX"] != "3" {
		t.Errorf("env not overridden")
	}
	if strings.Join(r.Toolchain.Arch, " ") != "sm_90a sm_100" || strings.Join(dp.Patches, " ") != "a b" {
		t.Errorf("lists not overridden: %v %v", r.Toolchain.Arch, dp.Patches)
	}
	if rt := r.Runtime; rt.BufferBytes == nil || *rt.BufferBytes != 2146961792 || rt.GPUsPerNode == nil || *rt.GPUsPerNode != 4 ||
		rt.Ranks == nil || *rt.Ranks != 16 || rt.Hidden == nil || *rt.Hidden != 7168 || rt.LowLatency == nil || !*rt.LowLatency {
		t.Errorf("runtime not overridden: %+v", rt)
	}
	if !slices.Equal(r.Toolchain.HostArch, []string{"aarch64"}) || !r.Runtime.MNNVL {
		t.Errorf("host-arch or mnnvl not overridden: %v %v", r.Toolchain.HostArch, r.Runtime.MNNVL)
	}
	if err := doc.Validate(nil); err != nil {
		t.Fatal(err)
	}
	if err := doc.Apply([]string{"toolchain.host-arch=", "runtime.mnnvl="}); err != nil || doc.Recipe.Toolchain.HostArch != nil || doc.Recipe.Runtime.MNNVL {
		t.Errorf("an empty value leaves host-arch and mnnvl undeclared: %v %+v", err, doc.Recipe)
	}
	if err := doc.Apply([]string{"runtime.ranks=", "runtime.low-latency="}); err != nil || doc.Recipe.Runtime.Ranks != nil || doc.Recipe.Runtime.LowLatency != nil {
		t.Errorf("an empty value leaves the key undeclared: %v %+v", err, doc.Recipe.Runtime)
	}
	if err := doc.Apply([]string{"runtime.buffer-bytes="}); err != nil || doc.Recipe.Runtime.BufferBytes != nil {
		t.Errorf("an empty value leaves the buffer undeclared: %v %v", err, doc.Recipe.Runtime.BufferBytes)
	}
}

func TestOrder(t *testing.T) {
	doc, err := LoadFile(writeRecipe(t, strings.Replace(goodRecipe, "components:\n", "components:\n  - name: app\n    source: {python: {package: x}}\n    depends: [deepep]\n", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(doc.Recipe.Order(), " "); got != "nvshmem deepep app" {
		t.Errorf("order %q", got)
	}
}

// FuzzLoad: no input makes the loader panic, and an accepted recipe validates without
// panicking and survives its own overrides.
func FuzzLoad(f *testing.F) {
	f.Add([]byte(goodRecipe))
	f.Add([]byte("name: [\n"))
	f.Add([]byte("components:\n  - {name: a, source: {archive: {url: 'http://x/y', sha256: ab, strip: -1}}}\n"))
	for _, n := range []string{"gcp-b200", "efa-aws", "ibrc-dualport", "single-node"} {
		b, err := fs.ReadFile(Embedded(), n+".yaml")
		if err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := Parse("fuzz.yaml", data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("decode error is not a located *Error: %T %v", err, err)
			}
			return
		}
		_ = doc.Validate(nil)
		_ = doc.Recipe.Order()
	})
}

func TestSetSourceKind(t *testing.T) {
	doc, err := NewLibrary().Load("ibrc-dualport")
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Apply([]string{"nvshmem.source=svn"}); err == nil || !strings.Contains(err.Error(), "source must be git or archive") || !strings.Contains(err.Error(), "--set nvshmem.source=svn") {
		t.Errorf("nvshmem.source=svn: %v", err)
	}
	if err := doc.Apply([]string{"nccl.source=git"}); err == nil || !strings.Contains(err.Error(), "comes from the Python environment") {
		t.Errorf("nccl.source=git on a python component: %v", err)
	}
	if err := doc.Apply([]string{"nvshmem.source=git"}); err != nil {
		t.Errorf("nvshmem.source=git: %v", err)
	}
}

// A component from the Python environment may carry build steps only where the catalogue
// knows releases to build (NCCL); preload names files of the prefix; source=python keeps
// a Python-environment component there and is refused on any other.
func TestPythonComponentWithSteps(t *testing.T) {
	const body = `name: t
cluster: test
description: a test recipe
components:
  - name: NAME
    source:
      python: {package: nvidia-nccl-cu12}
    build:
      - command: {run: [make, -C, src, lib]}
    preload: [PRELOAD]
`
	recipe := func(name, preload string) string {
		return strings.NewReplacer("NAME", name, "PRELOAD", preload).Replace(body)
	}
	if err := loadAndValidate(t, recipe("nccl", "lib/libnccl.so.2")); err != nil {
		t.Errorf("nccl from torch with steps to build a release: %v", err)
	}
	if err := loadAndValidate(t, recipe("fabric", "lib/libfabric.so.1")); err == nil || !strings.Contains(err.Error(), "has nothing to build") || !strings.Contains(err.Error(), "r.yaml:9:") {
		t.Errorf("steps on a Python component the catalogue does not know: %v", err)
	}
	for _, bad := range []string{"/usr/lib/libnccl.so.2", "../x/libnccl.so.2", "lib/libnccl.so*", "lib/a b.so", "lib/a.so:lib/b.so"} {
		if err := loadAndValidate(t, recipe("nccl", `"`+bad+`"`)); err == nil || !strings.Contains(err.Error(), "not a file of the component's prefix") {
			t.Errorf("preload %q: %v", bad, err)
		}
	}
	if err := loadAndValidate(t, recipe("nccl", "lib/libnccl.so.2"), "nccl.source=python"); err != nil {
		t.Errorf("nccl.source=python: %v", err)
	}
	if err := loadAndValidate(t, goodRecipe, "nvshmem.source=python"); err == nil || !strings.Contains(err.Error(), "has a git source") {
		t.Errorf("nvshmem.source=python on a git component: %v", err)
	}
}

// ApplyPreloads preloads the files of a component built here, after the recipe's own
// LD_PRELOAD; one taken from the Python environment preloads nothing.
func TestApplyPreloads(t *testing.T) {
	doc, err := NewLibrary().Load("gcp-b200")
	if err != nil {
		t.Fatal(err)
	}
	doc.ApplyPreloads()
	if got := doc.Recipe.Env["LD_PRELOAD"]; got != "{{nvshmem.prefix}}/lib/libnvshmem_host.so.3" {
		t.Errorf("torch's NCCL: LD_PRELOAD %q", got)
	}
	c, _ := doc.Recipe.Component("nccl")
	c.Source = Source{Git: &GitSource{URL: "https://github.com/NVIDIA/nccl", Commit: "f1308997d0420148b1be1c24d63f19d902ae589b"}}
	doc.ApplyPreloads()
	if got := doc.Recipe.Env["LD_PRELOAD"]; got != "{{nvshmem.prefix}}/lib/libnvshmem_host.so.3:{{nccl.prefix}}/lib/libnccl.so.2" {
		t.Errorf("NCCL built here: LD_PRELOAD %q", got)
	}
	if err := doc.Validate(nil); err != nil {
		t.Errorf("the preloaded env validates: %v", err)
	}
}

// An import check is a module name, or {module, after}: the module form reads and writes
// as before (a plan's JSON, and so its key, unchanged); the mapping keeps its order; bad
// names, a module listed twice and unknown keys are refused where they stand.
func TestImportCheckForms(t *testing.T) {
	withChecks := func(checks string) string {
		return strings.Replace(goodRecipe, "    depends: [nvshmem]\n", "    depends: [nvshmem]\n    checks:\n"+checks, 1)
	}
	doc, err := LoadFile(writeRecipe(t, withChecks("      - import: deep_ep\n      - import: {module: uccl.ep, after: [torch, numpy]}\n")))
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(nil); err != nil {
		t.Fatal(err)
	}
	c, _ := doc.Recipe.Component("deepep")
	if len(c.Checks) != 2 || c.Checks[0].Import == nil || c.Checks[0].Import.Module != "deep_ep" || len(c.Checks[0].Import.After) != 0 ||
		c.Checks[1].Import == nil || c.Checks[1].Import.Module != "uccl.ep" || !slices.Equal(c.Checks[1].Import.After, []string{"torch", "numpy"}) {
		t.Fatalf("checks read as %+v", c.Checks)
	}
	b, err := json.Marshal(c.Checks)
	if err != nil || string(b) != `[{"import":"deep_ep"},{"import":{"module":"uccl.ep","after":["torch","numpy"]}}]` {
		t.Fatalf("JSON %s %v", b, err)
	}
	var back []Check
	if err := json.Unmarshal(b, &back); err != nil || back[0].Import.Module != "deep_ep" || !slices.Equal(back[1].Import.After, []string{"torch", "numpy"}) {
		t.Fatalf("JSON back: %+v %v", back, err)
	}
	for _, c := range []struct{ checks, want string }{
		{"      - import: 'os; import sys'\n", "is not a Python module name"},
		{"      - import: {module: uccl.ep, after: [torch, torch]}\n", "torch is listed twice"},
		{"      - import: {module: uccl.ep, after: [uccl.ep]}\n", "listed twice"},
		{"      - import: {module: uccl.ep, after: ['torch;x']}\n", `"torch;x" is not a Python module name`},
		{"      - import: {module: uccl.ep, afterr: [torch]}\n", "afterr"},
	} {
		err := loadAndValidate(t, withChecks(c.checks))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "r.yaml:") {
			t.Errorf("%q: %v, want %q at a line of r.yaml", c.checks, err, c.want)
		}
	}
}
