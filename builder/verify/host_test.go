package verify

import (
	"github.com/epbuild/epbuild/builder/internal/fixture"

	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// noPython makes the NCCL probe find nothing: the node's facts alone decide.
const noPython = "python3-absent-in-this-test"

func hostPlan(t *testing.T, recipe string, sets ...string) *plan.Plan {
	t.Helper()
	res, err := plan.NewResolver(recipes.NewLibrary())
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

// R13 on a captured RoCE node: link layer Ethernet, IBGDA, NVSHMEM 3.4.5.
func TestHostRuleR13OnARoCENode(t *testing.T) {
	root := hostfixture.GCPB200(t)
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "gcp-b200", "nvshmem.version=3.4.5"), Mapped: -1})
	r := fixture.Result(t, rep.Checks, "rule.R13")
	if r.Status != check.Warn || r.Rule != "R13" || !strings.Contains(r.Read, "host ib.link-layer=Ethernet") ||
		!strings.Contains(r.Fix, "--set nvshmem.version=3.5.19-1") || !strings.Contains(r.Why, "ibv_create_ah") {
		t.Errorf("R13: %+v", r)
	}
	if rep.Facts["ib.link-layer"] != "Ethernet" {
		t.Errorf("facts %v", rep.Facts)
	}
	// the recipe as shipped (3.5.19-1) does not break R13
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "gcp-b200"), Mapped: -1})
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
		rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "gcp-b200"), Mapped: -1})
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
	if got := toolchain.ProbeNCCL(context.Background(), "python3", env, nil); got.Version != "2.22.3" || !strings.Contains(got.Source, "nvidia-nccl-cu12") {
		t.Errorf("from the wheel: %+v", got)
	}
	home := t.TempDir()
	os.MkdirAll(filepath.Join(home, "include"), 0o755)
	os.WriteFile(filepath.Join(home, "include", "nccl.h"), []byte("#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n#define NCCL_SUFFIX \"\"\n"), 0o644)
	noWheel := append(CleanEnviron(os.Getenv), "PYTHONPATH="+pythonSite(t, ""))
	if got := toolchain.ProbeNCCL(context.Background(), "python3", noWheel, []string{"NCCL_HOME=" + home}); got.Version != "2.21.5" || !strings.HasSuffix(got.Source, "nccl.h") {
		t.Errorf("from NCCL_HOME: %+v", got)
	}
	if got := toolchain.ProbeNCCL(context.Background(), noPython, nil, nil); got.Version != "" {
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
	tc := &toolchain.Toolchain{PythonPackages: map[string]toolchain.PythonPackage{"nvidia-nccl-cu12": {Version: "2.21.5"}}}
	env := append(CleanEnviron(os.Getenv), "PYTHONPATH="+pythonSite(t, "2.22.3"))
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Toolchain: tc, Python: "python3", Env: env, Mapped: -1})
	r := fixture.Result(t, rep.Checks, "rule.R18/runtime-connect")
	if r.Status != check.Warn || !strings.Contains(r.Fix, "NCCL_RUNTIME_CONNECT=0") || !strings.Contains(r.Read, "nccl 2.22.3") {
		t.Errorf("R18: %+v", r)
	}
	if rep.NCCL.Version != "2.22.3" || rep.Facts["nccl.version"] != "2.22.3" {
		t.Errorf("nccl %+v, facts %v", rep.NCCL, rep.Facts)
	}
	if c := fixture.Result(t, rep.Checks, "host.nccl.version"); c.Status != check.Pass || c.Read != "NCCL runtime 2.22.3, built against 2.21.5" {
		t.Errorf("host.nccl.version: %+v", c)
	}
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Toolchain: tc, Python: "python3", Env: env,
		JobEnv: []string{"NCCL_RUNTIME_CONNECT=0"}, Mapped: -1})
	if _, ok := check.Find(rep.Checks, "rule.R18/runtime-connect"); ok {
		t.Error("R18 with NCCL_RUNTIME_CONNECT=0 in the job's environment")
	}
	// a runtime older than the build fails the node check
	old := append(CleanEnviron(os.Getenv), "PYTHONPATH="+pythonSite(t, "2.19.3"))
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Toolchain: tc, Python: "python3", Env: old, Mapped: -1})
	if c := fixture.Result(t, rep.Checks, "host.nccl.version"); c.Status != check.Fail {
		t.Errorf("NCCL 2.19.3 against 2.21.5: %+v", c)
	}
}

