package verify

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/recipes"
)

// Every field of recipes.Check is a registered kind that reads exactly that field's type,
// and the registry declares no kind recipes cannot write.
func TestEveryRecipeCheckFieldIsAKind(t *testing.T) {
	reg := Checks()
	declared := map[string]bool{}
	for _, k := range reg.Kinds() {
		if k.IsDeclared() {
			declared[k.Name] = true
		}
	}
	ct := reflect.TypeFor[recipes.Check]()
	for i, name := range recipes.CheckKinds() {
		if !declared[name] {
			t.Errorf("recipes.Check.%s (%s) has no declared kind in Checks()", ct.Field(i).Name, name)
			continue
		}
		delete(declared, name)
		// a non-zero declaration of the field's type runs without a type mismatch
		var ch recipes.Check
		f := reflect.ValueOf(&ch).Elem().Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x")
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Map:
			f.Set(reflect.MakeMap(f.Type()))
			f.SetMapIndex(reflect.ValueOf("K"), reflect.ValueOf("V"))
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
		}
		kind, spec, ok := ch.Declared()
		if !ok || kind != name {
			t.Errorf("%s: Declared() = %q, %v", name, kind, ok)
			continue
		}
		s := &Subject{Component: &plan.PlanComponent{Component: recipes.Component{Name: "c"}}, Root: t.TempDir(), Python: "python3-absent-for-this-test"}
		for _, r := range reg.Run(context.Background(), check.Staged, s, []check.Spec{{Kind: kind, Value: spec}}) {
			if strings.Contains(r.Why, "a bug in the registry") {
				t.Errorf("%s: %s", name, r.Why)
			}
		}
	}
	for name := range declared {
		t.Errorf("declared kind %s is no field of recipes.Check", name)
	}
}

