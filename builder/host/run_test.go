package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
)

func statuses(r Report) map[string]check.Status {
	m := map[string]check.Status{}
	for _, c := range r.Checks {
		m[c.ID] = c.Status
	}
	return m
}

// wantStatuses compares every check's status, so a check that goes missing, appears, or
// changes outcome fails the test; on failure it prints what each check read.
func wantStatuses(t *testing.T, r Report, want map[string]check.Status) {
	t.Helper()
	got := statuses(r)
	for id, w := range want {
		if got[id] != w {
			c, _ := r.Check(id)
			t.Errorf("%s: status %q, want %q (read: %s; fix: %s)", id, got[id], w, c.Read, c.Fix)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("unexpected check %s", id)
		}
	}
}

func mustCheck(t *testing.T, r Report, id string) check.Result {
	t.Helper()
	c, ok := r.Check(id)
	if !ok {
		t.Fatalf("no check %s in %+v", id, r.Checks)
	}
	return c
}

func TestGCPB200PassesAndImpliesTheMapping(t *testing.T) {
	t.Parallel()
	rep := Run(context.Background(), sysroot.New(hostfixture.GCPB200(t)), gcpB200Config())
	wantStatuses(t, rep, map[string]check.Status{
		"host.gpus": check.Pass, "host.ib.devices": check.Pass, "host.ib.port-state": check.Pass, "host.ib.link-layer": check.Pass,
		"host.pcie.gpu-nic-pairing": check.Pass, "host.gdrdrv": check.Skip, "host.memlock": check.Pass, "host.nccl.version": check.Pass,
		"host.gpu.free-memory": check.Skip, "host.jit.nvcc": check.Skip, "host.hostnames": check.Skip,
		"host.machine": check.Skip, "host.gpus.per-node": check.Skip, "host.mnnvl.imex": check.Skip, "host.mnnvl.fabric": check.Skip,
	})
	want := "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1"
	if got := rep.MappingValue(); got != want {
		t.Errorf("mapping %q, want %q", got, want)
	}
	if got := MappingLine(rep); got != "export DEEP_EP_DEVICE_TO_HCA_MAPPING="+want {
		t.Errorf("mapping line %q", got)
	}
	if got := rep.HCAList(3); got != "mlx5_3:1" {
		t.Errorf("NVSHMEM_HCA_LIST for GPU 3: %q, want mlx5_3:1", got)
	}
	if rep.Failed() {
		t.Error("Failed() is true for a passing report")
	}
	for _, p := range rep.Pairs {
		if len(p.Nearest) != 1 || !strings.HasPrefix(p.Via, "0000:") {
			t.Errorf("GPU %d: nearest %v via %q, want one NIC via a switch port", p.GPU, p.Nearest, p.Via)
		}
	}
}

// Names are assigned against PCI order here, so only the PCIe tree can give the right pairs.
func TestPairingFollowsThePCIeTreeNotTheNames(t *testing.T) {
	t.Parallel()
	perm := []int{3, 7, 1, 5, 0, 4, 2, 6}
	root := hostfixture.GCPB200With(t, hostfixture.NodeOpts{Peermem: true, StreamMemOps: 1, RegistryDwords: "PeerMappingOverride=1;",
		NICName: func(i int, _ string) string { return fmt.Sprintf("mlx5_%d", perm[i]) }})
	cfg := gcpB200Config()
	rep := Run(context.Background(), sysroot.New(root), cfg)
	want := "0:mlx5_3:1,1:mlx5_7:1,2:mlx5_1:1,3:mlx5_5:1,4:mlx5_0:1,5:mlx5_4:1,6:mlx5_2:1,7:mlx5_6:1"
	if got := rep.MappingValue(); got != want {
		t.Errorf("mapping %q, want %q", got, want)
	}
	// The recipe's identity mapping is now wrong for 8 GPUs out of 8.
	c := mustCheck(t, rep, "host.pcie.gpu-nic-pairing")
	if c.Status != check.Fail || !strings.Contains(c.Read, "GPU 0 is paired with mlx5_3 but the mapping says mlx5_0") {
		t.Errorf("pairing: %s %q", c.Status, c.Read)
	}
	if !strings.Contains(c.Fix, want) {
		t.Errorf("fix %q does not give the right mapping", c.Fix)
	}
}