// Where a node check and a rule judge the same fact, one verdict is given: the node
// check's, which names the rule; a rule stricter than the check stays.
func TestHostChecksAndRulesGiveOneVerdict(t *testing.T) {
	root := hostfixture.GCPB200With(t, hostfixture.NodeOpts{Peermem: true, StreamMemOps: 1, RegistryDwords: "PeerMappingOverride=1;", NICName: hostfixture.RoCEName})
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "gcp-b200", "env.NVSHMEM_HCA_PREFIX="), Mapped: -1})
	if c := fixture.Result(t, rep.Checks, "host.ib.devices"); c.Status != check.Fail || !strings.Contains(c.Rule, "R14/host-names") {
		t.Errorf("host.ib.devices: %+v", c)
	}
	if r, ok := check.Find(rep.Checks, "rule.R14/host-names"); ok {
		t.Errorf("the rule repeats the node check: %+v", r)
	}
	if rep.Facts["ib.name-prefix"] != "rocep" {
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

// Peer memory and the driver's regkeys are the rules' to judge (R16, R34), on the facts
// the node gives: a node without nvidia_peermem, without dma-buf and without the regkeys
// fails them; the open kernel modules' dma-buf settle peer memory.
func TestHostRulesJudgePeerMemoryAndRegkeys(t *testing.T) {
	root := hostfixture.GCPB200With(t, hostfixture.NodeOpts{NICName: hostfixture.MLX5Name})
	f := hostfixture.At(t, root)
	f.Kernel("6.8.0-1015-gcp")
	f.NvidiaVersion(false)
	plan := hostPlan(t, "gcp-b200")
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Mapped: -1})
	for id, st := range map[string]check.Status{"rule.R34": check.Fail, "rule.R16/peer-mapping-override": check.Fail, "rule.R16/stream-memops": check.Warn} {
		if r := fixture.Result(t, rep.Checks, id); r.Status != st {
			t.Errorf("%s: %+v", id, r)
		}
	}
	if r := fixture.Result(t, rep.Checks, "rule.R34"); !strings.Contains(r.Read, "host dmabuf=unsupported") || !strings.Contains(r.Fix, "modprobe nvidia_peermem") {
		t.Errorf("R34: %+v", r)
	}
	for _, gone := range []string{"host.peermem", "host.regkey.peer-mapping-override", "host.regkey.stream-memops", "host.roce.gid-type"} {
		if _, ok := check.Find(rep.Checks, gone); ok {
			t.Errorf("%s judges what a rule judges", gone)
		}
	}
	f.NvidiaVersion(true)
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Mapped: -1})
	if r, ok := check.Find(rep.Checks, "rule.R34"); ok {
		t.Errorf("dma-buf with the open modules: %+v", r)
	}
	// NVSHMEM_IB_DISABLE_DMABUF in the job's environment takes it away again
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Mapped: -1, JobEnv: []string{"NVSHMEM_IB_DISABLE_DMABUF=1"}})
	if r := fixture.Result(t, rep.Checks, "rule.R34"); r.Status != check.Fail {
		t.Errorf("dma-buf disabled by the job: %+v", r)
	}
}

