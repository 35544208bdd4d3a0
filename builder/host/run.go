package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
)

// Node is the host being checked: the sysroot it is read through, what the recipe asks
// of it, and what several checks share (the GPUs and RDMA devices, found once, and the
// GPU↔NIC pairing once computed).
type Node struct {
	sys Sysroot
	cfg Config

	gpus     []pciDevice
	gpuErr   error
	devs     []ibDevice // every device under /sys/class/infiniband
	devErr   error
	selected []ibDevice // those NVSHMEM would use under cfg (driver and prefix)
	pairs    []Pair
}

// NewNode reads the GPUs and RDMA devices of sys. cfg must be valid (Config.Validate).
func NewNode(sys Sysroot, cfg Config) *Node {
	r := &Node{sys: sys, cfg: cfg}
	r.gpus, r.gpuErr = findGPUs(sys)
	r.devs, r.devErr = findIBDevices(sys)
	r.selected = r.selectDevices()
	return r
}

// Config is what the recipe asks of the node.
func (r *Node) Config() Config { return r.cfg }

// Sysroot is where the node is read.
func (r *Node) Sysroot() Sysroot { return r.sys }

// Pairs is the GPU↔NIC pairing, once the pairing check has run.
func (r *Node) Pairs() []Pair { return r.pairs }

// Kinds are the host checks, in the order they run. Each reads the node through its
// sysroot and yields one result; adding a host check is an entry here and its method.
func Kinds() []check.Kind[*Node] {
	// rules names the compatibility rule cases a check judges too: where both would
	// report, the builder keeps this check's verdict (see builder.CheckHost).
	one := func(name, rules, explain string, f func(*Node) check.Result) check.Kind[*Node] {
		return check.Kind[*Node]{Name: name, Targets: []check.Target{check.Host}, Explain: explain,
			Run: func(_ context.Context, n *Node) []check.Result {
				r := f(n)
				r.Rule = rules
				return []check.Result{r}
			}}
	}
	return []check.Kind[*Node]{
		one("host.gpus", "", "NVIDIA GPUs in the PCIe tree", (*Node).checkGPUs),
		one("host.peermem", "R16/peer-memory R17/nvidia-peermem-only", "GPUDirect RDMA peer memory: nvidia_peermem, or memory_peers for NVSHMEM 3.2.5 (R16, R17)", (*Node).checkPeerMem),
		one("host.regkey.peer-mapping-override", "R16/peer-mapping-override", "PeerMappingOverride=1 in the NVIDIA driver's registry, for IBGDA with the GPU NIC handler (R16)", (*Node).checkPeerMappingOverride),
		one("host.regkey.stream-memops", "R16/stream-memops", "EnableStreamMemOPs=1 in the NVIDIA driver's registry (R16)", (*Node).checkStreamMemOps),
		one("host.ib.devices", "R14/host-names R14/ibgda-mlx5-only", "RDMA devices with the driver and name prefix NVSHMEM selects (R14)", (*Node).checkIBDevices),
		one("host.ib.port-state", "", "the selected devices' ports are ACTIVE", (*Node).checkPortState),
		one("host.ib.link-layer", "", "one link layer (InfiniBand or RoCE) across the selected ports", (*Node).checkLinkLayer),
		one("host.roce.gid-type", "", "NVSHMEM_IB_GID_INDEX names a RoCE v2 GID with an address", (*Node).checkGIDType),
		one("host.pcie.gpu-nic-pairing", "", "each GPU's nearest NIC in the PCIe tree, and DEEP_EP_DEVICE_TO_HCA_MAPPING against it", (*Node).checkPairing),
		one("host.gdrdrv", "R8/gdrdrv", "the gdrdrv device for GDRCopy builds (R8)", (*Node).checkGDRDrv),
		one("host.memlock", "", "the locked-memory limit RDMA registration needs", (*Node).checkMemlock),
		one("host.nccl.version", "R18/epv2-nccl", "the NCCL a job loads against the one DeepEP was built with (R18)", (*Node).checkNCCL),
	}
}

// Run makes every host check against sys under cfg. It never stops early: a check that
// cannot read what it needs says so in its own result.
func Run(ctx context.Context, sys Sysroot, cfg Config) Report {
	if err := cfg.Validate(); err != nil {
		return Report{Checks: []check.Result{ConfigError(err)}}
	}
	reg, err := check.NewRegistry(Kinds()...)
	if err != nil {
		panic(err) // the kinds above are fixed: a bad one is a bug caught by any test
	}
	n := NewNode(sys, cfg)
	return Report{Checks: reg.Run(ctx, check.Host, n, nil), Pairs: n.Pairs()}
}

