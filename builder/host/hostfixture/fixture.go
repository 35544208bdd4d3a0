// Package hostfixture writes fixture sysroots for the host checks' tests (builder/host and
// the builder's verify-install --host), so that each node reads like a description.
// They stand in only for hardware this machine lacks (GPUs, RDMA NICs, the NVIDIA driver).
//
// Documented, and written exactly as the kernel or driver prints it:
//   - /sys/bus/pci/devices/<addr> is a relative symlink into /sys/devices/pci<dom>:<bus>/…,
//     one directory per PCIe hop; each function has vendor ("0x10de\n"), class
//     ("0x030200\n"), numa_node ("0\n") and a driver symlink into /sys/bus/pci/drivers
//     (Documentation/ABI/testing/sysfs-bus-pci).
//   - /sys/class/infiniband/<dev> is a symlink to <pci function>/infiniband/<dev>, whose
//     device link points back at the function; ports/<n>/state ("4: ACTIVE\n"), link_layer
//     ("Ethernet", "InfiniBand", and "Unknown" for EFA, whose link layer is unspecified),
//     gid_attrs/types/<i> ("RoCE v2", "IB/RoCE v1"), gids/<i> (%pI6: 8 groups of 4 hex
//     digits), counters/port_xmit_data (decimal, units of 4 octets) and, for EFA,
//     hw_counters/tx_bytes (Documentation/ABI/stable/sysfs-class-infiniband,
//     drivers/infiniband/core/sysfs.c, drivers/infiniband/hw/efa/efa_verbs.c).
//   - /proc/driver/nvidia/params: "Name: %u" per module parameter, then
//     RegistryDwords: "k=v;…" (kernel-open/nvidia/nv-procfs.c).
//   - /proc/self is a symlink to the pid; /proc/<pid>/limits has the kernel's fixed-width
//     columns (fs/proc/base.c).
//   - /proc/sys/kernel/osrelease is the kernel's UTS release ("6.14.0-1007-gcp\n").
//   - /var/lib/dpkg/status holds one stanza per package: "Package:", "Status: install ok
//     installed", "Version:" lines, stanzas separated by a blank line (deb-control(5)).
//   - /proc/driver/nvidia/version: "NVRM version: NVIDIA UNIX Open Kernel Module for
//     x86_64  <version>  Release Build  (<builder>)  <date>" for the open kernel modules,
//     "NVRM version: NVIDIA UNIX x86_64 Kernel Module  <version>  <date>" for the
//     proprietary ones, then "GCC version:  ..." (kernel-open/nvidia/nv-procfs.c).
//   - /sys/class/net/<if> is a symlink into /sys/devices/.../net/<if> (/sys/devices/virtual
//     for lo), with operstate ("up", "down", "unknown") and flags ("0x1003": IFF_UP,
//     IFF_BROADCAST, IFF_MULTICAST) (Documentation/ABI/testing/sysfs-class-net).
//   - /proc/sys/kernel/hostname ends in a newline; /proc/1/cgroup is "0::/\n" on a cgroup v2
//     host and "12:pids:/docker/<id>\n..." inside a Docker container on cgroup v1.
//   - nvidia-smi --query-gpu=index,memory.free --format=csv,noheader,nounits prints one
//     "<index>, <MiB>" line per GPU; nvidia-smi -q prints "GPU <domain:bus:dev.fn>" at the
//     left margin and each GPU's "Fabric" section indented, with State, Status, CliqueId
//     and ClusterUUID (N/A where the GPU has no fabric). A capture keeps a program's
//     output under /epbuild-commands/<its command line, url.PathEscape'd>.
//
// Assumed (plausible, not taken from a real node of that kind):
//   - the bus numbers, root ports and switch layout of each node; the Broadcom/Intel
//     bridge IDs; that every GPU/NIC pair of the GCP B200 node sits under its own switch,
//     and that the p5 node has 4 EFA functions under each GPU's switch;
//   - the exact list of other parameters in /proc/driver/nvidia/params;
//   - the nv_mem version string; the GID addresses; /sys/module/nvidia_peermem/version
//     holding the driver's version (NVSHMEM only asks that it exist).
//   - /dev/gdrdrv is an empty regular file here (creating a character device needs
//     privilege); the check only asks that it exist.
package hostfixture