// R31 with NVSHMEM_IB_GID_INDEX unset: NVSHMEM picks a RoCE v2 IPv4 GID itself, so a
// healthy RoCE node passes (the index is not taken for 0); a node whose ports have no
// IPv4 address fails.
func TestHostGIDAutoSelect(t *testing.T) {
	root := hostfixture.GCPB200(t)
	plan := hostPlan(t, "gcp-b200", "env.NVSHMEM_IB_GID_INDEX=")
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Mapped: -1})
	for _, c := range rep.Checks {
		if strings.HasPrefix(c.ID, "rule.R31") {
			t.Errorf("a healthy RoCE node, GID index unset: %+v", c)
		}
	}
	if rep.Config.GIDIndex != -1 || rep.Facts["ib.roce-v2-ipv4-gid"] != "yes" || rep.Facts["ib.gid-type"] != "" {
		t.Errorf("config %+v, facts %v", rep.Config, rep.Facts)
	}
	// index 0 named explicitly is IB/RoCE v1 there
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Mapped: -1, JobEnv: []string{"NVSHMEM_IB_GID_INDEX=0"}})
	if r := fixture.Result(t, rep.Checks, "rule.R31/index-not-roce-v2"); r.Status != check.Fail || !strings.Contains(r.Read, "host ib.gid-type=IB/RoCE v1") {
		t.Errorf("index 0: %+v", r)
	}
	// the GIDs of a port without an IPv4 address: link-local only
	for i := range 8 {
		for _, idx := range []int{2, 3} {
			p := fmt.Sprintf("/sys/class/infiniband/mlx5_%d/ports/1/gids/%d", i, idx)
			hostfixture.At(t, root).Write(p, "0000:0000:0000:0000:0000:0000:0000:0000\n")
		}
	}
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Mapped: -1})
	if r := fixture.Result(t, rep.Checks, "rule.R31/auto-select"); r.Status != check.Fail {
		t.Errorf("no IPv4 GID: %+v", r)
	}
}

// R28 on the node: the interface NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME names must be up.
func TestHostBootstrapInterface(t *testing.T) {
	root := hostfixture.GCPB200(t)
	f := hostfixture.At(t, root)
	f.Netdev("enp0s19", "up", "0x1003")
	f.Netdev("enp0s20", "down", "0x1002")
	plan := hostPlan(t, "gcp-b200")
	for ifname, fire := range map[string]bool{"enp0s19": false, "enp0s20": true, "eth0": true} {
		rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Mapped: -1, JobEnv: []string{"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=" + ifname}})
		r, ok := check.Find(rep.Checks, "rule.R28/interface-down")
		if ok != fire || ok && r.Status != check.Fail {
			t.Errorf("%s: %+v (fires %v, want %v)", ifname, r, ok, fire)
		}
	}
}

// R32 on the node: the job's environment may size (or unsize) the fixed heap, and the
// GPUs must have it free.
func TestHostFixedHeapAndFreeMemory(t *testing.T) {
	root := hostfixture.GCPB200(t)
	f := hostfixture.At(t, root)
	f.FreeMemory("81004", "81004", "81004", "81004", "81004", "81004", "3500", "81004")
	plan := hostPlan(t, "gcp-b200")
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Mapped: -1, JobEnv: []string{"NVSHMEM_SYMMETRIC_SIZE=1G"}})
	if r := fixture.Result(t, rep.Checks, "rule.R32/too-small"); r.Status != check.Fail {
		t.Errorf("1G: %+v", r)
	}
	if c := fixture.Result(t, rep.Checks, "host.gpu.free-memory"); c.Status != check.Pass || !strings.Contains(c.Read, "runtime.buffer-bytes") {
		t.Errorf("free memory for the 2 GiB buffer: %+v", c)
	}
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: plan, Mapped: -1, JobEnv: []string{"NVSHMEM_SYMMETRIC_SIZE=4G"}})
	if r, ok := check.Find(rep.Checks, "rule.R32/too-small"); ok {
		t.Errorf("4G: %+v", r)
	}
	if c := fixture.Result(t, rep.Checks, "host.gpu.free-memory"); c.Status != check.Fail || !strings.Contains(c.Fix, "GPU 6 ") || rep.Config.FixedHeapBytes != 4<<30 {
		t.Errorf("free memory for a 4 GiB fixed heap: %+v", c)
	}
}