// ConfigError is the result for a configuration the checks cannot interpret.
func ConfigError(err error) check.Result {
	return check.Result{ID: "host.config", Status: check.Fail, Read: err.Error(),
		Why: "the checks depend on the recipe's runtime settings", Fix: "correct the recipe's runtime environment"}
}

func skip(c check.Result, read string) check.Result {
	c.Status, c.Read = check.Skip, read
	return c
}

func fail(c check.Result, read, fix string) check.Result {
	c.Status, c.Read, c.Fix = check.Fail, read, fix
	return c
}

func warn(c check.Result, read, fix string) check.Result {
	c.Status, c.Read, c.Fix = check.Warn, read, fix
	return c
}

func pass(c check.Result, read string) check.Result {
	c.Status, c.Read = check.Pass, read
	return c
}

// wantDriver is the kernel driver of the NICs the transport uses ("" = any but efa).
func (r *Node) wantDriver() string {
	switch r.cfg.Transport {
	case TransportEFA:
		return "efa"
	case TransportIBGDA:
		return "mlx5_core" // IBGDA is mlx5-only (R14)
	}
	return ""
}

func (r *Node) driverFits(d ibDevice) bool {
	if w := r.wantDriver(); w != "" {
		return d.Driver == w
	}
	return d.Driver != "efa"
}

func (r *Node) selectDevices() []ibDevice {
	if !r.cfg.rdma() {
		return nil
	}
	var out []ibDevice
	for _, d := range r.devs {
		if r.driverFits(d) && strings.HasPrefix(d.Name, r.cfg.hcaPrefix()) {
			out = append(out, d)
		}
	}
	return out
}

func (r *Node) checkGPUs() check.Result {
	c := check.Result{ID: "host.gpus", Why: "DeepEP needs NVIDIA GPUs (vendor 0x10de, class 0x0300/0x0302 in " + pciDevicesDir + ")"}
	if r.gpuErr != nil {
		return fail(c, r.gpuErr.Error(), "run on a GPU node, or pass --sysroot with a capture")
	}
	if len(r.gpus) == 0 {
		return fail(c, pciDevicesDir+": no NVIDIA GPU", "run on a GPU node; check that the GPUs are passed through (lspci -d 10de:)")
	}
	addrs := make([]string, len(r.gpus))
	for i, g := range r.gpus {
		addrs[i] = g.Addr
	}
	return pass(c, fmt.Sprintf("%d GPUs: %s", len(r.gpus), strings.Join(addrs, ",")))
}

// Peer memory: the nvidia_peermem module (driver ≥ 470) or the older MLNX_OFED nv_peer_mem,
// which registers under /sys/kernel/mm/memory_peers.
const (
	peermemModule = "/sys/module/nvidia_peermem"
	memoryPeers   = "/sys/kernel/mm/memory_peers"
)

func (r *Node) checkPeerMem() check.Result {
	c := check.Result{ID: "host.peermem", Why: "GPUDirect RDMA needs the NIC to reach GPU memory: nvidia_peermem (or dmabuf); " +
		"NVSHMEM ≤ 3.2.5 detects it only through " + memoryPeers + "/nv_mem*/version (R17)"}
	module, modErr := r.sys.exists(peermemModule)
	var peers []string
	if names, err := r.sys.Names(memoryPeers); err == nil {
		for _, n := range names {
			if !strings.HasPrefix(n, "nv_mem") {
				continue
			}
			v, err := r.sys.ReadString(memoryPeers + "/" + n + "/version")
			if err == nil {
				peers = append(peers, fmt.Sprintf("%s/%s/version: %s", memoryPeers, n, v))
			}
		}
	}
	var read []string
	if module {
		read = append(read, peermemModule+": present")
	} else if modErr != nil {
		read = append(read, modErr.Error())
	} else {
		read = append(read, peermemModule+": absent")
	}
	if len(peers) > 0 {
		read = append(read, peers...)
	} else {
		read = append(read, memoryPeers+"/nv_mem*/version: absent")
	}
	c.Read = strings.Join(read, "; ")
	if !r.cfg.NeedPeerMem {
		return skip(c, c.Read)
	}
	if !module && len(peers) == 0 {
		return fail(c, c.Read, "modprobe nvidia_peermem (and list it in /etc/modules-load.d/ so it survives a reboot)")
	}
	if len(peers) == 0 && r.cfg.NVSHMEMVersion != "" {
		if cmp, ok := compareVersions(r.cfg.NVSHMEMVersion, "3.2.5"); ok && cmp <= 0 {
			return fail(c, c.Read, "NVSHMEM "+r.cfg.NVSHMEMVersion+" will not see nvidia_peermem: add DeepEP c6051f3's hunk "+
				"to its patch set (the Infrawaves patch lacks it), or use nv_peer_mem, which registers "+memoryPeers)
		}
	}
	c.Status = check.Pass
	return c
}

