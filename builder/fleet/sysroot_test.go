package fleet

// A node's /sys, /proc and /dev as the host checks read them, standing in for hardware
// this machine lacks (GPUs, RDMA NICs, the NVIDIA driver). Written as the kernel and the
// driver print them (the layout builder/host's fixtures document: relative symlinks from
// /sys/bus/pci/devices and /sys/class/infiniband into /sys/devices, one directory per
// PCIe hop; port state "4: ACTIVE", link_layer, gid_attrs/types, gids in %pI6;
// /proc/driver/nvidia/params; /proc/self/limits). Assumed: the bus numbers and switch
// layout, 4 GPUs and 4 NICs a node, each pair under its own PCIe switch.

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"testing"
)

type sysWriter struct {
	t    *testing.T
	root string
}

func (w sysWriter) write(p, content string) {
	w.t.Helper()
	full := filepath.Join(w.root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// link makes p a relative symlink to target, as sysfs does.
func (w sysWriter) link(p, target string) {
	w.t.Helper()
	rel, err := filepath.Rel(path.Dir(p), target)
	if err != nil {
		w.t.Fatal(err)
	}
	full := filepath.Join(w.root, filepath.FromSlash(p))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Symlink(filepath.ToSlash(rel), full); err != nil {
		w.t.Fatal(err)
	}
}

func (w sysWriter) pci(devPath, vendor, class string, numa int, driver string) {
	full := "/sys/devices/" + devPath
	w.write(full+"/vendor", vendor+"\n")
	w.write(full+"/class", class+"\n")
	w.write(full+"/numa_node", fmt.Sprintf("%d\n", numa))
	if driver != "" {
		w.write("/sys/bus/pci/drivers/"+driver+"/uevent", "DRIVER="+driver+"\n")
		w.link(full+"/driver", "/sys/bus/pci/drivers/"+driver)
	}
	w.link("/sys/bus/pci/devices/"+path.Base(devPath), full)
}

// writeNode writes a RoCE node: GPU i and NIC nicName(i) under PCIe switch i, RoCE v2
// with an IPv4-mapped GID at index 3, the driver loaded, memlock at the 8 MiB a
// distribution's default login gives (too little for RDMA: every node fails it alike).
func writeNode(t *testing.T, nicName func(i int) string) string {
	w := sysWriter{t: t, root: t.TempDir()}
	w.write("/proc/driver/nvidia/params", "EnableStreamMemOPs: 1\nRegistryDwords: \"PeerMappingOverride=1;\"\n")
	w.write("/sys/module/nvidia/initstate", "live\n")
	w.write("/sys/module/nvidia_peermem/initstate", "live\n")
	w.write("/proc/4242/limits", fmt.Sprintf("%-25s %-20s %-20s %-10s\n%-25s %-20s %-20s %-10s\n",
		"Limit", "Soft Limit", "Hard Limit", "Units", "Max locked memory", "8388608", "8388608", "bytes"))
	w.link("/proc/self", "/proc/4242")
	w.pci("pci0000:00/0000:00:00.0", "0x8086", "0x060000", 0, "")
	for i := range 4 {
		root := fmt.Sprintf("pci0000:00/0000:00:%02x.0", i+1)
		bus := 1 + i*0x10
		up := fmt.Sprintf("%s/0000:%02x:00.0", root, bus)
		w.pci(root, "0x8086", "0x060400", 0, "pcieport")
		w.pci(up, "0x1000", "0x060400", 0, "pcieport")
		var ends []string
		for port := range 2 {
			down := fmt.Sprintf("%s/0000:%02x:%02x.0", up, bus+1, port)
			w.pci(down, "0x1000", "0x060400", 0, "pcieport")
			ends = append(ends, fmt.Sprintf("%s/0000:%02x:00.0", down, bus+2+port))
		}
		w.pci(ends[0], "0x10de", "0x030200", 0, "nvidia")
		w.pci(ends[1], "0x15b3", "0x020000", 0, "mlx5_core")
		name := nicName(i)
		dev := "/sys/devices/" + ends[1] + "/infiniband/" + name
		w.link(dev+"/device", "/sys/devices/"+ends[1])
		w.link("/sys/class/infiniband/"+name, dev)
		pd := dev + "/ports/1"
		w.write(pd+"/state", "4: ACTIVE\n")
		w.write(pd+"/link_layer", "Ethernet\n")
		ll := "fe80:0000:0000:0000:0a00:00ff:fe00:0001"
		v4 := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:0a80:%02x03", i)
		for idx, g := range []struct{ typ, addr string }{{"IB/RoCE v1", ll}, {"RoCE v2", ll}, {"IB/RoCE v1", v4}, {"RoCE v2", v4}} {
			w.write(fmt.Sprintf("%s/gid_attrs/types/%d", pd, idx), g.typ+"\n")
			w.write(fmt.Sprintf("%s/gids/%d", pd, idx), g.addr+"\n")
		}
		w.write(pd+"/counters/port_xmit_data", "0\n")
	}
	return w.root
}