// The job's nodes from the Slurm allocation or --hosts: distinct, this node among them.
func TestHostJobNodes(t *testing.T) {
	root := hostfixture.GCPB200(t)
	hostfixture.At(t, root).Hostname("vm")
	opts := HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "gcp-b200"), Mapped: -1, JobEnv: []string{"SLURM_JOB_NODELIST=node[01-02]"}}
	rep := checkHost(t, opts)
	if c := fixture.Result(t, rep.Checks, "host.hostnames"); c.Status != check.Warn || !strings.Contains(c.Read, "SLURM_JOB_NODELIST: 2 hosts") {
		t.Errorf("Slurm: %+v", c)
	}
	hosts := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hosts, []byte("vm\nvm\n"), 0o644)
	opts.HostsFile = hosts
	if c := fixture.Result(t, checkHost(t, opts).Checks, "host.hostnames"); c.Status != check.Fail {
		t.Errorf("vm twice: %+v", c)
	}
	opts.HostsFile = filepath.Join(t.TempDir(), "absent")
	var ce *HostConfigError
	if _, err := CheckHost(context.Background(), opts); !errors.As(err, &ce) || ce.ExitCode() != 2 {
		t.Errorf("a host list that cannot be read: %v", err)
	}
}

// R10 on the node: the version of the libnvshmem_host the process maps, from its file
// name or from the wheel that installed it, against the one recorded at build.
func TestLoadedNVSHMEMVersion(t *testing.T) {
	site := t.TempDir()
	lib := filepath.Join(site, "nvidia", "nvshmem", "lib", "libnvshmem_host.so.3")
	info := filepath.Join(site, "nvidia_nvshmem_cu13-3.4.5.dist-info")
	for p, body := range map[string]string{
		lib:                              "",
		filepath.Join(info, "METADATA"):  "Metadata-Version: 2.1\nName: nvidia-nvshmem-cu13\nVersion: 3.4.5\n",
		filepath.Join(info, "RECORD"):    "nvidia/nvshmem/lib/libnvshmem_host.so.3,sha256=x,1\nnvidia_nvshmem_cu13-3.4.5.dist-info/METADATA,,\n",
		filepath.Join(info, "INSTALLER"): "pip\n",
	} {
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	built := "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3.5.19"
	if v := nvshmemLibVersion(lib); v != "3.4.5" {
		t.Errorf("the wheel's: %q", v)
	}
	if v := nvshmemLibVersion(built); v != "3.5.19" {
		t.Errorf("a source build's: %q", v)
	}
	if v := nvshmemLibVersion(filepath.Join(t.TempDir(), "libnvshmem_host.so.3")); v != "" {
		t.Errorf("nothing says: %q", v)
	}
	for _, tc := range []struct {
		loaded       []string
		version, got string
	}{
		{[]string{built}, "3.5.19", "yes"},
		{[]string{lib}, "3.4.5", "no"},
		{[]string{built, lib}, "", "no"},
	} {
		f := map[string]string{}
		loadedFacts(f, tc.loaded, "3.5.19", nvshmemLibVersion)
		if f["nvshmem.loaded-version"] != tc.version || f["nvshmem.loaded-matches-build"] != tc.got {
			t.Errorf("%v: %v", tc.loaded, f)
		}
	}
	f := map[string]string{}
	if loadedFacts(f, []string{built, filepath.Join(t.TempDir(), "libnvshmem_host.so.3")}, "3.5.19", nvshmemLibVersion); len(f) != 0 {
		t.Errorf("a copy of unknown version: %v", f)
	}
	if v := nvshmemBuildVersion(hostPlan(t, "gcp-b200"), nil); v != "3.5.19" {
		t.Errorf("gcp-b200 built %q", v)
	}
	if v := nvshmemBuildVersion(hostPlan(t, "single-node"), &toolchain.Toolchain{PythonPackages: map[string]toolchain.PythonPackage{"nvidia-nvshmem-cu12": {Version: "3.4.5"}}}); v != "3.4.5" {
		t.Errorf("single-node built %q", v)
	}
	// on the node: gcp-b200 built 3.5.19-1, the process maps the wheel's 3.4.5
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(hostfixture.GCPB200(t)), Plan: hostPlan(t, "gcp-b200"), Mapped: 1, Loaded: []string{lib}})
	if r := fixture.Result(t, rep.Checks, "rule.R10/loaded-version"); r.Status != check.Fail {
		t.Errorf("R10: %+v", r)
	}
	if r := fixture.Result(t, rep.Checks, "rule.R24/built-after-loaded-before"); r.Status != check.Fail {
		t.Errorf("R24: %+v", r)
	}
}

