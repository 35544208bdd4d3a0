package host

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/compat"
)

// processFacts come from the process that imports torch and the recipe's modules
// (builder's process checks), not from the node.
var processFacts = []string{"nvshmem.host-libs-mapped", "nvshmem.loaded-version", "nvshmem.loaded-matches-build"}

// gcpNode is the GCP B200 fixture with everything the facts read: kernel, DOCA-OFED,
// the driver's version file, a bootstrap interface, the hostname, a cgroup, nvcc and
// nvidia-smi.
func gcpNode(t *testing.T) (string, Config) {
	root := hostfixture.GCPB200(t)
	f := hostfixture.At(t, root)
	f.Kernel("6.14.0-1007-gcp")
	f.DpkgPackages(map[string]string{"doca-ofed": "3.0.0-058000", "rdma-core": "2507mlnx58-1.2507097"})
	f.NvidiaVersion(true)
	f.Netdev("lo", "unknown", "0x9")
	f.Netdev("enp0s19", "up", "0x1003")
	f.Hostname("a4-node-03")
	f.Cgroup("0::/\n")
	f.Executable("/usr/local/cuda-12.9/bin/nvcc")
	f.CUDAVersionJSON("/usr/local/cuda-12.9", "12.9.1", "12.9.86")
	f.Link("/usr/local/cuda", "/usr/local/cuda-12.9")
	var addrs []string
	var fabric []hostfixture.Fabric
	for i := range 8 {
		addrs = append(addrs, []string{"00000000:03:00.0", "00000000:13:00.0", "00000000:23:00.0", "00000000:33:00.0",
			"00000000:83:00.0", "00000000:93:00.0", "00000000:A3:00.0", "00000000:B3:00.0"}[i])
		fabric = append(fabric, hostfixture.NoFabric)
	}
	f.SMIQuery(addrs, fabric)
	cfg := gcpB200Config()
	cfg.Env = map[string]string{"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "enp0s19", "PATH": "/usr/bin:/bin"}
	return root, cfg
}

// The facts the rules ask for, read from the node and kept by a capture: every fact
// host-facts.yaml declares, but those of the process, and no other.
func TestFactsOfTheFixtureNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root, cfg := gcpNode(t)
	got := NewNode(sysroot.New(root), cfg).Facts(ctx)
	want := map[string]string{
		"kernel": "6.14.0", "doca-ofed": "3.0.0", "ib.link-layer": "Ethernet", "ib.driver": "mlx5_core",
		"ib.name-prefix": "mlx5", "ib.gid-type": "RoCE v2", "ib.roce-v2-ipv4-gid": "yes", "gdrdrv": "absent",
		"peermem.memory-peers": "absent", "peermem.module": "present", "dmabuf": "supported",
		"regkey.PeerMappingOverride": "1", "nvidia-param.EnableStreamMemOPs": "1",
		"net.bootstrap-ifname": "address", "cuda.nvcc": "present", "gpu.fabric": "no", "imex.channel": "absent", "container": "no",
		"rdma.libmlx5-mlx5-1.25": "absent", "efa.version": "none", "gdrdrv.version": "none", "ib.pkey0": "default", "ib.vf": "no",
		"cuda.nvcc-version": "12.9.86",
	}
	if !maps.Equal(got, want) {
		t.Errorf("facts:\n%v\nwant\n%v", got, want)
	}
	declared, err := compat.LoadHostFacts()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, f := range declared {
		if !slices.Contains(processFacts, f.Key) {
			keys = append(keys, f.Key)
		}
		if v, ok := got[f.Key]; ok && len(f.Values) > 0 && !slices.Contains(f.Values, v) {
			t.Errorf("%s = %q, which host-facts.yaml does not list (%v)", f.Key, v, f.Values)
		}
	}
	if slices.Sort(keys); !slices.Equal(keys, slices.Sorted(maps.Keys(got))) {
		t.Errorf("the node reads %v; host-facts.yaml declares %v", slices.Sorted(maps.Keys(got)), keys)
	}

	// a capture holds the facts, only the package's stanza of the dpkg database, nvcc
	// without its bytes, and of nvidia-smi -q only the GPUs' fabric
	b := capture(t, sysroot.New(root), cfg)
	dir := t.TempDir()
	if err := sysroot.Extract(bytes.NewReader(b), dir); err != nil {
		t.Fatal(err)
	}
	if again := NewNode(sysroot.New(dir), cfg).Facts(ctx); !maps.Equal(again, got) {
		t.Errorf("facts from the capture:\n%v\nfrom the node:\n%v", again, got)
	}
	ents := listCapture(t, b)
	if h := ents["var/lib/dpkg/status"]; h == nil || h.Size > 200 {
		t.Errorf("the capture's dpkg status: %+v", h)
	}
	if h := ents["usr/local/cuda-12.9/bin/nvcc"]; h == nil || h.Mode != 0o555 || h.Size != 0 {
		t.Errorf("the capture's nvcc: %+v", h)
	}
	smi := ents[strings.TrimPrefix(sysroot.CommandPath("nvidia-smi", "-q"), "/")]
	if smi == nil || smi.Size == 0 || smi.Size > 2500 {
		t.Errorf("the capture's nvidia-smi -q: %+v", smi)
	}

	// GCP's own names, and an EFA node
	rocep := hostfixture.GCPB200With(t, hostfixture.NodeOpts{NICName: hostfixture.RoCEName})
	cfg.HCAPrefix = ""
	if f := NewNode(sysroot.New(rocep), cfg).Facts(ctx); f["ib.name-prefix"] != "rocep" || f["peermem.module"] != "absent" || hasKey(f, "kernel") || hasKey(f, "doca-ofed") || hasKey(f, "dmabuf") {
		t.Errorf("rocep node: %v", f)
	}
	if f := NewNode(sysroot.New(hostfixture.AWSP5(t)), awsP5Config()).Facts(ctx); f["ib.driver"] != "efa" || f["ib.link-layer"] != "Unknown" || f["gdrdrv"] != "loaded" || hasKey(f, "ib.roce-v2-ipv4-gid") {
		t.Errorf("p5 node: %v", f)
	}
	// a package that is only configured, not installed, has no version; a node without
	// RDMA devices has link layer none
	g := hostfixture.New(t)
	g.Write("/var/lib/dpkg/status", "Package: doca-ofed\nStatus: deinstall ok config-files\nVersion: 3.2.1-044000\n\n")
	if f := NewNode(sysroot.New(g.Root()), Config{Transport: TransportNone, GIDIndex: -1}).Facts(ctx); f["doca-ofed"] != "none" || f["ib.link-layer"] != "none" || hasKey(f, "ib.driver") {
		t.Errorf("a removed package: %v", f)
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}

// factsOf reads the facts of root under cfg.
func factsOf(t *testing.T, root string, cfg Config) map[string]string {
	t.Helper()
	return NewNode(sysroot.New(root), cfg).Facts(context.Background())
}

// R31: the GID at the configured index; and the RoCE v2 IPv4 GID NVSHMEM picks when
// the index is unset (mlx5's table for one IPv4 address has it at index 3).
func TestGIDFacts(t *testing.T) {
	t.Parallel()
	root := hostfixture.GCPB200(t)
	cfg := gcpB200Config()
	for idx, want := range map[int]string{3: "RoCE v2", 1: "RoCE v2", 0: "IB/RoCE v1", 2: "IB/RoCE v1", 7: "absent", -1: ""} {
		cfg.GIDIndex = idx
		f := factsOf(t, root, cfg)
		if f["ib.gid-type"] != want || f["ib.roce-v2-ipv4-gid"] != "yes" {
			t.Errorf("GID index %d: %v", idx, f)
		}
	}
	// a RoCE node whose ports have only link-local GIDs: no IPv4 address on the interface
	g := hostfixture.New(t)
	sw := g.PCIeSwitch(0, 0)
	g.GPU(sw.Endpoint(), 0)
	nic := sw.Endpoint()
	g.PCI(nic, "0x15b3", "0x020000", 0, "mlx5_core")
	ll := "fe80:0000:0000:0000:0a00:00ff:fe00:0001"
	g.IBDevice("mlx5_0", nic, "mlx5_core", hostfixture.Port{State: "4: ACTIVE", LinkLayer: "Ethernet",
		GIDs: map[int]hostfixture.GID{0: {Type: "IB/RoCE v1", Addr: ll}, 1: {Type: "RoCE v2", Addr: ll},
			2: {Type: "IB/RoCE v1", Addr: "0000:0000:0000:0000:0000:0000:0000:0000"}}})
	cfg = Config{Transport: TransportIBRC, GIDIndex: -1}
	if f := factsOf(t, g.Root(), cfg); f["ib.roce-v2-ipv4-gid"] != "no" || hasKey(f, "ib.gid-type") {
		t.Errorf("link-local only: %v", f)
	}
	cfg.GIDIndex = 2 // an all-zero entry
	if f := factsOf(t, g.Root(), cfg); f["ib.gid-type"] != "absent" {
		t.Errorf("an empty entry: %v", f)
	}
	// a port that is down is not one NVSHMEM uses
	d := hostfixture.New(t)
	nic = d.PCIeSwitch(0, 0).Endpoint()
	d.PCI(nic, "0x15b3", "0x020000", 0, "mlx5_core")
	down := hostfixture.ActiveRoCE([4]byte{10, 0, 0, 1})
	down.State = "1: DOWN"
	d.IBDevice("mlx5_0", nic, "mlx5_core", down)
	if f := factsOf(t, d.Root(), gcpB200Config()); hasKey(f, "ib.gid-type") || hasKey(f, "ib.roce-v2-ipv4-gid") || f["ib.link-layer"] != "Ethernet" {
		t.Errorf("ports down: %v", f)
	}
}

// driverParams are the values of /proc/driver/nvidia/params a case sets.
type driverParams struct {
	streamMemOps int
	dwords       string
}

// R16, R17, R34: where NVSHMEM looks for peer memory, dma-buf, and the driver's regkeys
// as /proc/driver/nvidia/params prints them.
func TestPeerMemoryAndDriverFacts(t *testing.T) {
	t.Parallel()
	cfg := gcpB200Config()
	for _, tc := range []struct {
		name   string
		setup  func(f *hostfixture.Fixture)
		params driverParams
		expect map[string]string
	}{
		{"nv_peer_mem under memory_peers", func(f *hostfixture.Fixture) {
			f.Write("/sys/kernel/mm/memory_peers/nv_mem/version", "1.3-0\n")
		}, driverParams{}, map[string]string{"peermem.memory-peers": "present", "peermem.module": "absent"}},
		{"nvidia-peermem under memory_peers (NVSHMEM 3.2.5's second path)", func(f *hostfixture.Fixture) {
			f.Write("/sys/kernel/mm/memory_peers/nvidia-peermem/version", "580.159.04\n")
		}, driverParams{}, map[string]string{"peermem.memory-peers": "present"}},
		{"the module without its version file", func(f *hostfixture.Fixture) { f.Module("nvidia_peermem") },
			driverParams{}, map[string]string{"peermem.module": "absent"}},
		{"open modules on 6.14", func(f *hostfixture.Fixture) { f.Kernel("6.14.0-1007-gcp"); f.NvidiaVersion(true) },
			driverParams{}, map[string]string{"dmabuf": "supported"}},
		{"proprietary modules on 6.14", func(f *hostfixture.Fixture) { f.Kernel("6.14.0-1007-gcp"); f.NvidiaVersion(false) },
			driverParams{}, map[string]string{"dmabuf": "unsupported"}},
		{"open modules on 5.10", func(f *hostfixture.Fixture) { f.Kernel("5.10.0-32-amd64"); f.NvidiaVersion(true) },
			driverParams{}, map[string]string{"dmabuf": "unsupported"}},
		{"the GPU machine's params", nil, driverParams{streamMemOps: 0, dwords: ""},
			map[string]string{"regkey.PeerMappingOverride": "0", "nvidia-param.EnableStreamMemOPs": "0"}},
		{"hex regkey among others", nil, driverParams{streamMemOps: 1, dwords: "RMIntrLockingMode=1;PeerMappingOverride=0x1"},
			map[string]string{"regkey.PeerMappingOverride": "1", "nvidia-param.EnableStreamMemOPs": "1"}},
	} {
		// the node's parts these facts read: the driver and its modules
		f := hostfixture.New(t)
		f.NvidiaParams(tc.params.streamMemOps, tc.params.dwords)
		f.Module("nvidia")
		if tc.setup != nil {
			tc.setup(f)
		}
		got := factsOf(t, f.Root(), cfg)
		for k, v := range tc.expect {
			if got[k] != v {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got[k], v)
			}
		}
	}
	// no driver: no regkey, no dma-buf
	g := hostfixture.New(t)
	g.Kernel("6.8.0-45-generic")
	if f := factsOf(t, g.Root(), Config{Transport: TransportNone, GIDIndex: -1}); hasKey(f, "regkey.PeerMappingOverride") || hasKey(f, "dmabuf") || f["peermem.module"] != "absent" {
		t.Errorf("no driver: %v", f)
	}
}

