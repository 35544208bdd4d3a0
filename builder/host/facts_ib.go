package host

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// considered are the RDMA devices NVSHMEM would open: those named NVSHMEM_HCA_PREFIX*
// when it is set, else every one (the rules judge the driver and the names themselves).
func (r *Node) considered() []ibDevice {
	var out []ibDevice
	for _, d := range r.devs {
		if r.cfg.HCAPrefix == "" || strings.HasPrefix(d.Name, r.cfg.HCAPrefix) {
			out = append(out, d)
		}
	}
	return out
}

// ibFacts describes the RDMA devices NVSHMEM would consider: their link layer (none when
// there is no such device), driver and name prefix, "mixed" where they differ.
func (r *Node) ibFacts(f map[string]string) {
	if r.devErr != nil {
		return
	}
	var layers, drivers, prefixes []string
	add := func(list *[]string, v string) {
		if v != "" && !slices.Contains(*list, v) {
			*list = append(*list, v)
		}
	}
	devs := r.considered()
	for _, d := range devs {
		add(&drivers, d.Driver)
		add(&prefixes, hcaPrefixOf(d.Name))
		for _, p := range d.Ports {
			add(&layers, p.LinkLayer)
		}
	}
	one := func(key string, vals []string) {
		switch len(vals) {
		case 0:
		case 1:
			f[key] = vals[0]
		default:
			f[key] = "mixed"
		}
	}
	if len(devs) == 0 {
		f["ib.link-layer"] = "none"
	}
	one("ib.link-layer", layers)
	one("ib.driver", drivers)
	one("ib.name-prefix", prefixes)
}

// hcaPrefixOf is the prefix NVSHMEM_HCA_PREFIX would need to select a device: what
// precedes the index of a renamed device (mlx5_3 → mlx5), else its leading letters
// (rocep145s0 → rocep).
func hcaPrefixOf(name string) string {
	if i := strings.LastIndexByte(name, '_'); i > 0 {
		return name[:i]
	}
	return namePrefix(name)
}

// roceTypeV2 is how the kernel names a RoCE v2 GID (ib_cache_gid_type_str); RoCE v1 and
// IB GIDs read "IB/RoCE v1".
const roceTypeV2 = "RoCE v2"

// rocePort is an ACTIVE RoCE port NVSHMEM would use.
type rocePort struct {
	dev  string
	port int
}

func (r *Node) rocePorts() []rocePort {
	var out []rocePort
	for _, d := range r.considered() {
		for _, p := range d.Ports {
			if p.LinkLayer == "Ethernet" && p.active() {
				out = append(out, rocePort{d.Name, p.Num})
			}
		}
	}
	return out
}

// gidFacts are what NVSHMEM's GID choice on RoCE depends on (ib_get_gid_index in
// src/modules/transport/common/transport_ib_common.h): the type of the GID at
// NVSHMEM_IB_GID_INDEX, when set, on every ACTIVE RoCE port in use; and whether each has
// a RoCE v2 GID with an IPv4-mapped address, which NVSHMEM picks when it is unset.
func (r *Node) gidFacts(f map[string]string) {
	ports := r.rocePorts()
	if len(ports) == 0 {
		return
	}
	if idx := r.cfg.GIDIndex; idx >= 0 {
		typ := roceTypeV2
		for _, p := range ports {
			t, g, err := r.readGID(p.dev, p.port, idx)
			if err != nil || zeroGID(g) {
				t = "absent" // the kernel refuses to read an empty entry's type
			}
			if t != roceTypeV2 {
				typ = t
				break
			}
		}
		f["ib.gid-type"] = typ
	}
	f["ib.roce-v2-ipv4-gid"] = "yes"
	for _, p := range ports {
		if _, ok := r.roceV2IPv4GID(p.dev, p.port); !ok {
			f["ib.roce-v2-ipv4-gid"] = "no"
			break
		}
	}
}

// ipv4Mapped is how sysfs prints (%pI6) the first 96 bits of an IPv4-mapped GID
// (::ffff:a.b.c.d), the address family NVSHMEM's auto-select looks for (AF_INET).
const ipv4Mapped = "0000:0000:0000:0000:0000:ffff:"

// roceV2IPv4GID finds the lowest index of a port's GID table that holds a RoCE v2 GID
// with an IPv4-mapped address. The addresses are read first; a type only where the
// address fits, so that an empty table costs one read an entry.
func (r *Node) roceV2IPv4GID(dev string, port int) (int, bool) {
	base := fmt.Sprintf("%s/%s/ports/%d", ibClassDir, dev, port)
	names, err := r.sys.Names(base + "/gids")
	if err != nil {
		return 0, false
	}
	var idx []int
	for _, n := range names {
		if i, err := strconv.Atoi(n); err == nil {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	for _, i := range idx {
		g, err := r.sys.ReadString(fmt.Sprintf("%s/gids/%d", base, i))
		if err != nil || !strings.HasPrefix(g, ipv4Mapped) {
			continue
		}
		if t, err := r.sys.ReadString(fmt.Sprintf("%s/gid_attrs/types/%d", base, i)); err == nil && t == roceTypeV2 {
			return i, true
		}
	}
	return 0, false
}

func (r *Node) readGID(dev string, port, idx int) (typ, gid string, err error) {
	base := fmt.Sprintf("%s/%s/ports/%d", ibClassDir, dev, port)
	if typ, err = r.sys.ReadString(fmt.Sprintf("%s/gid_attrs/types/%d", base, idx)); err != nil {
		return "", "", err // the kernel answers EINVAL for an empty table entry
	}
	if gid, err = r.sys.ReadString(fmt.Sprintf("%s/gids/%d", base, idx)); err != nil {
		return "", "", err
	}
	return typ, gid, nil
}

// zeroGID reports whether a GID as sysfs prints it ("%pI6": 8 groups of 4 hex digits) is all zero.
func zeroGID(g string) bool {
	return strings.Trim(g, "0:") == ""
}