// TestHostChecksScopedToTheRecipe: on a node without GPUs or NICs, the CPU demo's host
// checks skip what its recipe does not use, saying why, and nothing fails; a DeepEP
// recipe on the same node fails host.gpus as before.
func TestHostChecksScopedToTheRecipe(t *testing.T) {
	root := hostfixture.New(t).Root()
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "demo"), Mapped: -1})
	gpus := fixture.Result(t, rep.Checks, "host.gpus")
	if gpus.Status != check.Skip || !strings.Contains(gpus.Found, "the recipe demo uses no GPU") {
		t.Errorf("host.gpus for the demo: %+v", gpus)
	}
	for _, r := range rep.Checks {
		if r.Status == check.Fail || r.Status == check.Warn {
			t.Errorf("the demo on a CPU node: %s %s: %s", r.ID, r.Status, r.Found)
		}
	}
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "gcp-b200"), Mapped: -1})
	if r := fixture.Result(t, rep.Checks, "host.gpus"); r.Status != check.Fail {
		t.Errorf("host.gpus for gcp-b200 on a node without GPUs: %+v", r)
	}
	// without a recipe every check applies
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Mapped: -1})
	if r := fixture.Result(t, rep.Checks, "host.gpus"); r.Status != check.Fail {
		t.Errorf("host.gpus without a recipe on a node without GPUs: %+v", r)
	}
}

// The recipe's runtime.nvcc reaches the node check: on a node without nvcc where the
// JIT looks, host.jit.nvcc fails with the fix and R29's nvcc-missing (the same thing, for
// EPv2) is not said twice; with a toolkit at CUDA_HOME both pass. Hybrid-EP reads only
// CUDA_HOME: nvcc on PATH does not do for it.
func TestHostJITNVCC(t *testing.T) {
	root := hostfixture.GCPB200(t)
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "deepep-v2"), Mapped: -1, JobEnv: []string{"PATH=/usr/bin"}})
	if c := fixture.Result(t, rep.Checks, "host.jit.nvcc"); c.Status != check.Fail || !strings.Contains(c.Fix, "set EP_JIT_NVCC_COMPILER") || !strings.Contains(c.Why, "deepep compiles") {
		t.Errorf("deepep-v2 without nvcc: %+v", c)
	}
	if r, ok := check.Find(rep.Checks, "rule.R29/nvcc-missing"); ok {
		t.Errorf("the rule repeats the node check: %+v", r)
	}
	hostfixture.At(t, root).CUDAToolkit("/opt/cuda-13.0")
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "deepep-v2"), Mapped: -1, JobEnv: []string{"CUDA_HOME=/opt/cuda-13.0"}})
	if c := fixture.Result(t, rep.Checks, "host.jit.nvcc"); c.Status != check.Pass || !strings.Contains(c.Read, "/opt/cuda-13.0/bin/nvcc") {
		t.Errorf("deepep-v2 with CUDA_HOME: %+v", c)
	}
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "hybrid-ep"), Mapped: -1, JobEnv: []string{"PATH=/opt/cuda-13.0/bin"}})
	if c := fixture.Result(t, rep.Checks, "host.jit.nvcc"); c.Status != check.Fail || !strings.Contains(c.Read, "$CUDA_HOME/bin/nvcc") || !strings.Contains(c.Fix, "set CUDA_HOME") {
		t.Errorf("hybrid-ep with nvcc on PATH only: %+v", c)
	}
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "nccl-ep"), Mapped: -1, JobEnv: []string{"PATH=/opt/cuda-13.0/bin"}})
	if c := fixture.Result(t, rep.Checks, "host.jit.nvcc"); c.Status != check.Pass {
		t.Errorf("nccl-ep with nvcc on PATH: %+v", c)
	}
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(root), Plan: hostPlan(t, "gcp-b200"), Mapped: -1})
	if c := fixture.Result(t, rep.Checks, "host.jit.nvcc"); c.Status != check.Skip {
		t.Errorf("a recipe that compiles nothing at run time: %+v", c)
	}
}

