package builder

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/recipes"
)

// noPython makes the NCCL probe find nothing: the node's facts alone decide.
const noPython = "python3-absent-in-this-test"

func hostPlan(t *testing.T, recipe string, sets ...string) *Plan {
	t.Helper()
	res, err := NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve(recipe, sets)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func checkHost(t *testing.T, opts HostOptions) *HostReport {
	t.Helper()
	if opts.Python == "" {
		opts.Python = noPython
	}
	rep, err := CheckHost(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// result returns the result with that id, failing the test when it is absent.
func result(t *testing.T, rs []CheckResult, id string) CheckResult {
	t.Helper()
	r, ok := check.Find(rs, id)
	if !ok {
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		t.Fatalf("no result %s among %s", id, strings.Join(ids, ", "))
	}
	return r
}

// R13 on a captured RoCE node: link layer Ethernet, IBGDA, NVSHMEM 3.4.5.
func TestHostRuleR13OnARoCENode(t *testing.T) {
	root := hostfixture.GCPB200(t)
	rep := checkHost(t, HostOptions{Sysroot: host.NewSysroot(root), Plan: hostPlan(t, "gcp-b200", "nvshmem.version=3.4.5"), Mapped: -1})
	r := result(t, rep.Checks, "rule.R13")
	if r.Status != check.Warn || r.Rule != "R13" || !strings.Contains(r.Read, "host ib.link-layer=Ethernet") ||
		!strings.Contains(r.Fix, "--set nvshmem.version=3.5.19-1") || !strings.Contains(r.Why, "ibv_create_ah") {
		t.Errorf("R13: %+v", r)
	}
	if rep.Facts["ib.link-layer"] != "Ethernet" {
		t.Errorf("facts %v", rep.Facts)
	}
	// the recipe as shipped (3.5.19-1) does not break R13
	rep = checkHost(t, HostOptions{Sysroot: host.NewSysroot(root), Plan: hostPlan(t, "gcp-b200"), Mapped: -1})
	if _, ok := check.Find(rep.Checks, "rule.R13"); ok {
		t.Error("R13 on NVSHMEM 3.5.19-1")
	}
}

// R15 on a node with kernel 6.14 and DOCA-OFED 3.0.0; 3.2.1 passes.
func TestHostRuleR15KernelAndDOCAOFED(t *testing.T) {
	for _, tc := range []struct {
		doca string
		fire bool
	}{{"3.0.0-058000", true}, {"3.2.1-044000", false}, {"", false}} {
		root := hostfixture.GCPB200(t)
		f := hostfixture.At(t, root)
		f.Kernel("6.14.0-1007-gcp")
		pkgs := map[string]string{"rdma-core": "50.0-2build2"} // "": the inbox stack, no DOCA-OFED
		if tc.doca != "" {
			pkgs["doca-ofed"] = tc.doca
		}
		f.DpkgPackages(pkgs)
		rep := checkHost(t, HostOptions{Sysroot: host.NewSysroot(root), Plan: hostPlan(t, "gcp-b200"), Mapped: -1})
		r, ok := check.Find(rep.Checks, "rule.R15")
		if ok != tc.fire {
			t.Fatalf("DOCA-OFED %s: R15 %v (%+v), want %v", tc.doca, ok, r, tc.fire)
		}
		if ok && (r.Status != check.Fail || !strings.Contains(r.Fix, "DOCA-OFED 3.2.1") || !rep.Failed()) {
			t.Errorf("R15: %+v", r)
		}
	}
}

// pythonSite writes a site directory with an installed nvidia-nccl-cu12 of that version
// (its dist-info, as pip writes it) and a torch that cannot be imported here, so that the
// wheel's metadata is what decides even where a real torch is installed.
func pythonSite(t *testing.T, nccl string) string {
	t.Helper()
	site := t.TempDir()
	files := map[string]string{
		"torch/__init__.py":            "raise ImportError('torch is hidden in this test')\n",
		"nvidia/nccl/lib/libnccl.so.2": "",
	}
	if nccl != "" {
		di := "nvidia_nccl_cu12-" + nccl + ".dist-info/"
		files[di+"METADATA"] = "Metadata-Version: 2.1\nName: nvidia-nccl-cu12\nVersion: " + nccl + "\nSummary: NVIDIA Collective Communication Library (NCCL) Runtime\n"
		files[di+"RECORD"] = "nvidia/nccl/lib/libnccl.so.2,,\n" + di + "METADATA,,\n"
		files[di+"INSTALLER"] = "pip\n"
	}
	for p, body := range files {
		full := filepath.Join(site, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return site
}

// The NCCL a job loads: the wheel's metadata here (torch hidden), else NCCL_HOME.
func TestProbeNCCL(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skipf("python3 reads the wheel's metadata: %v", err)
	}
	env := append(CleanEnviron(os.Getenv), "PYTHONPATH="+pythonSite(t, "2.22.3"))
	if got := ProbeNCCL(context.Background(), "python3", env, nil); got.Version != "2.22.3" || !strings.Contains(got.Source, "nvidia-nccl-cu12") {
		t.Errorf("from the wheel: %+v", got)
	}
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, "include"), 0o755)
	os.WriteFile(filepath.Join(home, "include", "nccl.h"), []byte("#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n#define NCCL_SUFFIX \"\"\n"), 0o644)
	noWheel := append(CleanEnviron(os.Getenv), "PYTHONPATH="+pythonSite(t, ""))
	if got := ProbeNCCL(context.Background(), "python3", noWheel, []string{"NCCL_HOME=" + home}); got.Version != "2.21.5" || !strings.HasSuffix(got.Source, "nccl.h") {
		t.Errorf("from NCCL_HOME: %+v", got)
	}
	if got := ProbeNCCL(context.Background(), noPython, nil, nil); got.Version != "" {
		t.Errorf("from nothing: %+v", got)
	}
}

// R18 at run time: NCCL 2.22 loaded, lazy connect on; NCCL_RUNTIME_CONNECT=0 in the job's
// environment settles it. host.nccl.version compares it with the build's NCCL.
func TestHostRuleR18FromTheRuntimeNCCL(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skipf("python3 reads the wheel's metadata: %v", err)
	}
	root := hostfixture.GCPB200(t)
	plan := hostPlan(t, "ibrc-dualport") // nccl: the nvidia-nccl-cu12 wheel, 2.21.5-1 at build
	tc := &Toolchain{PythonPackages: map[string]PythonPackage{"nvidia-nccl-cu12": {Version: "2.21.5"}}}
	env := append(CleanEnviron(os.Getenv), "PYTHONPATH="+pythonSite(t, "2.22.3"))
	rep := checkHost(t, HostOptions{Sysroot: host.NewSysroot(root), Plan: plan, Toolchain: tc, Python: "python3", Env: env, Mapped: -1})
	r := result(t, rep.Checks, "rule.R18/runtime-connect")
	if r.Status != check.Warn || !strings.Contains(r.Fix, "NCCL_RUNTIME_CONNECT=0") || !strings.Contains(r.Read, "nccl 2.22.3") {
		t.Errorf("R18: %+v", r)
	}
	if rep.NCCL.Version != "2.22.3" || rep.Facts["nccl.version"] != "2.22.3" {
		t.Errorf("nccl %+v, facts %v", rep.NCCL, rep.Facts)
	}
	if c := result(t, rep.Checks, "host.nccl.version"); c.Status != check.Pass || c.Read != "NCCL runtime 2.22.3, built against 2.21.5" {
		t.Errorf("host.nccl.version: %+v", c)
	}
	rep = checkHost(t, HostOptions{Sysroot: host.NewSysroot(root), Plan: plan, Toolchain: tc, Python: "python3", Env: env,
		JobEnv: []string{"NCCL_RUNTIME_CONNECT=0"}, Mapped: -1})
	if _, ok := check.Find(rep.Checks, "rule.R18/runtime-connect"); ok {
		t.Error("R18 with NCCL_RUNTIME_CONNECT=0 in the job's environment")
	}
	// a runtime older than the build fails the node check
	old := append(CleanEnviron(os.Getenv), "PYTHONPATH="+pythonSite(t, "2.19.3"))
	rep = checkHost(t, HostOptions{Sysroot: host.NewSysroot(root), Plan: plan, Toolchain: tc, Python: "python3", Env: old, Mapped: -1})
	if c := result(t, rep.Checks, "host.nccl.version"); c.Status != check.Fail {
		t.Errorf("NCCL 2.19.3 against 2.21.5: %+v", c)
	}
}

// Where a node check and a rule judge the same fact, one verdict is given: the node
// check's, which names the rule; a rule stricter than the check stays.
func TestHostChecksAndRulesGiveOneVerdict(t *testing.T) {
	root := hostfixture.GCPB200With(t, hostfixture.NodeOpts{StreamMemOps: 1, RegistryDwords: "PeerMappingOverride=1;", NICName: hostfixture.MLX5Name})
	rep := checkHost(t, HostOptions{Sysroot: host.NewSysroot(root), Plan: hostPlan(t, "gcp-b200"), Mapped: -1})
	if pm := result(t, rep.Checks, "host.peermem"); pm.Status != check.Fail || !strings.Contains(pm.Rule, "R16/peer-memory") {
		t.Errorf("host.peermem: %+v", pm)
	}
	if r, ok := check.Find(rep.Checks, "rule.R16/peer-memory"); ok {
		t.Errorf("the rule repeats the node check: %+v", r)
	}
	if rep.Facts["peermem"] != "none" {
		t.Errorf("facts %v", rep.Facts)
	}
	// a passing check does not hide a failing or warning rule; a skipped one hides nothing
	kept := oneVerdict([]CheckResult{
		{ID: "host.x", Status: check.Pass, Rule: "R1/a R2"},
		{ID: "host.z", Status: check.Fail, Rule: "R4"},
		{ID: "rule.R4", Status: check.Fail, Rule: "R4"},
		{ID: "rule.R1/a", Status: check.Fail, Rule: "R1/a"},
		{ID: "rule.R2", Status: check.Warn, Rule: "R2"},
		{ID: "host.y", Status: check.Skip, Rule: "R3"},
		{ID: "rule.R3", Status: check.Warn, Rule: "R3"},
	})
	var ids []string
	for _, r := range kept {
		ids = append(ids, r.ID)
	}
	if strings.Join(ids, " ") != "host.x host.z rule.R1/a rule.R2 host.y rule.R3" {
		t.Errorf("kept %v", ids)
	}
}

// verify-install --host runs the node's checks and the host rules on the install's plan.
func TestVerifyHostWiring(t *testing.T) {
	prefix := freshInstall(t)
	root := hostfixture.GCPB200(t)
	hostfixture.At(t, root).Kernel("6.8.0-1015-gcp")
	rep, err := Verify(context.Background(), VerifyOptions{Prefix: prefix, Host: true, Sysroot: host.NewSysroot(root)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"host.gpus", "host.ib.devices", "host.nccl.version", "files", "process.single-nvshmem"} {
		result(t, rep.Checks, id)
	}
	if rep.Facts["kernel"] != "6.8.0" || rep.Facts["ib.driver"] != "mlx5_core" || rep.MappingLine == "" {
		t.Errorf("facts %v, mapping %q", rep.Facts, rep.MappingLine)
	}
	for _, c := range rep.Checks {
		if strings.HasPrefix(c.ID, "rule.") && c.Status == check.Fail {
			t.Errorf("the demo recipe breaks a host rule: %+v", c)
		}
	}
}