// R28: the interfaces NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME names, read as NVSHMEM reads it,
// and whether one has an address of the bootstrap's family: NVSHMEM takes a down
// interface that has an IPv4 address, and refuses an up one that has only IPv6.
func TestBootstrapInterfaceFact(t *testing.T) {
	t.Parallel()
	f := hostfixture.New(t)
	f.Netdev("lo", "unknown", "0x9")
	f.Netdev("eth0", "up", "0x1003")
	f.Netdev("eth1", "down", "0x1002")
	f.Netdev("ib0", "unknown", "0x1003")
	f.Netdev("ib1", "unknown", "0x1002")
	f.Netdev("docker0", "down", "0x1003")
	f.Netdev("eth2.100", "up", "0x1003")
	f.Addresses("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever",
		"1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever",
		hostfixture.AddrLine(2, "eth0", "inet", "10.0.0.5/24"),
		"2: eth0    inet6 fe80::4001:aff:fe80:5/64 scope link \\       valid_lft forever preferred_lft forever",
		hostfixture.AddrLine(3, "eth1", "inet", "10.1.0.5/24"),
		hostfixture.AddrLine(4, "ib0", "inet6", "fd00::4/64"),
		hostfixture.AddrLine(6, "docker0", "inet", "172.17.0.1/16"),
		"7: eth2.100@eth2    inet 10.2.0.5/24 brd 10.2.0.255 scope global eth2.100\\       valid_lft forever preferred_lft forever")
	for spec, want := range map[string]string{
		"eth0": "address", "eth": "address", "eth1": "address", "=eth": "absent", "=eth1": "address", "eth1,eth0": "address",
		"eth0:5000": "address", "ib0": "no-address", "ib1": "no-address", "ib": "no-address", "ens": "absent",
		"^eth,ib,lo,docker": "absent", "^eth,docker": "address", "^eth,docker,lo": "no-address", "^eth,ib": "address", "=docker0": "address", "=eth2.100": "address",
	} {
		cfg := Config{Transport: TransportNone, GIDIndex: -1, Env: map[string]string{"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": spec}}
		if got := factsOf(t, f.Root(), cfg)["net.bootstrap-ifname"]; got != want {
			t.Errorf("%q: %q, want %q", spec, got, want)
		}
	}
	// AF_INET6: ib0 has a global IPv6 address; lo's ::1 does not count
	for spec, want := range map[string]string{"ib0": "address", "ib1": "no-address", "eth1": "no-address", "lo": "no-address", "eth0": "address"} {
		cfg := Config{Transport: TransportNone, GIDIndex: -1, Env: map[string]string{"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": spec, "NVSHMEM_BOOTSTRAP_UID_SOCK_FAMILY": "AF_INET6"}}
		if got := factsOf(t, f.Root(), cfg)["net.bootstrap-ifname"]; got != want {
			t.Errorf("AF_INET6 %q: %q, want %q", spec, got, want)
		}
	}
	if got := factsOf(t, f.Root(), Config{Transport: TransportNone, GIDIndex: -1}); hasKey(got, "net.bootstrap-ifname") {
		t.Errorf("unset: %v", got)
	}
	// the addresses not read (no ip output): not decided
	g := hostfixture.New(t)
	g.Netdev("eth0", "up", "0x1003")
	cfg := Config{Transport: TransportNone, GIDIndex: -1, Env: map[string]string{"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "eth0"}}
	if got := factsOf(t, g.Root(), cfg); hasKey(got, "net.bootstrap-ifname") {
		t.Errorf("addresses not read: %v", got)
	}
}

// R29: nvcc where EPv2 looks for it at run time.
func TestNVCCFact(t *testing.T) {
	t.Parallel()
	f := hostfixture.New(t)
	f.Executable("/opt/cuda-13.0/bin/nvcc")
	f.Executable("/usr/local/cuda-12.9/bin/nvcc")
	f.Write("/srv/cuda/bin/nvcc", "") // not executable
	f.Link("/usr/local/cuda", "/usr/local/cuda-12.9")
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, "present"}, // /usr/local/cuda
		{map[string]string{"CUDA_HOME": "/opt/cuda-13.0"}, "present"},
		{map[string]string{"CUDA_HOME": "/opt/cuda-12.2"}, "absent"}, // set and wrong: no fallback
		{map[string]string{"CUDA_PATH": "/srv/cuda"}, "absent"},
		{map[string]string{"CUDA_HOME": "/opt/cuda-12.2", "EP_JIT_NVCC_COMPILER": "/opt/cuda-13.0/bin/nvcc"}, "present"},
		{map[string]string{"EP_JIT_NVCC_COMPILER": "/usr/bin/nvcc"}, "absent"},
		{map[string]string{"PATH": "/usr/bin:/opt/cuda-13.0/bin"}, "present"},
		{map[string]string{"EP_JIT_NVCC_COMPILER": "nvcc", "PATH": "/usr/bin"}, "absent"},
	} {
		cfg := Config{Transport: TransportNone, GIDIndex: -1, Env: tc.env}
		if got := factsOf(t, f.Root(), cfg)["cuda.nvcc"]; got != tc.want {
			t.Errorf("%v: %q, want %q", tc.env, got, tc.want)
		}
	}
	if got := factsOf(t, hostfixture.New(t).Root(), Config{Transport: TransportNone, GIDIndex: -1})["cuda.nvcc"]; got != "absent" {
		t.Errorf("no CUDA at all: %q", got)
	}
}