import (
	"fmt"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Fixture writes a sysroot directory.
type Fixture struct {
	t    testing.TB
	root string
}

// Root is the sysroot directory.
func (f *Fixture) Root() string { return f.root }

// New starts an empty sysroot in a test directory.
func New(t testing.TB) *Fixture {
	t.Helper()
	return &Fixture{t: t, root: t.TempDir()}
}

// At writes into an existing sysroot (one New made), to vary it.
func At(t testing.TB, root string) *Fixture { return &Fixture{t: t, root: root} }

// Disk is where host path p lies in the fixture.
func (f *Fixture) Disk(p string) string { return filepath.Join(f.root, filepath.FromSlash(p)) }

// Write creates host file p with content.
func (f *Fixture) Write(p, content string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.Disk(p)), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(f.Disk(p), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// Mkdir creates host directory p.
func (f *Fixture) Mkdir(p string) {
	f.t.Helper()
	if err := os.MkdirAll(f.Disk(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// Link makes host path p a symlink to host path target, written relative as sysfs does.
func (f *Fixture) Link(p, target string) {
	f.t.Helper()
	rel, err := filepath.Rel(path.Dir(p), target)
	if err != nil {
		f.t.Fatal(err)
	}
	f.Mkdir(path.Dir(p))
	if err := os.Symlink(filepath.ToSlash(rel), f.Disk(p)); err != nil {
		f.t.Fatal(err)
	}
}

// PCI adds a PCI function at devPath (below /sys/devices; its last element is its address).
func (f *Fixture) PCI(devPath, vendor, class string, numa int, driver string) {
	full := "/sys/devices/" + devPath
	f.Write(full+"/vendor", vendor+"\n")
	f.Write(full+"/class", class+"\n")
	f.Write(full+"/numa_node", fmt.Sprintf("%d\n", numa))
	if driver != "" {
		f.Mkdir("/sys/bus/pci/drivers/" + driver)
		f.Link(full+"/driver", "/sys/bus/pci/drivers/"+driver)
	}
	f.Link("/sys/bus/pci/devices/"+path.Base(devPath), full)
}

// PCIeSwitch is a switch behind root port slot of the root complex of socket: its
// upstream port, and downstream ports that each lead to one endpoint.
type PCIeSwitch struct {
	f        *Fixture
	upstream string // devPath of the upstream port
	bus      int    // the upstream port's bus
	numa     int
	ports    int
}

// PCIeSwitch adds root complex pci0000:<socket*0x80>, a root port and a switch under it.
func (f *Fixture) PCIeSwitch(socket, slot int) *PCIeSwitch {
	rb := socket * 0x80
	rc := fmt.Sprintf("pci0000:%02x", rb)
	if _, err := os.Stat(f.Disk("/sys/devices/" + rc)); err != nil {
		f.PCI(fmt.Sprintf("%s/0000:%02x:00.0", rc, rb), "0x8086", "0x060000", socket, "") // host bridge
	}
	rootPort := fmt.Sprintf("%s/0000:%02x:%02x.0", rc, rb, slot+1)
	f.PCI(rootPort, "0x8086", "0x060400", socket, "pcieport")
	ub := rb + 1 + slot*0x10
	up := fmt.Sprintf("%s/0000:%02x:00.0", rootPort, ub)
	f.PCI(up, "0x1000", "0x060400", socket, "pcieport") // Broadcom PEX switch, upstream port
	return &PCIeSwitch{f: f, upstream: up, bus: ub, numa: socket}
}

// Endpoint adds a downstream port and returns the devPath of the function behind it.
func (s *PCIeSwitch) Endpoint() string {
	n := s.ports
	s.ports++
	down := fmt.Sprintf("%s/0000:%02x:%02x.0", s.upstream, s.bus+1, n)
	s.f.PCI(down, "0x1000", "0x060400", s.numa, "pcieport")
	return fmt.Sprintf("%s/0000:%02x:00.0", down, s.bus+2+n)
}

// GPU adds an NVIDIA GPU at devPath.
func (f *Fixture) GPU(devPath string, numa int) {
	f.PCI(devPath, "0x10de", "0x030200", numa, "nvidia")
}

// GID is one GID table entry as sysfs prints it.
type GID struct{ Type, Addr string }

// Port describes one RDMA port.
type Port struct {
	State, LinkLayer string
	GIDs             map[int]GID
	XmitData         string // counters/port_xmit_data, "" for none
	TxBytes          string // hw_counters/tx_bytes, "" for none
	PKey0            string // pkeys/0, "" for the default 0xffff
}

// RoCEGIDs is the table mlx5 builds for one IPv4 address on a RoCE port: link-local v1
// and v2, then the IPv4-mapped address as v1 (index 2) and v2 (index 3).
func RoCEGIDs(ipv4 [4]byte) map[int]GID {
	ll := "fe80:0000:0000:0000:0a00:00ff:fe00:0001"
	v4 := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", ipv4[0], ipv4[1], ipv4[2], ipv4[3])
	return map[int]GID{0: {Type: "IB/RoCE v1", Addr: ll}, 1: {Type: "RoCE v2", Addr: ll}, 2: {Type: "IB/RoCE v1", Addr: v4}, 3: {Type: "RoCE v2", Addr: v4}}
}

// ActiveRoCE is an ACTIVE RoCE port with the GID table of one IPv4 address.
func ActiveRoCE(ipv4 [4]byte) Port {
	return Port{State: "4: ACTIVE", LinkLayer: "Ethernet", GIDs: RoCEGIDs(ipv4), XmitData: "0"}
}

// IBDevice adds an RDMA device named name on the PCI function at devPath.
func (f *Fixture) IBDevice(name, devPath, driver string, ports ...Port) {
	fn := "/sys/devices/" + devPath
	dev := fn + "/infiniband/" + name
	f.Link(dev+"/device", fn)
	f.Link("/sys/class/infiniband/"+name, dev)
	f.Write(dev+"/node_type", "1: CA\n") // present on real devices, read by no check
	for i, p := range ports {
		pd := fmt.Sprintf("%s/ports/%d", dev, i+1)
		f.Write(pd+"/state", p.State+"\n")
		f.Write(pd+"/link_layer", p.LinkLayer+"\n")
		pkey := p.PKey0
		if pkey == "" {
			pkey = "0xffff" // the full-member default partition key, as the kernel prints it
		}
		f.Write(pd+"/pkeys/0", pkey+"\n")
		for idx, g := range p.GIDs {
			f.Write(fmt.Sprintf("%s/gid_attrs/types/%d", pd, idx), g.Type+"\n")
			f.Write(fmt.Sprintf("%s/gids/%d", pd, idx), g.Addr+"\n")
		}
		if p.XmitData != "" {
			f.Write(pd+"/counters/port_xmit_data", p.XmitData+"\n")
		}
		if p.TxBytes != "" {
			f.Write(pd+"/hw_counters/tx_bytes", p.TxBytes+"\n")
		}
	}
}

// NvidiaParams writes /proc/driver/nvidia/params as nv-procfs.c prints it.
func (f *Fixture) NvidiaParams(enableStreamMemOps int, registryDwords string) {
	params := []string{
		"ResmanDebugLevel: 4294967295", "RmLogonRC: 1", "ModifyDeviceFiles: 1",
		"DeviceFileUID: 0", "DeviceFileGID: 0", "DeviceFileMode: 438",
		"InitializeSystemMemoryAllocations: 1", "UsePageAttributeTable: 4294967295",
		"EnableMSI: 1", "EnablePCIeGen3: 0", "MemoryPoolSize: 0", "KMallocHeapMaxSize: 0",
		"VMallocHeapMaxSize: 0", "IgnoreMMIOCheck: 0",
		fmt.Sprintf("EnableStreamMemOPs: %d", enableStreamMemOps),
		"EnableUserNUMAManagement: 1", "NvLinkDisable: 0", "RmProfilingAdminOnly: 1",
		"PreserveVideoMemoryAllocations: 0", "DynamicPowerManagement: 3",
		"RegisterPCIDriver: 1", "EnablePCIERelaxedOrderingMode: 0", "EnableResizableBar: 0",
		"EnableGpuFirmware: 18", "EnableGpuFirmwareLogs: 2", "EnableDbgBreakpoint: 0",
		"OpenRmEnableUnsupportedGpus: 1", "DmaRemapPeerMmio: 1", "ImexChannelCount: 2048",
		"CreateImexChannel0: 0", "GrdmaPciTopoCheckOverride: 0",
		fmt.Sprintf("RegistryDwords: %q", registryDwords),
		`RegistryDwordsPerDevice: ""`, `RmMsg: ""`, `GpuBlacklist: ""`, `TemporaryFilePath: ""`, `ExcludedGpus: ""`,
	}
	f.Write("/proc/driver/nvidia/params", strings.Join(params, "\n")+"\n")
	// The sysfs copy reads empty even when set: the checks must not trust it.
	f.Write("/sys/module/nvidia/parameters/NVreg_RegistryDwords", "\n")
}

// Module marks a kernel module as loaded (/sys/module/<name> exists).
func (f *Fixture) Module(name string) {
	f.Write("/sys/module/"+name+"/initstate", "live\n")
}

// PeermemModule loads nvidia_peermem: the module with its version attribute, which
// NVSHMEM 3.3.9 and later look for.
func (f *Fixture) PeermemModule() {
	f.Module("nvidia_peermem")
	f.Write("/sys/module/nvidia_peermem/version", "580.159.04\n")
}

// NvidiaVersion writes /proc/driver/nvidia/version of driver 580.159.04, open (the open
// GPU kernel modules) or proprietary.
func (f *Fixture) NvidiaVersion(open bool) {
	first := "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159.04  Wed Jun 25 17:07:42 UTC 2025"
	if open {
		first = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22-I3-AE18-23-3)  Wed Jun 25 17:27:06 UTC 2025"
	}
	f.Write("/proc/driver/nvidia/version", first+"\nGCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n")
}

// Netdev adds network interface name (under /sys/devices/pci0000:00/0000:00:03.0, or
// virtual for lo) with its operstate and flags.
func (f *Fixture) Netdev(name, operstate, flags string) {
	dev := "/sys/devices/pci0000:00/0000:00:03.0/net/" + name
	if name == "lo" {
		dev = "/sys/devices/virtual/net/lo"
	}
	f.Write(dev+"/operstate", operstate+"\n")
	f.Write(dev+"/flags", flags+"\n")
	f.Link("/sys/class/net/"+name, dev)
}

// Addresses stands in for `ip -o addr show`: lines as iproute2 prints them, one address
// each ("2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\       valid_lft ...").
func (f *Fixture) Addresses(lines ...string) {
	f.Command(strings.Join(lines, "\n")+"\n", "ip", "-o", "addr", "show")
}

// AddrLine is one line of `ip -o addr show` for interface index idx, name, family (inet,
// inet6) and address with prefix, as iproute2 prints a global address.
func AddrLine(idx int, name, family, cidr string) string {
	tail := " scope global " + name
	if family == "inet6" {
		tail = " scope global "
	}
	return fmt.Sprintf("%d: %s    %s %s%s\\       valid_lft forever preferred_lft forever", idx, name, family, cidr, tail)
}

// ModuleVersion loads a kernel module that says its version (/sys/module/<name>/version,
// MODULE_VERSION), as efa and gdrdrv do.
func (f *Fixture) ModuleVersion(name, version string) {
	f.Module(name)
	f.Write("/sys/module/"+name+"/version", version+"\n")
}

// VirtualFunction makes the PCI function at devPath an SR-IOV virtual function of the
// physical function at pfPath: the physfn link the kernel creates.
func (f *Fixture) VirtualFunction(devPath, pfPath string) {
	f.Link("/sys/devices/"+devPath+"/physfn", "/sys/devices/"+pfPath)
}

// CUDAVersionJSON writes a CUDA toolkit's version.json under dir (/usr/local/cuda-12.9) as
// the toolkit installs it: the SDK's version and each component's, nvcc's among them.
func (f *Fixture) CUDAVersionJSON(dir, sdk, nvcc string) {
	f.Write(dir+"/version.json", fmt.Sprintf(`{
   "cuda" : {
      "name" : "CUDA SDK",
      "version" : %q
   },
   "cuda_cudart" : {
      "name" : "CUDA Runtime (cudart)",
      "version" : %q
   },
   "cuda_nvcc" : {
      "name" : "CUDA NVCC",
      "version" : %q
   }
}
`, sdk, sdk, nvcc))
}

// Hostname writes this node's name, /proc/sys/kernel/hostname.
func (f *Fixture) Hostname(name string) { f.Write("/proc/sys/kernel/hostname", name+"\n") }

// Cgroup writes /proc/1/cgroup.
func (f *Fixture) Cgroup(content string) { f.Write("/proc/1/cgroup", content) }

// Executable writes an empty executable at host path p (an nvcc the checks look for).
func (f *Fixture) Executable(p string) {
	f.t.Helper()
	f.Write(p, "")
	if err := os.Chmod(f.Disk(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// CUDAToolkit writes a CUDA toolkit at host directory dir as a JIT finds it: an empty
// executable bin/nvcc and the runtime's header, include/cuda_runtime.h.
func (f *Fixture) CUDAToolkit(dir string) {
	f.t.Helper()
	f.Executable(dir + "/bin/nvcc")
	f.Write(dir+"/include/cuda_runtime.h", "")
}

// IMEXChannel creates /dev/nvidia-caps-imex-channels/channel<n> (an empty file here; a
// character device on a node).
func (f *Fixture) IMEXChannel(n int) {
	f.Write(fmt.Sprintf("/dev/nvidia-caps-imex-channels/channel%d", n), "")
}

// CommandFile is where a capture keeps the output of argv: /epbuild-commands/ and the
// command line, url.PathEscape'd (host.CommandPath; a test holds the two together).
func CommandFile(argv ...string) string {
	return "/epbuild-commands/" + url.PathEscape(strings.Join(argv, " "))
}

// Command stands in for a program: its output, as a capture keeps it.
func (f *Fixture) Command(output string, argv ...string) { f.Write(CommandFile(argv...), output) }

// FreeMemory stands in for nvidia-smi's free-memory query: GPU i has mib[i] MiB free
// ("[N/A]" for a GPU that cannot say).
func (f *Fixture) FreeMemory(mib ...string) {
	var b strings.Builder
	for i, m := range mib {
		fmt.Fprintf(&b, "%d, %s\n", i, m)
	}
	f.Command(b.String(), "nvidia-smi", "--query-gpu=index,memory.free", "--format=csv,noheader,nounits")
}

// Fabric is one GPU's Fabric section of nvidia-smi -q.
type Fabric struct{ State, Status, CliqueID, ClusterUUID string }

// NoFabric is what a GPU outside any NVLink fabric reports.
var NoFabric = Fabric{"N/A", "N/A", "N/A", "N/A"}

// SMIQuery stands in for nvidia-smi -q on GPUs at these PCI addresses, each with its
// Fabric section; the other sections are abridged.
func (f *Fixture) SMIQuery(addrs []string, fabric []Fabric) {
	f.smiQuery("NVIDIA H100 80GB HBM3", "81559 MiB", "81004 MiB", addrs, fabric)
}

// smiQuery is SMIQuery for GPUs of this product name and memory.
func (f *Fixture) smiQuery(product, total, free string, addrs []string, fabric []Fabric) {
	var b strings.Builder
	b.WriteString("\n==============NVSMI LOG==============\n\n")
	b.WriteString("Timestamp                                 : Tue Nov 24 13:05:11 2026\n")
	b.WriteString("Driver Version                            : 580.159.04\nCUDA Version                              : 13.0\n\n")
	fmt.Fprintf(&b, "Attached GPUs                             : %d\n", len(addrs))
	for i, a := range addrs {
		fb := fabric[i]
		fmt.Fprintf(&b, "GPU %s\n", a)
		fmt.Fprintf(&b, "    Product Name                          : %s\n", product)
		b.WriteString("    Serial Number                         : 1650523012345\n")
		b.WriteString("    Fabric\n")
		fmt.Fprintf(&b, "        State                             : %s\n", fb.State)
		fmt.Fprintf(&b, "        Status                            : %s\n", fb.Status)
		fmt.Fprintf(&b, "        CliqueId                          : %s\n", fb.CliqueID)
		fmt.Fprintf(&b, "        ClusterUUID                       : %s\n", fb.ClusterUUID)
		b.WriteString("        Health\n            Summary                       : N/A\n")
		fmt.Fprintf(&b, "    FB Memory Usage\n        Total                             : %s\n        Free                              : %s\n", total, free)
	}
	f.Command(b.String(), "nvidia-smi", "-q")
}

// Limits writes /proc/self → /proc/4242 and its limits file with the given memlock limits.
func (f *Fixture) Limits(memlockSoft, memlockHard string) {
	row := func(name, soft, hard, unit string) string {
		return fmt.Sprintf("%-25s %-20s %-20s %-10s\n", name, soft, hard, unit)
	}
	s := row("Limit", "Soft Limit", "Hard Limit", "Units") +
		row("Max cpu time", "unlimited", "unlimited", "seconds") +
		row("Max file size", "unlimited", "unlimited", "bytes") +
		row("Max open files", "1048576", "1048576", "files") +
		row("Max locked memory", memlockSoft, memlockHard, "bytes") +
		row("Max address space", "unlimited", "unlimited", "bytes")
	f.Write("/proc/4242/limits", s)
	f.Link("/proc/self", "/proc/4242")
}

// NodeOpts varies the GCP B200 node for the misconfigured cases.
type NodeOpts struct {
	Peermem        bool
	StreamMemOps   int
	RegistryDwords string
	NICName        func(i int, devPath string) string
	PortState      func(i int) string
}

// MLX5Name is the name DOCA-OFED gives the i-th ConnectX device.
func MLX5Name(i int, _ string) string { return fmt.Sprintf("mlx5_%d", i) }

// RoCEName is the name GCP's image gives a RoCE device without DOCA-OFED renaming.
func RoCEName(_ int, devPath string) string {
	var bus int
	fmt.Sscanf(path.Base(devPath), "0000:%x:", &bus)
	return fmt.Sprintf("rocep%ds0", bus)
}

// GCPB200 is a GCP B200 node: 8 GPUs and 8 ConnectX NICs (RoCE, renamed mlx5_0..7 by
// DOCA-OFED), each GPU with its NIC under its own PCIe switch, 4 switches per socket;
// RoCE v2 with the IPv4-mapped GID at index 3, nvidia_peermem loaded, regkeys set.
func GCPB200(t testing.TB) string {
	return GCPB200With(t, NodeOpts{Peermem: true, StreamMemOps: 1, RegistryDwords: "PeerMappingOverride=1;", NICName: MLX5Name})
}

// GCPB200With is GCPB200 varied by o.
func GCPB200With(t testing.TB, o NodeOpts) string {
	f := New(t)
	f.NvidiaParams(o.StreamMemOps, o.RegistryDwords)
	if o.Peermem {
		f.PeermemModule()
	}
	f.Module("nvidia")
	f.Limits("unlimited", "unlimited")
	for i := 0; i < 8; i++ {
		sw := f.PCIeSwitch(i/4, i%4)
		f.GPU(sw.Endpoint(), i/4)
		nic := sw.Endpoint()
		f.PCI(nic, "0x15b3", "0x020000", i/4, "mlx5_core") // ConnectX, Ethernet controller
		p := ActiveRoCE([4]byte{10, 128, byte(i), 3})
		if o.PortState != nil {
			p.State = o.PortState(i)
		}
		f.IBDevice(o.NICName(i, nic), nic, "mlx5_core", p)
	}
	// The addresses getifaddrs gives: loopback, and the host NIC enp0s19 (IPv4 and
	// link-local IPv6); GCP gives a /32.
	f.Addresses("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever",
		"1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever",
		AddrLine(2, "enp0s19", "inet", "10.128.0.3/32"),
		"2: enp0s19    inet6 fe80::4001:aff:fe80:3/64 scope link \\       valid_lft forever preferred_lft forever")
	// An NVMe drive on socket 0's host bridge: a PCI device that is neither GPU nor NIC.
	f.PCI("pci0000:00/0000:00:05.0", "0x8086", "0x060400", 0, "pcieport")
	f.PCI("pci0000:00/0000:00:05.0/0000:70:00.0", "0x144d", "0x010802", 0, "nvme")
	return f.root
}

// AWSP5 is an AWS p5.48xlarge: 8 H100 and 32 EFA functions (4 under each GPU's switch),
// named rdmap<bus>s0 by udev (bus in decimal), driver efa; the 4 NVSwitches also show on
// the PCI bus (vendor 0x10de, class 0x068000) and are not GPUs; gdrdrv is loaded.
func AWSP5(t testing.TB) string {
	f := New(t)
	f.NvidiaParams(0, "")
	f.Module("nvidia")
	f.Module("gdrdrv")
	f.Write("/dev/gdrdrv", "")
	f.Limits("unlimited", "unlimited")
	for i := 0; i < 8; i++ {
		sw := f.PCIeSwitch(i/4, i%4)
		f.GPU(sw.Endpoint(), i/4)
		for j := 0; j < 4; j++ {
			nic := sw.Endpoint()
			f.PCI(nic, "0x1d0f", "0x020000", i/4, "efa") // Amazon EFA
			var bus int
			fmt.Sscanf(path.Base(nic), "0000:%x:", &bus)
			f.IBDevice(fmt.Sprintf("rdmap%ds0", bus), nic, "efa",
				Port{State: "4: ACTIVE", LinkLayer: "Unknown", TxBytes: "0"})
		}
	}
	nvsw := f.PCIeSwitch(1, 5)
	for k := 0; k < 4; k++ {
		f.PCI(nvsw.Endpoint(), "0x10de", "0x068000", 1, "")
	}
	return f.root
}

// GB200Opts varies the GB200 node for the misconfigured cases.
type GB200Opts struct {
	// IMEXChannel: /dev/nvidia-caps-imex-channels/channel0 exists (the administrator ran
	// mknod, or the container runtime passed it in).
	IMEXChannel bool
	// GPUs is the node's GPU count (0: the 4 of a GB200 compute tray's node).
	GPUs int
	// Fabric is GPU i's Fabric section (nil: registered, State Completed, Status Success).
	Fabric func(i int) Fabric
}

// GB200Fabric is what a GPU of a GB200 NVL72 rack that registered with the NVLink fabric
// reports; every GPU of the rack names the same cluster and clique.
var GB200Fabric = Fabric{"Completed", "Success", "32766", "5d3a4f62-8c1e-4b7a-9f10-2e6c8b9d7a41"}

// GB200 is a node of a GB200 NVL72 rack with every GPU registered and the IMEX channel.
func GB200(t testing.TB) string { return GB200With(t, GB200Opts{IMEXChannel: true}) }

// GB200With is a node of a GB200 NVL72 rack (one Grace-Blackwell compute tray's node:
// aarch64, 2 Grace CPUs, 4 Blackwell GPUs), varied by o:
//   - documented: the IMEX channel device and its major in /proc/devices (NVIDIA IMEX
//     guide, "IMEX Channels": "234 nvidia-caps-imex-channels", channel0 minor 0; a capture
//     holds a device as an empty file), /proc/driver/nvidia/version naming aarch64 (GB200
//     needs the open kernel modules), nvidia-smi -q's Fabric section (nvmlGpuFabricInfo_t);
//   - assumed: the GPUs' PCI addresses (one PCI domain per GPU, 0008, 0009, 0018, 0019,
//     behind a root port, NUMA node 0 for the first two and 1 for the others), the kernel
//     release, the driver version, the cluster UUID and clique id, the major numbers, the
//     product name and memory. The ConnectX NICs are left out: the job stays in the NVLink
//     domain and uses none.
func GB200With(t testing.TB, o GB200Opts) string {
	f := New(t)
	n := o.GPUs
	if n == 0 {
		n = 4
	}
	f.Kernel("6.8.0-1028-nvidia-64k")
	f.NvidiaParams(0, "")
	f.Module("nvidia")
	f.Write("/proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.159.04  Release Build  (dvs-builder@U22-I3-AE18-23-3)  Wed Jun 25 17:27:06 UTC 2025\n"+
		"GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04) \n")
	f.Write("/proc/devices", "Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 /dev/tty\n  5 /dev/console\n 10 misc\n"+
		"195 nvidia\n195 nvidia-modeset\n195 nvidiactl\n234 nvidia-caps-imex-channels\n235 nvidia-caps\n236 nvidia-uvm\n507 nvidia-nvlink\n\n"+
		"Block devices:\n  7 loop\n  8 sd\n259 blkext\n")
	f.Limits("unlimited", "unlimited")
	domains := []int{0x0008, 0x0009, 0x0018, 0x0019}
	var addrs []string
	var fabric []Fabric
	for i := 0; i < n; i++ {
		dom := domains[i%len(domains)] + 0x100*(i/len(domains))
		addr := fmt.Sprintf("%04x:01:00.0", dom)
		f.PCI(fmt.Sprintf("pci%04x:00/%04x:00:00.0", dom, dom), "0x10de", "0x060400", i/2%2, "pcieport")
		f.GPU(fmt.Sprintf("pci%04x:00/%04x:00:00.0/%s", dom, dom, addr), i/2%2)
		addrs = append(addrs, fmt.Sprintf("%08X:01:00.0", dom))
		fb := GB200Fabric
		if o.Fabric != nil {
			fb = o.Fabric(i)
		}
		fabric = append(fabric, fb)
	}
	f.smiQuery("NVIDIA GB200", "189471 MiB", "188915 MiB", addrs, fabric)
	f.Mkdir("/dev/nvidia-caps-imex-channels")
	if o.IMEXChannel {
		f.IMEXChannel(0)
	}
	return f.root
}

// Kernel writes /proc/sys/kernel/osrelease.
func (f *Fixture) Kernel(release string) { f.Write("/proc/sys/kernel/osrelease", release+"\n") }

// DpkgPackages writes /var/lib/dpkg/status with installed packages (name → version) among
// two unrelated ones.
func (f *Fixture) DpkgPackages(pkgs map[string]string) {
	var b strings.Builder
	stanza := func(name, version string) {
		fmt.Fprintf(&b, "Package: %s\nStatus: install ok installed\nPriority: optional\nSection: net\nArchitecture: amd64\nVersion: %s\nDescription: %s\n\n", name, version, name)
	}
	stanza("adduser", "3.137ubuntu1")
	for _, name := range slices.Sorted(maps.Keys(pkgs)) {
		stanza(name, pkgs[name])
	}
	stanza("zlib1g", "1:1.3.dfsg-3.1ubuntu2.1")
	f.Write("/var/lib/dpkg/status", b.String())
}
