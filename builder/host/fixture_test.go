package host

// Fixture sysroots, written by a small builder so that each node reads like a description.
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
//
// Assumed (plausible, not taken from a real node of that kind):
//   - the bus numbers, root ports and switch layout of each node; the Broadcom/Intel
//     bridge IDs; that every GPU/NIC pair of the GCP B200 node sits under its own switch,
//     and that the p5 node has 4 EFA functions under each GPU's switch;
//   - the exact list of other parameters in /proc/driver/nvidia/params;
//   - the nv_mem version string; the GID addresses.
//   - /dev/gdrdrv is an empty regular file here (creating a character device needs
//     privilege); the check only asks that it exist.

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// fixture writes a sysroot directory.
type fixture struct {
	t    testing.TB
	root string
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return &fixture{t: t, root: t.TempDir()}
}

func (f *fixture) disk(p string) string { return filepath.Join(f.root, filepath.FromSlash(p)) }

// write creates host file p with content.
func (f *fixture) write(p, content string) {
	f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(f.disk(p)), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(f.disk(p), []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) mkdir(p string) {
	f.t.Helper()
	if err := os.MkdirAll(f.disk(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// link makes host path p a symlink to host path target, written relative as sysfs does.
func (f *fixture) link(p, target string) {
	f.t.Helper()
	rel, err := filepath.Rel(path.Dir(p), target)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mkdir(path.Dir(p))
	if err := os.Symlink(filepath.ToSlash(rel), f.disk(p)); err != nil {
		f.t.Fatal(err)
	}
}

// pci adds a PCI function at devPath (below /sys/devices; its last element is its address).
func (f *fixture) pci(devPath, vendor, class string, numa int, driver string) {
	full := "/sys/devices/" + devPath
	f.write(full+"/vendor", vendor+"\n")
	f.write(full+"/class", class+"\n")
	f.write(full+"/numa_node", fmt.Sprintf("%d\n", numa))
	if driver != "" {
		f.mkdir("/sys/bus/pci/drivers/" + driver)
		f.link(full+"/driver", "/sys/bus/pci/drivers/"+driver)
	}
	f.link("/sys/bus/pci/devices/"+path.Base(devPath), full)
}

// pcieSwitch is a switch behind root port slot of the root complex of socket: its
// upstream port, and downstream ports that each lead to one endpoint.
type pcieSwitch struct {
	f        *fixture
	upstream string // devPath of the upstream port
	bus      int    // the upstream port's bus
	numa     int
	ports    int
}

// pcieSwitch adds root complex pci0000:<socket*0x80>, a root port and a switch under it.
func (f *fixture) pcieSwitch(socket, slot int) *pcieSwitch {
	rb := socket * 0x80
	rc := fmt.Sprintf("pci0000:%02x", rb)
	if _, err := os.Stat(f.disk("/sys/devices/" + rc)); err != nil {
		f.pci(fmt.Sprintf("%s/0000:%02x:00.0", rc, rb), "0x8086", "0x060000", socket, "") // host bridge
	}
	rootPort := fmt.Sprintf("%s/0000:%02x:%02x.0", rc, rb, slot+1)
	f.pci(rootPort, "0x8086", "0x060400", socket, "pcieport")
	ub := rb + 1 + slot*0x10
	up := fmt.Sprintf("%s/0000:%02x:00.0", rootPort, ub)
	f.pci(up, "0x1000", "0x060400", socket, "pcieport") // Broadcom PEX switch, upstream port
	return &pcieSwitch{f: f, upstream: up, bus: ub, numa: socket}
}

// endpoint adds a downstream port and returns the devPath of the function behind it.
func (s *pcieSwitch) endpoint() string {
	n := s.ports
	s.ports++
	down := fmt.Sprintf("%s/0000:%02x:%02x.0", s.upstream, s.bus+1, n)
	s.f.pci(down, "0x1000", "0x060400", s.numa, "pcieport")
	return fmt.Sprintf("%s/0000:%02x:00.0", down, s.bus+2+n)
}

func (f *fixture) gpu(devPath string, numa int) {
	f.pci(devPath, "0x10de", "0x030200", numa, "nvidia")
}

// gid is one GID table entry as sysfs prints it.
type gid struct{ typ, addr string }

// port describes one RDMA port.
type port struct {
	state, linkLayer string
	gids             map[int]gid
	xmitData         string // counters/port_xmit_data, "" for none
	txBytes          string // hw_counters/tx_bytes, "" for none
}

// roceGIDs is the table mlx5 builds for one IPv4 address on a RoCE port: link-local v1
// and v2, then the IPv4-mapped address as v1 (index 2) and v2 (index 3).
func roceGIDs(ipv4 [4]byte) map[int]gid {
	ll := "fe80:0000:0000:0000:0a00:00ff:fe00:0001"
	v4 := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", ipv4[0], ipv4[1], ipv4[2], ipv4[3])
	return map[int]gid{0: {"IB/RoCE v1", ll}, 1: {"RoCE v2", ll}, 2: {"IB/RoCE v1", v4}, 3: {"RoCE v2", v4}}
}

func activeRoCE(ipv4 [4]byte) port {
	return port{state: "4: ACTIVE", linkLayer: "Ethernet", gids: roceGIDs(ipv4), xmitData: "0"}
}

// ibDevice adds an RDMA device named name on the PCI function at devPath.
func (f *fixture) ibDevice(name, devPath, driver string, ports ...port) {
	fn := "/sys/devices/" + devPath
	dev := fn + "/infiniband/" + name
	f.link(dev+"/device", fn)
	f.link("/sys/class/infiniband/"+name, dev)
	f.write(dev+"/node_type", "1: CA\n") // present on real devices, read by no check
	for i, p := range ports {
		pd := fmt.Sprintf("%s/ports/%d", dev, i+1)
		f.write(pd+"/state", p.state+"\n")
		f.write(pd+"/link_layer", p.linkLayer+"\n")
		for idx, g := range p.gids {
			f.write(fmt.Sprintf("%s/gid_attrs/types/%d", pd, idx), g.typ+"\n")
			f.write(fmt.Sprintf("%s/gids/%d", pd, idx), g.addr+"\n")
		}
		if p.xmitData != "" {
			f.write(pd+"/counters/port_xmit_data", p.xmitData+"\n")
		}
		if p.txBytes != "" {
			f.write(pd+"/hw_counters/tx_bytes", p.txBytes+"\n")
		}
	}
}

// nvidiaParams writes /proc/driver/nvidia/params as nv-procfs.c prints it.
func (f *fixture) nvidiaParams(enableStreamMemOps int, registryDwords string) {
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
	f.write("/proc/driver/nvidia/params", strings.Join(params, "\n")+"\n")
	// The sysfs copy reads empty even when set: the checks must not trust it.
	f.write("/sys/module/nvidia/parameters/NVreg_RegistryDwords", "\n")
}

// module marks a kernel module as loaded (/sys/module/<name> exists).
func (f *fixture) module(name string) {
	f.write("/sys/module/"+name+"/initstate", "live\n")
}

// limits writes /proc/self → /proc/4242 and its limits file with the given memlock limits.
func (f *fixture) limits(memlockSoft, memlockHard string) {
	row := func(name, soft, hard, unit string) string {
		return fmt.Sprintf("%-25s %-20s %-20s %-10s\n", name, soft, hard, unit)
	}
	s := row("Limit", "Soft Limit", "Hard Limit", "Units") +
		row("Max cpu time", "unlimited", "unlimited", "seconds") +
		row("Max file size", "unlimited", "unlimited", "bytes") +
		row("Max open files", "1048576", "1048576", "files") +
		row("Max locked memory", memlockSoft, memlockHard, "bytes") +
		row("Max address space", "unlimited", "unlimited", "bytes")
	f.write("/proc/4242/limits", s)
	f.link("/proc/self", "/proc/4242")
}

// nodeOpts varies the GCP B200 node for the misconfigured cases.
type nodeOpts struct {
	peermem        bool
	streamMemOps   int
	registryDwords string
	nicName        func(i int, devPath string) string
	portState      func(i int) string
}

func mlx5Name(i int, _ string) string { return fmt.Sprintf("mlx5_%d", i) }

// roceName is the name GCP's image gives a RoCE device without DOCA-OFED renaming.
func roceName(_ int, devPath string) string {
	var bus int
	fmt.Sscanf(path.Base(devPath), "0000:%x:", &bus)
	return fmt.Sprintf("rocep%ds0", bus)
}

// gcpB200 is a GCP B200 node: 8 GPUs and 8 ConnectX NICs (RoCE, renamed mlx5_0..7 by
// DOCA-OFED), each GPU with its NIC under its own PCIe switch, 4 switches per socket;
// RoCE v2 with the IPv4-mapped GID at index 3, nvidia_peermem loaded, regkeys set.
func gcpB200(t testing.TB) string {
	return gcpB200With(t, nodeOpts{peermem: true, streamMemOps: 1, registryDwords: "PeerMappingOverride=1;", nicName: mlx5Name})
}

func gcpB200With(t testing.TB, o nodeOpts) string {
	f := newFixture(t)
	f.nvidiaParams(o.streamMemOps, o.registryDwords)
	if o.peermem {
		f.module("nvidia_peermem")
	}
	f.module("nvidia")
	f.limits("unlimited", "unlimited")
	for i := 0; i < 8; i++ {
		sw := f.pcieSwitch(i/4, i%4)
		f.gpu(sw.endpoint(), i/4)
		nic := sw.endpoint()
		f.pci(nic, "0x15b3", "0x020000", i/4, "mlx5_core") // ConnectX, Ethernet controller
		p := activeRoCE([4]byte{10, 128, byte(i), 3})
		if o.portState != nil {
			p.state = o.portState(i)
		}
		f.ibDevice(o.nicName(i, nic), nic, "mlx5_core", p)
	}
	// An NVMe drive on socket 0's host bridge: a PCI device that is neither GPU nor NIC.
	f.pci("pci0000:00/0000:00:05.0", "0x8086", "0x060400", 0, "pcieport")
	f.pci("pci0000:00/0000:00:05.0/0000:70:00.0", "0x144d", "0x010802", 0, "nvme")
	return f.root
}

// gcpB200Config is what the gcp-b200 recipe's runtime environment asks.
func gcpB200Config() Config {
	return Config{
		Recipe: "gcp-b200", Transport: TransportIBGDA, GIDIndex: 3, HCAPrefix: "mlx5",
		Mapping:     "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1,4:mlx5_4:1,5:mlx5_5:1,6:mlx5_6:1,7:mlx5_7:1",
		NeedPeerMem: true, NeedPeerMappingOverride: true, NVSHMEMVersion: "3.5.19-1",
		NCCLBuildVersion: "2.27.3-1", NCCLRuntimeVersion: "2.27.3",
	}
}

// awsP5 is an AWS p5.48xlarge: 8 H100 and 32 EFA functions (4 under each GPU's switch),
// named rdmap<bus>s0 by udev (bus in decimal), driver efa; the 4 NVSwitches also show on
// the PCI bus (vendor 0x10de, class 0x068000) and are not GPUs; gdrdrv is loaded.
func awsP5(t testing.TB) string {
	f := newFixture(t)
	f.nvidiaParams(0, "")
	f.module("nvidia")
	f.module("gdrdrv")
	f.write("/dev/gdrdrv", "")
	f.limits("unlimited", "unlimited")
	for i := 0; i < 8; i++ {
		sw := f.pcieSwitch(i/4, i%4)
		f.gpu(sw.endpoint(), i/4)
		for j := 0; j < 4; j++ {
			nic := sw.endpoint()
			f.pci(nic, "0x1d0f", "0x020000", i/4, "efa") // Amazon EFA
			var bus int
			fmt.Sscanf(path.Base(nic), "0000:%x:", &bus)
			f.ibDevice(fmt.Sprintf("rdmap%ds0", bus), nic, "efa",
				port{state: "4: ACTIVE", linkLayer: "Unknown", txBytes: "0"})
		}
	}
	nvsw := f.pcieSwitch(1, 5)
	for k := 0; k < 4; k++ {
		f.pci(nvsw.endpoint(), "0x10de", "0x068000", 1, "")
	}
	return f.root
}

func awsP5Config() Config {
	return Config{Recipe: "efa-aws", Transport: TransportEFA, NeedGDRCopy: true, NVSHMEMVersion: "3.4.5-0"}
}

func removeAll(p string) error { return os.RemoveAll(p) }