func TestMisconfiguredMappingEveryGPUOnMlx5_0Fails(t *testing.T) {
	t.Parallel()
	cfg := gcpB200Config()
	var items []string
	for i := 0; i < 8; i++ {
		items = append(items, fmt.Sprintf("%d:mlx5_0:1", i))
	}
	cfg.Mapping = strings.Join(items, ",")
	rep := Run(context.Background(), sysroot.New(hostfixture.GCPB200(t)), cfg)
	c := mustCheck(t, rep, "host.pcie.gpu-nic-pairing")
	if c.Status != check.Fail {
		t.Fatalf("pairing status %s, want fail", c.Status)
	}
	if !strings.Contains(c.Read, "GPU 3 is paired with mlx5_3 but the mapping says mlx5_0") {
		t.Errorf("read %q lacks the GPU 3 mismatch", c.Read)
	}
	if strings.Contains(c.Read, "GPU 0 is paired") {
		t.Errorf("GPU 0 really is on mlx5_0, yet reported: %q", c.Read)
	}
	if !rep.Failed() {
		t.Error("Failed() is false")
	}
}

func TestMappingWithMissingGPUOrUnknownHCAFails(t *testing.T) {
	t.Parallel()
	cfg := gcpB200Config()
	cfg.Mapping = "0:mlx5_0:1,1:mlx5_9:1,2:mlx5_2:2"
	c := mustCheck(t, Run(context.Background(), sysroot.New(hostfixture.GCPB200(t)), cfg), "host.pcie.gpu-nic-pairing")
	for _, want := range []string{
		"GPU 1: the mapping says mlx5_9, which is not a usable RDMA device",
		"GPU 2: the mapping says mlx5_2 port 2, which is not an ACTIVE port",
		"GPU 7 has no entry in the mapping",
	} {
		if !strings.Contains(c.Read, want) {
			t.Errorf("read lacks %q:\n%s", want, c.Read)
		}
	}
}

func TestPortDownFails(t *testing.T) {
	t.Parallel()
	root := hostfixture.GCPB200With(t, hostfixture.NodeOpts{Peermem: true, StreamMemOps: 1, RegistryDwords: "PeerMappingOverride=1;", NICName: hostfixture.MLX5Name,
		PortState: func(i int) string {
			if i == 5 {
				return "1: DOWN"
			}
			return "4: ACTIVE"
		}})
	c := mustCheck(t, Run(context.Background(), sysroot.New(root), gcpB200Config()), "host.ib.port-state")
	if c.Status != check.Fail || c.Read != "mlx5_5 port 1: 1: DOWN" {
		t.Errorf("port state: %s %q", c.Status, c.Read)
	}
}

// R14: GCP names its RoCE devices rocep<bus>s0 unless DOCA-OFED renames them.
func TestUnrenamedGCPDevicesNeedHCAPrefix(t *testing.T) {
	t.Parallel()
	root := hostfixture.GCPB200With(t, hostfixture.NodeOpts{Peermem: true, StreamMemOps: 1, RegistryDwords: "PeerMappingOverride=1;", NICName: hostfixture.RoCEName})
	cfg := gcpB200Config()
	cfg.HCAPrefix, cfg.Mapping = "", ""
	rep := Run(context.Background(), sysroot.New(root), cfg)
	c := mustCheck(t, rep, "host.ib.devices")
	if c.Status != check.Fail || !strings.Contains(c.Fix, "NVSHMEM_HCA_PREFIX=rocep") {
		t.Errorf("devices: %s fix %q", c.Status, c.Fix)
	}
	cfg.HCAPrefix = "rocep"
	rep = Run(context.Background(), sysroot.New(root), cfg)
	if s := mustCheck(t, rep, "host.ib.devices").Status; s != check.Pass {
		t.Errorf("with the prefix: %s", s)
	}
	if got := rep.HCAList(0); got != "rocep4s0:1" {
		t.Errorf("GPU 0 → %q, want rocep4s0:1 (the NIC at bus 0x04)", got)
	}
}