// nvidiaParams reads /proc/driver/nvidia/params: the driver prints "Name: %u" for each
// module parameter and RegistryDwords: "k=v;..." for the regkeys (nv-procfs.c). The
// /sys/module/nvidia/parameters copy of RegistryDwords reads empty even when set.
const nvidiaParamsPath = "/proc/driver/nvidia/params"

type nvParams struct {
	values map[string]string // "EnableStreamMemOPs" → "1"
	dwords map[string]string // from RegistryDwords: "PeerMappingOverride" → "1"
	rawDW  string
}

func (r *Node) readNVParams() (nvParams, error) {
	b, err := r.sys.ReadFile(nvidiaParamsPath)
	if err != nil {
		return nvParams{}, err
	}
	p := nvParams{values: map[string]string{}, dwords: map[string]string{}}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		p.values[k] = v
		if k == "RegistryDwords" {
			p.rawDW = strings.Trim(v, `"`)
			for _, kv := range strings.Split(p.rawDW, ";") {
				if dk, dv, ok := strings.Cut(kv, "="); ok {
					p.dwords[strings.TrimSpace(dk)] = strings.TrimSpace(dv)
				}
			}
		}
	}
	return p, nil
}

// isOne reads a regkey value as the driver would (decimal or 0x hex) and says if it is 1.
func isOne(v string) bool {
	n, err := strconv.ParseUint(v, 0, 32)
	return err == nil && n == 1
}

const rebootNote = ", then update-initramfs -u (dracut -f) and reboot: the driver reads it only when it loads"

func (r *Node) checkPeerMappingOverride() check.Result {
	c := check.Result{ID: "host.regkey.peer-mapping-override", Why: "IBGDA with the GPU NIC handler needs " +
		"PeerMappingOverride=1 so the GPU can map the NIC's doorbells (R16)"}
	p, err := r.readNVParams()
	if err != nil {
		read := nvidiaParamsPath + ": absent (NVIDIA driver not loaded)"
		if !errors.Is(err, fs.ErrNotExist) {
			read = err.Error()
		}
		if !r.cfg.NeedPeerMappingOverride {
			return skip(c, read)
		}
		return fail(c, read, "load the NVIDIA driver")
	}
	v, ok := p.dwords["PeerMappingOverride"]
	if !ok {
		// Not how the driver prints it, but harmless to accept should a driver add the line.
		v, ok = p.values["PeerMappingOverride"]
	}
	read := fmt.Sprintf(`%s: RegistryDwords: "%s"`, nvidiaParamsPath, p.rawDW)
	switch {
	case !r.cfg.NeedPeerMappingOverride:
		return skip(c, read)
	case ok && isOne(v):
		return pass(c, read)
	}
	dw := "PeerMappingOverride=1;"
	if rest := withoutKey(p.rawDW, "PeerMappingOverride"); rest != "" {
		dw = rest + ";" + dw
	}
	return fail(c, read, `add options nvidia NVreg_RegistryDwords="`+dw+`" to /etc/modprobe.d/nvidia.conf`+rebootNote)
}

// withoutKey drops one key from a RegistryDwords string, keeping the others for the fix.
func withoutKey(dwords, key string) string {
	var keep []string
	for _, kv := range strings.Split(dwords, ";") {
		k, _, _ := strings.Cut(kv, "=")
		if strings.TrimSpace(kv) != "" && strings.TrimSpace(k) != key {
			keep = append(keep, strings.TrimSpace(kv))
		}
	}
	return strings.Join(keep, ";")
}