// hybrid-ep's GB200/GB300 variant (runtime.gpus-per-node 4, runtime.mnnvl) on two
// captured NVL72 nodes: the one with everything passes the node's shape, its IMEX channel
// and its fabric; the one without the channel fails host.mnnvl.imex with the fix, and
// R30, which judges the same channel, is not said twice. hybrid-ep itself asks neither.
func TestHostNVL72Node(t *testing.T) {
	gb200 := hostPlan(t, "hybrid-ep", "toolchain.host-arch=aarch64", "runtime.gpus-per-node=4", "runtime.mnnvl=true")
	env := []string{"CUDA_HOME=/opt/cuda-13.0"}
	full := hostfixture.GB200(t)
	hostfixture.At(t, full).CUDAToolkit("/opt/cuda-13.0")
	rep := checkHost(t, HostOptions{Sysroot: sysroot.New(full), Plan: gb200, Mapped: -1, JobEnv: env})
	for _, id := range []string{"host.gpus", "host.machine", "host.gpus.per-node", "host.mnnvl.imex", "host.mnnvl.fabric", "host.jit.nvcc"} {
		if c := fixture.Result(t, rep.Checks, id); c.Status != check.Pass {
			t.Errorf("GB200 node with everything: %s: %+v", id, c)
		}
	}
	for _, r := range rep.Checks {
		if r.Status == check.Fail {
			t.Errorf("GB200 node with everything: %s fails: %s", r.ID, r.Found)
		}
	}

	// an install built on x86_64 (its manifest's toolchain) cannot load on the Grace node
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(full), Plan: hostPlan(t, "hybrid-ep"), Toolchain: &toolchain.Toolchain{OS: "linux", Arch: "amd64"}, Mapped: -1, JobEnv: env})
	if c := fixture.Result(t, rep.Checks, "host.machine"); c.Status != check.Fail || !strings.Contains(c.Fix, "--set toolchain.host-arch=aarch64") {
		t.Errorf("an x86_64 install on the GB200 node: %+v", c)
	}

	noChannel := hostfixture.GB200With(t, hostfixture.GB200Opts{})
	hostfixture.At(t, noChannel).CUDAToolkit("/opt/cuda-13.0")
	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(noChannel), Plan: gb200, Mapped: -1, JobEnv: env})
	if c := fixture.Result(t, rep.Checks, "host.mnnvl.imex"); c.Status != check.Fail || !strings.Contains(c.Fix, "mknod /dev/nvidia-caps-imex-channels/channel0 c 234 0") {
		t.Errorf("GB200 node without the IMEX channel: %+v", c)
	}
	for _, r := range rep.Checks {
		if strings.HasPrefix(r.ID, "rule.R30/no-channel") {
			t.Errorf("the rule repeats the node check: %+v", r)
		}
	}

	rep = checkHost(t, HostOptions{Sysroot: sysroot.New(noChannel), Plan: hostPlan(t, "hybrid-ep"), Mapped: -1, JobEnv: env})
	for _, id := range []string{"host.gpus.per-node", "host.mnnvl.imex", "host.mnnvl.fabric"} {
		if c := fixture.Result(t, rep.Checks, id); c.Status != check.Skip {
			t.Errorf("hybrid-ep on one node: %s: %+v", id, c)
		}
	}
}