// needed and runpath on real objects: an "extension" linking a "libnvshmem_host.so.3"
// that lies in the nvshmem component's prefix, with decoys elsewhere.
func TestNeededAndRunpathKinds(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skipf("gcc builds the objects: %v", err)
	}
	root := t.TempDir()
	build := func(dir string, args ...string) {
		t.Helper()
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	write := func(p, body string) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lib := write(filepath.Join(root, "src", "nv.c"), "int nvshmemx_init_status(void) { return 2; }\n")
	ext := write(filepath.Join(root, "src", "ext.c"), "extern int nvshmemx_init_status(void);\nint ep(void) { return nvshmemx_init_status(); }\n")
	bare := write(filepath.Join(root, "src", "bare.c"), "int ep(void) { return 0; }\n")
	nvPrefix := filepath.Join(root, "install", "nvshmem")
	torchLib := filepath.Join(root, "site-packages", "torch", "lib")
	for _, dir := range []string{filepath.Join(nvPrefix, "lib"), torchLib} {
		os.MkdirAll(dir, 0o755)
		build(dir, "-shared", "-fPIC", "-Wl,-soname,libnvshmem_host.so.3", "-o", filepath.Join(dir, "libnvshmem_host.so.3"), lib)
	}
	depPrefix := filepath.Join(root, "install", "deepep")
	py := filepath.Join(depPrefix, "python")
	os.MkdirAll(py, 0o755)
	// RUNPATH of the build: a directory that no longer exists where the install lives
	build(py, "-shared", "-fPIC", "-o", filepath.Join(py, "deep_ep_cpp.cpython-312-x86_64-linux-gnu.so"), ext,
		"-L"+filepath.Join(nvPrefix, "lib"), "-l:libnvshmem_host.so.3", "-Wl,--enable-new-dtags,-rpath,/build/stages/nvshmem/prefix/lib")
	// an extension built with $ORIGIN: found through its own RUNPATH
	build(py, "-shared", "-fPIC", "-o", filepath.Join(py, "origin_cpp.so"), ext,
		"-L"+filepath.Join(nvPrefix, "lib"), "-l:libnvshmem_host.so.3", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../../nvshmem/lib")
	// DeepEP without NVSHMEM (setup.py found none)
	build(py, "-shared", "-fPIC", "-o", filepath.Join(py, "bare_cpp.so"), bare)

	pc := &plan.PlanComponent{Component: recipes.Component{Name: "deepep", Checks: []recipes.Check{
		{Needed: &recipes.NeededCheck{File: "python/deep_ep_cpp*.so", Lib: "libnvshmem_host.so.3"}},
		{Runpath: &recipes.RunpathCheck{File: "python/deep_ep_cpp*.so", Lib: "libnvshmem_host.so.3", From: "nvshmem"}},
	}}}
	run := func(t *testing.T, c *plan.PlanComponent, env ...string) []CheckResult {
		t.Helper()
		s := &Subject{Component: c, Root: depPrefix, Prefixes: map[string]string{"nvshmem": nvPrefix, "deepep": depPrefix}, Env: env}
		return Checks().Run(context.Background(), check.Installed, s, Declarations(c))
	}
	want := func(t *testing.T, rs []CheckResult, needed, runpath check.Status, found string) {
		t.Helper()
		if len(rs) != 2 || rs[0].Status != needed || rs[1].Status != runpath || !strings.Contains(rs[1].Found, found) {
			t.Fatalf("results %+v; want needed %s, runpath %s finding %q", rs, needed, runpath, found)
		}
		for _, r := range rs {
			if strings.Contains(r.Found+r.Expected, depPrefix) {
				t.Errorf("a result names the prefix: %+v", r)
			}
		}
	}
	nvLib := filepath.Join(nvPrefix, "lib")
	t.Run("through LD_LIBRARY_PATH", func(t *testing.T) {
		want(t, run(t, pc, "LD_LIBRARY_PATH="+nvLib), check.Pass, check.Pass, "nvshmem:lib/libnvshmem_host.so.3 (via LD_LIBRARY_PATH)")
	})
	t.Run("torch's copy first", func(t *testing.T) {
		rs := run(t, pc, "LD_LIBRARY_PATH="+torchLib+":"+nvLib)
		want(t, rs, check.Pass, check.Fail, filepath.Join(torchLib, "libnvshmem_host.so.3"))
		if !strings.Contains(rs[1].Why, "outside") {
			t.Errorf("why: %q", rs[1].Why)
		}
	})
	t.Run("preloaded beats the search path", func(t *testing.T) {
		want(t, run(t, pc, "LD_LIBRARY_PATH="+torchLib, "LD_PRELOAD="+filepath.Join(nvLib, "libnvshmem_host.so.3")), check.Pass, check.Pass, "via LD_PRELOAD")
	})
	t.Run("nothing finds it", func(t *testing.T) {
		rs := run(t, pc)
		want(t, rs, check.Pass, check.Fail, "not found")
		if !strings.Contains(rs[1].Why, "/build/stages/nvshmem/prefix/lib") {
			t.Errorf("why does not show the RUNPATH: %q", rs[1].Why)
		}
	})
	t.Run("its own RUNPATH with $ORIGIN", func(t *testing.T) {
		c := *pc
		c.Checks = []recipes.Check{
			{Needed: &recipes.NeededCheck{File: "python/origin_cpp.so", Lib: "libnvshmem_host.so"}},
			{Runpath: &recipes.RunpathCheck{File: "python/origin_cpp.so", Lib: "libnvshmem_host.so", From: "nvshmem"}},
		}
		want(t, run(t, &c), check.Pass, check.Pass, "via DT_RUNPATH")
	})
	t.Run("built without NVSHMEM", func(t *testing.T) {
		c := *pc
		c.Checks = []recipes.Check{
			{Needed: &recipes.NeededCheck{File: "python/bare_cpp.so", Lib: "libnvshmem_host.so.3"}},
			{Runpath: &recipes.RunpathCheck{File: "python/bare_cpp.so", Lib: "libnvshmem_host.so.3", From: "nvshmem"}},
		}
		rs := run(t, &c, "LD_LIBRARY_PATH="+nvLib)
		want(t, rs, check.Fail, check.Fail, "no DT_NEEDED")
		if !strings.Contains(rs[0].Why, "drops NVSHMEM") {
			t.Errorf("needed why: %q", rs[0].Why)
		}
	})
	t.Run("no such file, no such component", func(t *testing.T) {
		c := *pc
		c.Checks = []recipes.Check{
			{Needed: &recipes.NeededCheck{File: "python/none*.so", Lib: "libnvshmem_host.so.3"}},
			{Runpath: &recipes.RunpathCheck{File: "python/deep_ep_cpp*.so", Lib: "libnvshmem_host.so.3", From: "nccl"}},
		}
		rs := run(t, &c)
		if len(rs) != 2 || rs[0].Status != check.Fail || rs[1].Status != check.Fail || !strings.Contains(rs[1].Found, "no prefix for component nccl") {
			t.Errorf("%+v", rs)
		}
	})
}

// A recipe declaring the new kinds validates them like any other field.
func TestRecipeValidatesNeededAndRunpath(t *testing.T) {
	body := `name: t
cluster: test
description: test
components:
  - name: deepep
    source:
      git: {url: "https://github.com/deepseek-ai/DeepEP", commit: 29d31c095796f3c8ece47ee9cdcc167051bbeed9}
    checks:
      - needed: {file: python/x.so}
      - runpath: {file: python/x.so, lib: libnvshmem_host.so.3, from: nvshmem}
      - {needed: {file: a, lib: b}, import: deep_ep}
`
	doc, err := recipes.Parse("t.yaml", []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	err = doc.Validate(nil)
	for _, want := range []string{"t.yaml:9:", "missing lib:", `t.yaml:10:`, `from: "nvshmem" names no component`, "t.yaml:11:", "a check has exactly one of", "needed, runpath, libs, nccl-version (found 2)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v\nwant %q", err, want)
		}
	}
}

