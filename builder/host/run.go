package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// Node is the host being checked: the sysroot it is read through, what the recipe asks
// of it, and what several checks share (the GPUs and RDMA devices, found once, and the
// GPU↔NIC pairing once computed).
type Node struct {
	sys sysroot.Root
	cfg Config

	gpus     []pciDevice
	gpuErr   error
	devs     []ibDevice // every device under /sys/class/infiniband
	devErr   error
	selected []ibDevice // those NVSHMEM would use under cfg (driver and prefix)
	pairs    []Pair
}

// NewNode reads the GPUs and RDMA devices of sys. cfg must be valid (Config.Validate).
func NewNode(sys sysroot.Root, cfg Config) *Node {
	r := &Node{sys: sys, cfg: cfg}
	r.gpus, r.gpuErr = findGPUs(sys)
	r.devs, r.devErr = findIBDevices(sys)
	r.selected = r.selectDevices()
	return r
}

// Config is what the recipe asks of the node.
func (r *Node) Config() Config { return r.cfg }

// Sysroot is where the node is read.
func (r *Node) Sysroot() sysroot.Root { return r.sys }

// Pairs is the GPU↔NIC pairing, once the pairing check has run.
func (r *Node) Pairs() []Pair { return r.pairs }

// Kinds are the host checks, in the order they run. Each reads the node through its
// sysroot and yields one result; adding a host check is an entry here and its method.
func Kinds() []check.Kind[*Node] {
	// rules names the compatibility rule cases a check judges too: where both would
	// report, the builder keeps this check's verdict (see verify.CheckHost).
	one := func(name, rules, explain string, f func(*Node) check.Result) check.Kind[*Node] {
		return check.Kind[*Node]{Name: name, Targets: []check.Target{check.Host}, Explain: explain,
			Run: func(_ context.Context, n *Node) []check.Result {
				r := f(n)
				r.Rule = rules
				return []check.Result{r}
			}}
	}
	withCtx := func(name, explain string, f func(*Node, context.Context) check.Result) check.Kind[*Node] {
		return check.Kind[*Node]{Name: name, Targets: []check.Target{check.Host}, Explain: explain,
			Run: func(ctx context.Context, n *Node) []check.Result { return []check.Result{f(n, ctx)} }}
	}
	// Peer memory, the driver's regkeys and the RoCE GID are judged by the rules alone
	// (R16, R17, R31, R34), on the facts Facts reads.
	return []check.Kind[*Node]{
		one("host.gpus", "", "NVIDIA GPUs in the PCIe tree", (*Node).checkGPUs),
		one("host.ib.devices", "R14/host-names R14/ibgda-mlx5-only", "RDMA devices with the driver and name prefix NVSHMEM selects (R14)", (*Node).checkIBDevices),
		one("host.ib.port-state", "", "the selected devices' ports are ACTIVE", (*Node).checkPortState),
		one("host.ib.link-layer", "", "one link layer (InfiniBand or RoCE) across the selected ports", (*Node).checkLinkLayer),
		one("host.pcie.gpu-nic-pairing", "", "each GPU's nearest NIC in the PCIe tree, and DEEP_EP_DEVICE_TO_HCA_MAPPING against it", (*Node).checkPairing),
		one("host.gdrdrv", "R8/gdrdrv", "the gdrdrv device for GDRCopy builds (R8)", (*Node).checkGDRDrv),
		one("host.memlock", "", "the locked-memory limit RDMA registration needs", (*Node).checkMemlock),
		one("host.nccl.version", "R18/epv2-nccl", "the NCCL a job loads against the one DeepEP was built with (R18)", (*Node).checkNCCL),
		withCtx("host.gpu.free-memory", "each GPU's free memory (nvidia-smi) against the recipe's runtime.buffer-bytes, or the whole "+
			"symmetric heap NVSHMEM reserves with CUDA VMM off (R32)", (*Node).checkFreeMemory),
		one("host.jit.nvcc", "R29/nvcc-missing", "the nvcc (and CUDA headers) a component that compiles kernels at run time finds on the node, "+
			"where its JIT looks (the recipe's runtime.nvcc)", (*Node).checkJITNVCC),
		one("host.machine", "", "the node's machine (the NVIDIA driver's) against the one the install was built on", (*Node).checkMachine),
		one("host.gpus.per-node", "", "the GPUs a job sees on the node against the recipe's runtime.gpus-per-node", (*Node).checkGPUsPerNode),
		one("host.mnnvl.imex", "R30/no-channel R30/no-channel-silent", "an IMEX channel (/dev/nvidia-caps-imex-channels/channel<N>) for a recipe "+
			"that shares GPU memory across the nodes of an NVLink domain (runtime.mnnvl: GB200/GB300 NVL72)", (*Node).checkIMEXChannel),
		withCtx("host.mnnvl.fabric", "every GPU registered with the NVLink fabric, in one cluster (nvidia-smi -q, Fabric), for a recipe with runtime.mnnvl",
			(*Node).checkMNNVLFabric),
		one("host.hostnames", "", "the job's nodes (--hosts FILE, or the Slurm allocation) have distinct hostnames, this node's among them", (*Node).checkHostnames),
	}
}

// Run makes every host check against sys under cfg. It never stops early: a check that
// cannot read what it needs says so in its own result.
func Run(ctx context.Context, sys sysroot.Root, cfg Config) Report {
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

const gdrdrvPath = "/dev/gdrdrv"

func (r *Node) checkGDRDrv() check.Result {
	c := check.Result{ID: "host.gdrdrv", Why: "GDRCopy builds (NVSHMEM_USE_GDRCOPY=1) use the gdrdrv device; the libfabric " +
		"efa provider refuses to start without it (R8), the IB transports go on without GDRCopy (slower proxy atomics)"}
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
	fix := "install GDRCopy's gdrdrv kernel module and load it (modprobe gdrdrv, or gdrcopy's insmod.sh)"
	switch {
	case err == nil:
		return pass(c, read)
	case r.cfg.Transport == TransportEFA:
		return fail(c, read, fix)
	}
	return warn(c, read+" (NVSHMEM disables GDRCopy: \"GDRCopy open call failed\")", fix)
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