func (r *Node) checkStreamMemOps() check.Result {
	c := check.Result{ID: "host.regkey.stream-memops", Why: "IBGDA with the GPU NIC handler also wants " +
		"EnableStreamMemOPs=1 (R16; NVSHMEM ≥ 3.4.5 needs it only for the GPU handler)"}
	p, err := r.readNVParams()
	if err != nil {
		read := nvidiaParamsPath + ": absent (NVIDIA driver not loaded)"
		if !r.cfg.NeedPeerMappingOverride {
			return skip(c, read)
		}
		return fail(c, read, "load the NVIDIA driver")
	}
	v, ok := p.values["EnableStreamMemOPs"]
	read := fmt.Sprintf("%s: EnableStreamMemOPs: %s", nvidiaParamsPath, v)
	if !ok {
		read = nvidiaParamsPath + ": no EnableStreamMemOPs line"
	}
	switch {
	case !r.cfg.NeedPeerMappingOverride:
		return skip(c, read)
	case ok && isOne(v):
		return pass(c, read)
	}
	return fail(c, read, "add options nvidia NVreg_EnableStreamMemOPs=1 to /etc/modprobe.d/nvidia.conf"+rebootNote)
}

func (r *Node) checkIBDevices() check.Result {
	c := check.Result{ID: "host.ib.devices", Why: "NVSHMEM opens the RDMA devices under " + ibClassDir +
		" whose names start with NVSHMEM_HCA_PREFIX; IBGDA needs mlx5 (R14), EFA needs the efa driver"}
	if !r.cfg.rdma() {
		return skip(c, "transport none: no NIC is used")
	}
	if r.devErr != nil {
		return fail(c, r.devErr.Error(), "")
	}
	byDriver := map[string][]string{}
	for _, d := range r.devs {
		drv := d.Driver
		if drv == "" {
			drv = "no driver"
		}
		byDriver[drv] = append(byDriver[drv], d.Name)
	}
	var parts []string
	for drv, names := range byDriver {
		parts = append(parts, fmt.Sprintf("%s (%s)", strings.Join(names, ","), drv))
	}
	sort.Strings(parts)
	read := ibClassDir + ": " + strings.Join(parts, "; ")
	if len(r.devs) == 0 {
		read = ibClassDir + ": no devices"
	}
	if len(r.selected) > 0 {
		return pass(c, read)
	}
	var fits []ibDevice
	for _, d := range r.devs {
		if r.driverFits(d) {
			fits = append(fits, d)
		}
	}
	switch {
	case len(fits) > 0:
		pre := namePrefix(fits[0].Name)
		return fail(c, read+fmt.Sprintf("; none named %s*", r.cfg.hcaPrefix()),
			fmt.Sprintf("set NVSHMEM_HCA_PREFIX=%s (NVSHMEM ≥ 3.4.5), or rename the devices to mlx5_* (DOCA-OFED) (R14)", pre))
	case r.cfg.Transport == TransportEFA:
		return fail(c, read, "install and load the EFA driver (aws-efa-installer), on an EFA-enabled instance")
	}
	return fail(c, read, "load mlx5_ib (rdma-core or DOCA-OFED) and check the NICs with ibv_devinfo")
}

// namePrefix is the leading letters of a device name ("rocep145s0" → "rocep").
func namePrefix(name string) string {
	i := 0
	for i < len(name) && (name[i] >= 'a' && name[i] <= 'z' || name[i] >= 'A' && name[i] <= 'Z') {
		i++
	}
	return name[:i]
}

func (r *Node) checkPortState() check.Result {
	c := check.Result{ID: "host.ib.port-state", Why: "a port that is not ACTIVE carries no traffic; NVSHMEM fails or falls back"}
	if len(r.selected) == 0 {
		return skip(c, "no usable RDMA device")
	}
	var bad, down, ok []string
	for _, d := range r.selected {
		active := false
		for _, p := range d.Ports {
			desc := fmt.Sprintf("%s port %d: %s", d.Name, p.Num, p.State)
			if p.Err != nil {
				desc = fmt.Sprintf("%s port %d: %v", d.Name, p.Num, p.Err)
			}
			if p.active() {
				active = true
				ok = append(ok, d.Name)
			} else {
				down = append(down, desc)
			}
		}
		if !active {
			bad = append(bad, d.Name)
		}
	}
	switch {
	case len(bad) > 0:
		return fail(c, strings.Join(down, "; "), "bring the link up (cable, switch port, `ip link set <netdev> up`); check with ibv_devinfo: "+strings.Join(bad, ","))
	case len(down) > 0:
		return warn(c, strings.Join(down, "; "), "ports not ACTIVE are unused; if the recipe uses both ports, bring them up")
	}
	return pass(c, fmt.Sprintf("%d ports ACTIVE on %d devices", len(ok), len(r.selected)))
}