// R30: the fabric, IMEX channels and containers.
func TestFabricIMEXAndContainerFacts(t *testing.T) {
	t.Parallel()
	addrs := []string{"00000009:01:00.0", "00000018:01:00.0"}
	mnnvl := hostfixture.Fabric{State: "Completed", Status: "Success", CliqueID: "32766", ClusterUUID: "6a130f54-faaa-4b8f-847f-be44ab70f917"}
	h100 := hostfixture.Fabric{State: "Completed", Status: "Success", CliqueID: "0", ClusterUUID: "00000000-0000-0000-0000-000000000000"}
	bad := hostfixture.Fabric{State: "Completed", Status: "Insufficient Resources", CliqueID: "0", ClusterUUID: "00000000-0000-0000-0000-000000000000"}
	for _, tc := range []struct {
		name   string
		fabric []hostfixture.Fabric
		want   string
	}{
		{"GB200 in a domain", []hostfixture.Fabric{mnnvl, mnnvl}, "yes"},
		{"one GPU not registered", []hostfixture.Fabric{mnnvl, {State: "In Progress", Status: "N/A", CliqueID: "N/A", ClusterUUID: "N/A"}}, "no"},
		{"H100: completed with a zero cluster", []hostfixture.Fabric{h100, h100}, "no"},
		{"failed registration", []hostfixture.Fabric{bad, bad}, "no"},
		{"no fabric", []hostfixture.Fabric{hostfixture.NoFabric, hostfixture.NoFabric}, "no"},
	} {
		f := hostfixture.New(t)
		f.SMIQuery(addrs, tc.fabric)
		if got := factsOf(t, f.Root(), Config{Transport: TransportNone, GIDIndex: -1})["gpu.fabric"]; got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// nvidia-smi absent: unknown, never "no"
	f := hostfixture.New(t)
	if got := factsOf(t, f.Root(), Config{Transport: TransportNone, GIDIndex: -1}); hasKey(got, "gpu.fabric") || got["imex.channel"] != "absent" || hasKey(got, "container") {
		t.Errorf("nothing captured: %v", got)
	}
	f.IMEXChannel(0)
	f.Cgroup("12:pids:/docker/3f1c7e2b9a\n11:memory:/docker/3f1c7e2b9a\n")
	if got := factsOf(t, f.Root(), Config{Transport: TransportNone, GIDIndex: -1}); got["imex.channel"] != "present" || got["container"] != "yes" {
		t.Errorf("a channel, in Docker on cgroup v1: %v", got)
	}
	g := hostfixture.New(t)
	g.Cgroup("0::/\n")
	g.Write("/run/.containerenv", "engine=\"podman-4.9.3\"\n")
	g.Mkdir("/dev/nvidia-caps-imex-channels")
	if got := factsOf(t, g.Root(), Config{Transport: TransportNone, GIDIndex: -1}); got["container"] != "yes" || got["imex.channel"] != "absent" {
		t.Errorf("podman on cgroup v2, no channel: %v", got)
	}
}
