package host

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// Documented sysfs locations (Documentation/ABI/testing/sysfs-bus-pci,
// Documentation/ABI/stable/sysfs-class-infiniband).
const (
	pciDevicesDir = "/sys/bus/pci/devices"
	ibClassDir    = "/sys/class/infiniband"
	sysDevicesDir = "/sys/devices"
)

const nvidiaVendor = "0x10de"

// pciDevice is a PCI function with its place in the PCIe tree.
type pciDevice struct {
	Addr string // "0000:18:00.0"
	Path string // resolved host path, "/sys/devices/pci0000:00/.../0000:18:00.0"
	NUMA int    // -1 when the platform does not say
}

// ibPort is one port of an RDMA device.
type ibPort struct {
	Num       int
	State     string // "4: ACTIVE"
	LinkLayer string // "Ethernet", "InfiniBand", "Unknown" (EFA)
	Err       error  // what went wrong reading state or link_layer
}

func (p ibPort) active() bool { return strings.HasSuffix(p.State, "ACTIVE") }

// ibDevice is an entry of /sys/class/infiniband.
type ibDevice struct {
	Name   string
	Driver string // basename of device/driver: "mlx5_core", "efa"
	PCI    pciDevice
	Ports  []ibPort
	Err    error // what went wrong locating the device in the PCIe tree
}

// activePort is the first ACTIVE port, else the first port, else 1.
func (d ibDevice) activePort() int {
	for _, p := range d.Ports {
		if p.active() {
			return p.Num
		}
	}
	if len(d.Ports) > 0 {
		return d.Ports[0].Num
	}
	return 1
}

// pciKey orders PCI addresses (domain:bus:device.function, hex) numerically; domains may
// have more than 4 digits (VMD), so a string sort is not enough.
func pciKey(addr string) (uint64, bool) {
	var dom, bus, dev, fn uint64
	f := strings.Split(addr, ":")
	if len(f) != 3 {
		return 0, false
	}
	df := strings.Split(f[2], ".")
	if len(df) != 2 {
		return 0, false
	}
	var err error
	parse := func(s string, bits int) uint64 {
		if err != nil {
			return 0
		}
		var v uint64
		v, err = strconv.ParseUint(s, 16, bits)
		return v
	}
	dom, bus, dev, fn = parse(f[0], 32), parse(f[1], 8), parse(df[0], 5), parse(df[1], 3)
	if err != nil {
		return 0, false
	}
	return dom<<16 | bus<<8 | dev<<3 | fn, true
}

func readNUMA(sys sysroot.Root, devDir string) int {
	s, err := sys.ReadString(devDir + "/numa_node")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// findGPUs lists NVIDIA display/3D controllers (vendor 0x10de, class 0x0300xx or 0x0302xx;
// NVSwitches are class 0x0680xx and are left out), sorted by PCI address: the CUDA device
// order under CUDA_DEVICE_ORDER=PCI_BUS_ID, which is also CUDA's default order on nodes
// of identical GPUs.
func findGPUs(sys sysroot.Root) ([]pciDevice, error) {
	names, err := sys.Names(pciDevicesDir)
	if err != nil {
		return nil, fmt.Errorf("find GPUs: %w", err)
	}
	var gpus []pciDevice
	for _, name := range names {
		dir := pciDevicesDir + "/" + name
		vendor, err := sys.ReadString(dir + "/vendor")
		if err != nil || vendor != nvidiaVendor {
			continue
		}
		class, err := sys.ReadString(dir + "/class")
		if err != nil {
			continue
		}
		c, err := strconv.ParseUint(strings.TrimPrefix(class, "0x"), 16, 32)
		if err != nil || (c>>8 != 0x0300 && c>>8 != 0x0302) {
			continue
		}
		p, err := sys.Resolve(dir)
		if err != nil {
			return nil, fmt.Errorf("find GPUs: %w", err)
		}
		gpus = append(gpus, pciDevice{Addr: name, Path: p, NUMA: readNUMA(sys, dir)})
	}
	sort.SliceStable(gpus, func(i, j int) bool {
		ki, _ := pciKey(gpus[i].Addr)
		kj, _ := pciKey(gpus[j].Addr)
		return ki < kj
	})
	return gpus, nil
}

// findIBDevices lists /sys/class/infiniband with each device's driver, PCI function and
// ports. A missing class directory (no RDMA core loaded) is no devices, not an error.
func findIBDevices(sys sysroot.Root) ([]ibDevice, error) {
	names, err := sys.Names(ibClassDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find RDMA devices: %w", err)
	}
	sort.Slice(names, func(i, j int) bool { return natLess(names[i], names[j]) })
	var devs []ibDevice
	for _, name := range names {
		dir := ibClassDir + "/" + name
		d := ibDevice{Name: name}
		if link, err := sys.Readlink(dir + "/device/driver"); err == nil {
			d.Driver = path.Base(link)
		}
		if p, err := sys.Resolve(dir + "/device"); err == nil {
			d.PCI = pciDevice{Addr: path.Base(p), Path: p, NUMA: readNUMA(sys, dir+"/device")}
		} else {
			d.Err = err
		}
		ports, err := sys.Names(dir + "/ports")
		if err != nil && d.Err == nil {
			d.Err = err
		}
		for _, pn := range ports {
			n, err := strconv.Atoi(pn)
			if err != nil {
				continue
			}
			p := ibPort{Num: n}
			pdir := fmt.Sprintf("%s/ports/%d", dir, n)
			if p.State, err = sys.ReadString(pdir + "/state"); err != nil {
				p.Err = err
			}
			if p.LinkLayer, err = sys.ReadString(pdir + "/link_layer"); err != nil && p.Err == nil {
				p.Err = err
			}
			d.Ports = append(d.Ports, p)
		}
		sort.Slice(d.Ports, func(i, j int) bool { return d.Ports[i].Num < d.Ports[j].Num })
		devs = append(devs, d)
	}
	return devs, nil
}

// treeDepth is how many PCIe tree levels below /sys/devices two resolved paths share:
// 0 none (different root complexes), 1 the root complex ("pci0000:00"), 2 a root port,
// ≥3 a switch port below it.
func treeDepth(a, b string) (depth int, via string) {
	pa := sysroot.SplitPath(strings.TrimPrefix(a, sysDevicesDir))
	pb := sysroot.SplitPath(strings.TrimPrefix(b, sysDevicesDir))
	for depth < len(pa) && depth < len(pb) && pa[depth] == pb[depth] {
		via = pa[depth]
		depth++
	}
	return depth, via
}

// describeDepth names a shared ancestor level in nvidia-smi topo's spirit.
func describeDepth(depth int) string {
	switch {
	case depth >= 2:
		return "same PCIe switch"
	case depth == 1:
		return "same host bridge only"
	}
	return "no common PCIe ancestor"
}

// RDMADevices names the RDMA devices of the node (under /sys/class/infiniband), none when
// the directory is absent: what a test that needs a verbs NIC asks (`epbuild test`).
func RDMADevices(sys sysroot.Root) ([]string, error) {
	devs, err := findIBDevices(sys)
	names := make([]string, 0, len(devs))
	for _, d := range devs {
		names = append(names, d.Name)
	}
	return names, err
}