func (r *Node) checkLinkLayer() check.Result {
	c := check.Result{ID: "host.ib.link-layer", Why: "RoCE (Ethernet) needs a RoCE v2 GID index; InfiniBand does not; " +
		"mixed link layers across the NICs of one job do not interoperate"}
	if len(r.selected) == 0 {
		return skip(c, "no usable RDMA device")
	}
	layers := map[string][]string{}
	var errs []string
	for _, d := range r.selected {
		for _, p := range d.Ports {
			if p.LinkLayer == "" {
				errs = append(errs, fmt.Sprintf("%s port %d: link_layer unreadable", d.Name, p.Num))
				continue
			}
			layers[p.LinkLayer] = append(layers[p.LinkLayer], fmt.Sprintf("%s:%d", d.Name, p.Num))
		}
	}
	var parts []string
	for l, ps := range layers {
		if len(layers) == 1 {
			parts = append(parts, fmt.Sprintf("%s on %d ports", l, len(ps)))
		} else {
			parts = append(parts, fmt.Sprintf("%s on %d ports (%s)", l, len(ps), strings.Join(ps, ",")))
		}
	}
	sort.Strings(parts)
	read := strings.Join(append(parts, errs...), "; ")
	if len(errs) > 0 {
		return fail(c, read, "")
	}
	if r.cfg.Transport == TransportEFA {
		return pass(c, read) // EFA reports no IB/Ethernet link layer; nothing to compare
	}
	for l := range layers {
		if l != "Ethernet" && l != "InfiniBand" {
			return fail(c, read, "IBGDA/IBRC need InfiniBand or RoCE (Ethernet) ports")
		}
	}
	if len(layers) > 1 {
		return warn(c, read, "restrict NVSHMEM_HCA_LIST / NVSHMEM_HCA_PREFIX to NICs of one link layer")
	}
	return pass(c, read)
}

// roceTypeV2 is how the kernel names a RoCE v2 GID (ib_cache_gid_type_str); RoCE v1 and
// IB GIDs read "IB/RoCE v1".
const roceTypeV2 = "RoCE v2"

func (r *Node) checkGIDType() check.Result {
	c := check.Result{ID: "host.roce.gid-type", Why: fmt.Sprintf("on RoCE, NVSHMEM_IB_GID_INDEX=%d must name a RoCE v2 GID "+
		"with an address (an IPv4-mapped one on GCP); a v1 or empty GID fails in ibv_create_ah or is not routed", r.cfg.GIDIndex)}
	if r.cfg.Transport != TransportIBGDA && r.cfg.Transport != TransportIBRC {
		return skip(c, "not a RoCE transport")
	}
	idx := r.cfg.GIDIndex
	var bad, good []string
	suggest := map[int]int{}
	roce := 0
	for _, d := range r.selected {
		for _, p := range d.Ports {
			if p.LinkLayer != "Ethernet" {
				continue
			}
			roce++
			typ, gid, err := r.readGID(d.Name, p.Num, idx)
			switch {
			case err != nil:
				bad = append(bad, fmt.Sprintf("%s port %d GID %d: %v", d.Name, p.Num, idx, err))
			case typ != roceTypeV2 || zeroGID(gid):
				bad = append(bad, fmt.Sprintf("%s port %d GID %d: %s %s", d.Name, p.Num, idx, typ, gid))
				if i := r.suggestGID(d.Name, p.Num); i >= 0 {
					suggest[i]++
				}
			default:
				good = append(good, fmt.Sprintf("%s:%d %s", d.Name, p.Num, gid))
			}
		}
	}
	if roce == 0 {
		return skip(c, "no RoCE (Ethernet) port")
	}
	if len(bad) > 0 {
		fix := "choose a RoCE v2 index with an address (show_gids) and set NVSHMEM_IB_GID_INDEX to it"
		best, n := -1, 0
		for i, k := range suggest {
			if k > n || (k == n && i < best) {
				best, n = i, k
			}
		}
		if best >= 0 {
			fix = fmt.Sprintf("set NVSHMEM_IB_GID_INDEX=%d (RoCE v2 with an address on %d of the failing ports)", best, n)
		}
		return fail(c, strings.Join(bad, "; "), fix)
	}
	return pass(c, fmt.Sprintf("gid_attrs/types/%d: %s with an address on %d ports (%s)", idx, roceTypeV2, len(good), good[0]))
}