func TestAWSP5PairsEachH100WithItsFourEFAs(t *testing.T) {
	t.Parallel()
	rep := Run(context.Background(), sysroot.New(hostfixture.AWSP5(t)), awsP5Config())
	wantStatuses(t, rep, map[string]check.Status{
		"host.gpus": check.Pass, "host.ib.devices": check.Pass, "host.ib.port-state": check.Pass, "host.ib.link-layer": check.Pass,
		"host.pcie.gpu-nic-pairing": check.Pass, "host.gdrdrv": check.Pass, "host.memlock": check.Pass, "host.nccl.version": check.Skip,
		"host.gpu.free-memory": check.Skip, "host.jit.nvcc": check.Skip, "host.hostnames": check.Skip,
		"host.machine": check.Skip, "host.gpus.per-node": check.Skip, "host.mnnvl.imex": check.Skip, "host.mnnvl.fabric": check.Skip,
	})
	if g := mustCheck(t, rep, "host.gpus").Read; !strings.HasPrefix(g, "8 GPUs:") {
		t.Errorf("GPUs %q: the NVSwitches (class 0x068000) must not count", g)
	}
	if len(rep.Pairs) != 8 {
		t.Fatalf("%d pairs", len(rep.Pairs))
	}
	seen := map[string]bool{}
	for _, p := range rep.Pairs {
		if len(p.Nearest) != 4 {
			t.Errorf("GPU %d: nearest %v, want its 4 EFAs", p.GPU, p.Nearest)
		}
		for _, n := range p.Nearest {
			if seen[n] {
				t.Errorf("%s is nearest to two GPUs", n)
			}
			seen[n] = true
		}
		if p.HCA != p.Nearest[0] {
			t.Errorf("GPU %d chose %s, not the first of %v", p.GPU, p.HCA, p.Nearest)
		}
	}
	if got := strings.Join(rep.Pairs[0].Nearest, ","); got != "rdmap4s0,rdmap5s0,rdmap6s0,rdmap7s0" {
		t.Errorf("GPU 0 nearest %s", got)
	}
	// Without gdrdrv, the efa provider will not start (R8); the IB transports go on
	// without GDRCopy
	root := hostfixture.AWSP5(t)
	f := hostfixture.At(t, root)
	if err := removeAll(f.Disk("/dev/gdrdrv")); err != nil {
		t.Fatal(err)
	}
	c := mustCheck(t, Run(context.Background(), sysroot.New(root), awsP5Config()), "host.gdrdrv")
	if c.Status != check.Fail || c.Read != "/dev/gdrdrv: absent" {
		t.Errorf("gdrdrv: %s %q", c.Status, c.Read)
	}
	ibrc := Config{Transport: TransportIBRC, NeedGDRCopy: true, GIDIndex: -1}
	if c := mustCheck(t, Run(context.Background(), sysroot.New(root), ibrc), "host.gdrdrv"); c.Status != check.Warn || !strings.Contains(c.Read, "GDRCopy open call failed") {
		t.Errorf("gdrdrv for IBRC: %s %q", c.Status, c.Read)
	}
}