// An import check with after: imports those modules first, as an extension that finds
// libtorch through the torch already loaded needs (UCCL-EP's uccl.ep): without them the
// module fails to import, with them it imports from the prefix.
func TestImportCheckAfter(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	prefix := t.TempDir()
	site := filepath.Join(prefix, "python")
	for name, body := range map[string]string{
		"torch_probe/__init__.py": "LOADED = True\n",
		"uccl_probe/__init__.py":  "import sys\nif 'torch_probe' not in sys.modules:\n    raise ImportError('libc10.so: cannot open shared object file')\n",
	} {
		p := filepath.Join(site, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &Subject{Component: &plan.PlanComponent{Component: recipes.Component{Name: "uccl-ep"}}, Root: prefix, Python: "python3",
		Env: []string{"PYTHONPATH=" + site, "PATH=" + os.Getenv("PATH")}}
	alone := checkImport(context.Background(), s, &recipes.ImportCheck{Module: "uccl_probe"})
	if len(alone) != 1 || alone[0].Status != check.Fail || !strings.Contains(alone[0].Found+alone[0].Why, "libc10") {
		t.Errorf("alone: %+v", alone)
	}
	after := checkImport(context.Background(), s, &recipes.ImportCheck{Module: "uccl_probe", After: []string{"torch_probe"}})
	if len(after) != 1 || after[0].Status != check.Pass {
		t.Errorf("after torch_probe: %+v", after)
	}
}

// cxx-runtime on real extensions: a module linked with libstdc++.a fails with its path and
// the fix, one linked with libstdc++.so passes, on the staged and the installed prefix;
// a component without a python-extension step, or with no shared object, gets no result.
func TestCXXRuntimeKind(t *testing.T) {
	gxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skipf("g++ builds the objects: %v", err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "m.cpp")
	if err := os.WriteFile(src, []byte("#include <locale>\nextern \"C\" int facets() { return std::has_facet<std::collate<char>>(std::locale()); }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	prefix := func(linkArgs ...string) string {
		p := t.TempDir()
		mod := filepath.Join(p, "python", "deep_ep", "_C.cpython-312-x86_64-linux-gnu.so")
		if err := os.MkdirAll(filepath.Dir(mod), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(gxx, append([]string{"-shared", "-fPIC", "-o", mod, src}, linkArgs...)...).CombinedOutput(); err != nil {
			t.Fatalf("g++: %v\n%s", err, out)
		}
		return p
	}
	ext := []recipes.Step{{PythonExtension: &recipes.PythonExtensionStep{}}}
	run := func(target check.Target, root string, build []recipes.Step) []CheckResult {
		s := &Subject{Component: &plan.PlanComponent{Component: recipes.Component{Name: "deepep", Build: build}}, Root: root}
		var out []CheckResult
		for _, r := range Checks().Run(context.Background(), target, s, nil) {
			if r.ID == "deepep.cxx-runtime" {
				out = append(out, r)
			}
		}
		return out
	}
	static, shared := prefix("-static-libstdc++"), prefix()
	for _, target := range []check.Target{check.Staged, check.Installed} {
		rs := run(target, static, ext)
		if len(rs) != 1 || rs[0].Status != check.Fail || !strings.Contains(rs[0].Found, "python/deep_ep/_C.cpython-312-x86_64-linux-gnu.so") ||
			strings.Contains(rs[0].Found, static) || !strings.Contains(rs[0].Fix, "libstdc++.so") {
			t.Errorf("%s, linked with libstdc++.a: %+v", target, rs)
		}
		if rs := run(target, shared, ext); len(rs) != 1 || rs[0].Status != check.Pass || rs[0].Found != "1 shared object, none with a libstdc++ of its own" {
			t.Errorf("%s, linked with libstdc++.so: %+v", target, rs)
		}
	}
	if rs := run(check.Staged, static, []recipes.Step{{Command: &recipes.CommandStep{}}}); len(rs) != 0 {
		t.Errorf("a component with no python-extension step: %+v", rs)
	}
	if rs := run(check.Staged, t.TempDir(), ext); len(rs) != 0 {
		t.Errorf("a prefix with no shared object: %+v", rs)
	}
}