// suggestGID finds a usable index among the first 16 (the whole table is 256 reads a port,
// so this runs only on failure): RoCE v2 with a routable address (IPv4-mapped or global)
// first, a link-local RoCE v2 GID (fe80:…) only as a last resort. -1 when none.
func (r *Node) suggestGID(dev string, port int) int {
	linkLocal := -1
	for i := 0; i < 16; i++ {
		t, g, err := r.readGID(dev, port, i)
		if err != nil || t != roceTypeV2 || zeroGID(g) {
			continue
		}
		if !strings.HasPrefix(g, "fe80:") {
			return i
		}
		if linkLocal < 0 {
			linkLocal = i
		}
	}
	return linkLocal
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

const gdrdrvPath = "/dev/gdrdrv"

func (r *Node) checkGDRDrv() check.Result {
	c := check.Result{ID: "host.gdrdrv", Why: "GDRCopy builds (NVSHMEM_USE_GDRCOPY=1) need the gdrdrv device; " +
		"the libfabric efa provider refuses to start without it (R8)"}
	fi, err := r.sys.Stat(gdrdrvPath)
	read := gdrdrvPath + ": absent"
	switch {
	case err == nil && fi.Mode()&fs.ModeCharDevice != 0:
		read = gdrdrvPath + ": character device"
	case err == nil:
		read = gdrdrvPath + ": present"
	case !errors.Is(err, fs.ErrNotExist):
		read = err.Error()
	}
	if !r.cfg.NeedGDRCopy {
		return skip(c, read)
	}
	if err != nil {
		return fail(c, read, "install GDRCopy's gdrdrv kernel module and load it (modprobe gdrdrv, or gdrcopy's insmod.sh)")
	}
	return pass(c, read)
}

// limitsPath is this process's limits: the closest the tool can get to the job's own.
const limitsPath = "/proc/self/limits"

func (r *Node) checkMemlock() check.Result {
	c := check.Result{ID: "host.memlock", Why: "RDMA registers (pins) memory; a low RLIMIT_MEMLOCK makes ibv_reg_mr fail. " +
		"This reads the limit of this process: the job's launcher may set another"}
	b, err := r.sys.ReadFile(limitsPath)
	if err != nil {
		return warn(c, err.Error(), "")
	}
	soft, ok := "", false
	for _, line := range strings.Split(string(b), "\n") {
		if rest, found := strings.CutPrefix(line, "Max locked memory"); found {
			if f := strings.Fields(rest); len(f) >= 2 {
				soft, ok = f[0], true
			}
		}
	}
	if !ok {
		return warn(c, limitsPath+`: no "Max locked memory" line`, "")
	}
	read := fmt.Sprintf("%s: Max locked memory (soft) %s", limitsPath, soft)
	need := "unlimited"
	if r.cfg.MinMemlockBytes > 0 {
		need = fmt.Sprintf("≥ %d bytes", r.cfg.MinMemlockBytes)
	}
	fix := "raise it to " + need + ": ulimit -l unlimited in the job, memlock unlimited in /etc/security/limits.conf, " +
		"--ulimit memlock=-1 for containers, and Slurm's PropagateResourceLimits"
	if soft == "unlimited" {
		return pass(c, read)
	}
	var n uint64
	if _, err := fmt.Sscan(soft, &n); err != nil {
		return warn(c, read, "")
	}
	switch {
	case !r.cfg.rdma() && r.cfg.MinMemlockBytes == 0:
		return skip(c, read)
	case r.cfg.MinMemlockBytes > 0 && n >= r.cfg.MinMemlockBytes:
		return pass(c, read)
	}
	return fail(c, read, fix)
}

func (r *Node) checkNCCL() check.Result {
	c := check.Result{ID: "host.nccl.version", Why: "an NCCL older than the one DeepEP was built against misses symbols " +
		"or behaves differently; EPv2 needs the very same NCCL (R18)"}
	b, rt := r.cfg.NCCLBuildVersion, r.cfg.NCCLRuntimeVersion
	if b == "" || rt == "" {
		return skip(c, "NCCL build or runtime version not given")
	}
	read := fmt.Sprintf("NCCL runtime %s, built against %s", rt, b)
	cmp, ok := compareVersions(rt, b)
	switch {
	case !ok:
		return warn(c, read+" (not comparable)", "")
	case cmp < 0:
		return fail(c, read, "install NCCL ≥ "+b+" (or put it first on LD_LIBRARY_PATH)")
	case cmp > 0 && r.cfg.NCCLSameVersion:
		return fail(c, read, "run with NCCL "+b+", the one the build used")
	}
	return pass(c, read)
}