// More GPUs than NICs under their switches: pairing warns that they share.
func TestGPUsSharingANICWarn(t *testing.T) {
	t.Parallel()
	f := hostfixture.New(t)
	f.Limits("unlimited", "unlimited")
	sw := f.PCIeSwitch(0, 0)
	f.GPU(sw.Endpoint(), 0)
	f.GPU(sw.Endpoint(), 0)
	nic := sw.Endpoint()
	f.PCI(nic, "0x15b3", "0x020700", 0, "mlx5_core")
	f.IBDevice("mlx5_0", nic, "mlx5_core", hostfixture.Port{State: "4: ACTIVE", LinkLayer: "InfiniBand",
		GIDs: map[int]hostfixture.GID{0: {Type: "IB/RoCE v1", Addr: "fe80:0000:0000:0000:b83f:d203:00a1:b2c4"}}})
	rep := Run(context.Background(), sysroot.New(f.Root()), Config{Transport: TransportIBRC})
	c := mustCheck(t, rep, "host.pcie.gpu-nic-pairing")
	if c.Status != check.Warn || !strings.Contains(c.Read, "GPU 1 shares mlx5_0 with GPU 0") {
		t.Errorf("pairing: %s %q", c.Status, c.Read)
	}
}

func TestMemlockAndNCCL(t *testing.T) {
	t.Parallel()
	root := hostfixture.GCPB200(t)
	f := hostfixture.At(t, root)
	if err := removeAll(f.Disk("/proc")); err != nil {
		t.Fatal(err)
	}
	f.Limits("8388608", "8388608")
	cfg := gcpB200Config()
	cfg.NCCLRuntimeVersion = "2.21.5"
	rep := Run(context.Background(), sysroot.New(root), cfg)
	if c := mustCheck(t, rep, "host.memlock"); c.Status != check.Fail || c.Read != "/proc/self/limits: Max locked memory (soft) 8388608" {
		t.Errorf("memlock: %s %q", c.Status, c.Read)
	}
	if c := mustCheck(t, rep, "host.nccl.version"); c.Status != check.Fail {
		t.Errorf("NCCL 2.21.5 under a 2.27.3-1 build: %s", c.Status)
	}
	cfg.MinMemlockBytes = 8 << 20
	cfg.NCCLRuntimeVersion, cfg.NCCLSameVersion = "2.28.3-1", true
	rep = Run(context.Background(), sysroot.New(root), cfg)
	if s := mustCheck(t, rep, "host.memlock").Status; s != check.Pass {
		t.Errorf("memlock 8 MiB against a minimum of 8 MiB: %s", s)
	}
	if s := mustCheck(t, rep, "host.nccl.version").Status; s != check.Fail {
		t.Errorf("newer NCCL when the same one is required: %s", s)
	}
}

// The machine the tests run on: whatever it has, the checks must finish and say
// something sensible. Only the structure is asserted.
func TestRealRootStructure(t *testing.T) {
	t.Parallel()
	cfg := gcpB200Config()
	cfg.NeedGDRCopy = true
	rep := Run(context.Background(), sysroot.New(""), cfg)
	assertStructure(t, rep)
	if _, ok := rep.Check("host.memlock"); !ok {
		t.Error("no memlock check")
	}
}

var knownIDs = map[string]bool{
	"host.gpus": true, "host.ib.devices": true, "host.ib.port-state": true, "host.ib.link-layer": true,
	"host.pcie.gpu-nic-pairing": true, "host.gdrdrv": true, "host.memlock": true, "host.nccl.version": true,
	"host.gpu.free-memory": true, "host.jit.nvcc": true, "host.hostnames": true,
	"host.machine": true, "host.gpus.per-node": true, "host.mnnvl.imex": true, "host.mnnvl.fabric": true,
}

func assertStructure(t *testing.T, rep Report) {
	t.Helper()
	if len(rep.Checks) != len(knownIDs) {
		t.Errorf("%d checks, want %d", len(rep.Checks), len(knownIDs))
	}
	seen := map[string]bool{}
	for _, c := range rep.Checks {
		if !knownIDs[c.ID] || seen[c.ID] {
			t.Errorf("check id %q unknown or repeated", c.ID)
		}
		seen[c.ID] = true
		switch c.Status {
		case check.Pass, check.Warn, check.Fail, check.Skip:
		default:
			t.Errorf("%s: status %q", c.ID, c.Status)
		}
		if c.Why == "" || c.Read == "" {
			t.Errorf("%s: empty why or read: %+v", c.ID, c)
		}
		if c.Status == check.Fail && c.Fix == "" && c.ID != "host.ib.link-layer" {
			t.Errorf("%s fails with no fix: %+v", c.ID, c)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Transport: "rdma"},
		{Transport: TransportIBGDA, GIDIndex: -2},
		{Transport: TransportIBGDA, Mapping: "0:mlx5_0:1,0:mlx5_1:1"},
		{Transport: TransportIBGDA, Mapping: "a:mlx5_0"},
		{Transport: TransportIBGDA, Mapping: "0:mlx5_0:0"},
	} {
		rep := Run(context.Background(), sysroot.New(t.TempDir()), cfg)
		if len(rep.Checks) != 1 || rep.Checks[0].ID != "host.config" || !rep.Failed() {
			t.Errorf("%+v: %+v", cfg, rep.Checks)
		}
	}
}

func TestCancelledRunStops(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep := Run(ctx, sysroot.New(hostfixture.GCPB200(t)), gcpB200Config())
	if len(rep.Checks) != 1 || rep.Checks[0].ID != "host.cancelled" {
		t.Errorf("%+v", rep.Checks)
	}
}

func TestWriteTableAndJSON(t *testing.T) {
	t.Parallel()
	cfg := gcpB200Config()
	cfg.BufferBytes = 2146961792
	root := hostfixture.GCPB200(t)
	hostfixture.At(t, root).FreeMemory("81004", "81004", "1024", "81004", "81004", "81004", "81004", "81004")
	rep := Run(context.Background(), sysroot.New(root), cfg)
	var buf bytes.Buffer
	if err := WriteTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	if len(lines) != len(rep.Checks)+1 || !strings.HasPrefix(lines[0], "ID") {
		t.Fatalf("table:\n%s", buf.String())
	}
	var row string
	for _, l := range lines {
		if strings.HasPrefix(l, "host.gpu.free-memory ") {
			row = l
		}
	}
	if !strings.Contains(row, "fail") || !strings.Contains(row, "GPU 2 1073741824 (1 GiB)") || !strings.Contains(row, "free memory on GPU 2") {
		t.Errorf("free memory row %q", row)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"checks":`, `"id":"host.gpu.free-memory"`, `"status":"fail"`, `"read":`, `"why":`, `"fix":`, `"pairs":`, `"nearest":["mlx5_0"]`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

func TestVersionsMappingsAndNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"2.21.5-1", "2.21.5-1", 0}, {"2.21.5", "2.21.5-1", 0}, {"2.22.3-1", "2.21.5-1", 1},
		{"2.21.5-1", "2.21.10-1", -1}, {"2.21.5-2", "2.21.5-1", 1}, {"(2, 27, 3)", "2.27.3-1", 0},
		{"3.2.5-1", "3.2.5", 0}, {"3.3.9", "3.2.5", 1},
	} {
		if got, ok := compareVersions(tc.a, tc.b); !ok || got != tc.want {
			t.Errorf("compare(%s, %s) = %d %v, want %d", tc.a, tc.b, got, ok, tc.want)
		}
	}
	if _, ok := compareVersions("main", "2.21.5"); ok {
		t.Error("a non-version compared")
	}
	m, err := parseMapping("0:mlx5_0:1, 1:mlx5_1")
	if err != nil || len(m) != 2 || m[1] != (mappingEntry{GPU: 1, HCA: "mlx5_1"}) {
		t.Errorf("parse: %+v %v", m, err)
	}
	if !natLess("mlx5_2", "mlx5_10") || natLess("mlx5_10", "mlx5_2") || !natLess("rdmap4s0", "rdmap16s27") {
		t.Error("natural order")
	}
	if d, via := treeDepth("/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0",
		"/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0"); d != 3 || via != "0000:01:00.0" {
		t.Errorf("depth %d via %s", d, via)
	}
}
