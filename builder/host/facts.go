package host

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/recipes"
)

// Facts are what the compatibility rules may ask of a node (the host: conditions of
// compat/rules.yaml; compat/host-facts.yaml lists each key, its values and where it is
// read). Everything is read through the sysroot, programs included (nvidia-smi), so a
// capture holds the facts too. A fact that cannot be read is left out: the rules then say
// they could not decide. The process facts (nvshmem.host-libs-mapped,
// nvshmem.loaded-version, nvshmem.loaded-matches-build) come from the process checks,
// not from here.
func (r *Node) Facts(ctx context.Context) map[string]string {
	f := map[string]string{}
	if v, err := r.sys.ReadString("/proc/sys/kernel/osrelease"); err == nil {
		if core := leadingVersion(v); core != "" {
			f["kernel"] = core
		}
	}
	if v, ok := r.dpkgVersion("doca-ofed"); ok {
		f["doca-ofed"] = v
	}
	r.ibFacts(f)
	r.gidFacts(f)
	if _, err := r.sys.Stat(gdrdrvPath); err == nil {
		f["gdrdrv"] = "loaded"
	} else if errors.Is(err, fs.ErrNotExist) {
		f["gdrdrv"] = "absent"
	}
	r.peerMemoryFacts(f)
	if p, err := r.readNVParams(); err == nil {
		// PeerMappingOverride is a registry key, read from RegistryDwords only; the
		// driver's default when the line does not name it is 0
		f["regkey.PeerMappingOverride"] = "0"
		if v, ok := p.dwords["PeerMappingOverride"]; ok {
			f["regkey.PeerMappingOverride"] = regkeyValue(v)
		}
		// EnableStreamMemOPs is a module parameter: a line of its own
		if v, ok := p.values["EnableStreamMemOPs"]; ok {
			f["nvidia-param.EnableStreamMemOPs"] = regkeyValue(v)
		}
	}
	if v := r.bootstrapInterface(ctx); v != "" {
		f["net.bootstrap-ifname"] = v
	}
	if v := r.nvcc(); v != "" {
		f["cuda.nvcc"] = v
	}
	if v := r.nvccVersion(); v != "" {
		f["cuda.nvcc-version"] = v
	}
	if v := r.fabric(ctx); v != "" {
		f["gpu.fabric"] = v
	}
	if v := r.imexChannel(); v != "" {
		f["imex.channel"] = v
	}
	if v := r.container(); v != "" {
		f["container"] = v
	}
	if v := r.libmlx5Version(); v != "" {
		f["rdma.libmlx5-mlx5-1.25"] = v
	}
	for key, mod := range map[string]string{"efa.version": "efa", "gdrdrv.version": "gdrdrv"} {
		if v := r.moduleVersion(mod); v != "" {
			f[key] = v
		}
	}
	r.partitionFacts(f)
	return f
}

var versionPrefix = regexp.MustCompile(`^\d+\.\d+(\.\d+)?`)

// leadingVersion is the X.Y.Z a version string starts with ("6.14.0-1007-gcp" → 6.14.0).
func leadingVersion(s string) string { return versionPrefix.FindString(strings.TrimSpace(s)) }

// regkeyValue writes a registry value as the driver reads it (decimal or 0x hex) in
// decimal, so that a rule asking for "1" matches "0x1" too.
func regkeyValue(v string) string {
	if n, err := strconv.ParseUint(strings.TrimSpace(v), 0, 64); err == nil {
		return strconv.FormatUint(n, 10)
	}
	return strings.TrimSpace(v)
}

// dpkgStatus is the Debian package database: stanzas of "Field: value" lines separated by
// blank lines (dpkg-query(1), deb-control(5)).
const dpkgStatus = "/var/lib/dpkg/status"

// dpkgVersion is the X.Y.Z of an installed package's Version ("3.2.1-044000" → 3.2.1),
// "none" when the database lists no installed pkg; ok is false when there is no
// database to read (not a Debian system). The database holds every package
// (megabytes); a capture keeps only pkg's stanza.
func (r *Node) dpkgVersion(pkg string) (string, bool) {
	b, err := r.sys.ReadFileKeeping(dpkgStatus, func(b []byte) []byte { return dpkgStanza(b, pkg) })
	if err != nil {
		return "", false
	}
	if v := stanzaVersion(dpkgStanza(b, pkg)); v != "" {
		return v, true
	}
	return "none", true
}

// dpkgStanza is pkg's stanza of a dpkg status file, with its closing blank line, or nil.
func dpkgStanza(b []byte, pkg string) []byte {
	for _, st := range bytes.Split(b, []byte("\n\n")) {
		st = bytes.Trim(st, "\n")
		for _, line := range bytes.Split(st, []byte("\n")) {
			if k, v, ok := bytes.Cut(line, []byte(":")); ok && string(k) == "Package" && strings.TrimSpace(string(v)) == pkg {
				return append(st, '\n', '\n')
			}
		}
	}
	return nil
}

// stanzaVersion is the X.Y.Z of a stanza's Version when its Status says installed.
func stanzaVersion(b []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var version, status string
	for sc.Scan() {
		line := sc.Text()
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.HasPrefix(line, " ") {
			continue
		}
		switch k {
		case "Version":
			version = strings.TrimSpace(v)
		case "Status":
			status = strings.TrimSpace(v)
		}
	}
	if !strings.HasSuffix(status, " installed") {
		return ""
	}
	return leadingVersion(version)
}

// Where NVSHMEM looks for a peer-memory module (nvshmemt_ib_common_nv_peer_mem_available
// in src/modules/transport/common/transport_ib_common.cpp): the memory_peers entries of
// MLNX_OFED's peer-memory API (nv_peer_mem registers nv_mem; nvidia-peermem registers
// there on MLNX_OFED kernels), and, from NVSHMEM 3.3.9, the nvidia_peermem module itself.
var (
	memoryPeersVersions = []string{"/sys/kernel/mm/memory_peers/nv_mem/version", "/sys/kernel/mm/memory_peers/nvidia-peermem/version"}
	peermemModule       = "/sys/module/nvidia_peermem/version"
	nvidiaVersionPath   = "/proc/driver/nvidia/version"
)

// presence is "present" or "absent" for a path NVSHMEM tests with access(F_OK); "" when
// the answer could not be read.
func (r *Node) presence(paths ...string) string {
	unread := false
	for _, p := range paths {
		ok, err := r.sys.Exists(p)
		if ok {
			return "present"
		}
		if err != nil {
			unread = true
		}
	}
	if unread {
		return ""
	}
	return "absent"
}

// peerMemoryFacts are how the NIC can reach GPU memory: a peer-memory module where
// NVSHMEM looks for one, and dma-buf.
func (r *Node) peerMemoryFacts(f map[string]string) {
	if v := r.presence(memoryPeersVersions...); v != "" {
		f["peermem.memory-peers"] = v
	}
	if v := r.presence(peermemModule); v != "" {
		f["peermem.module"] = v
	}
	// CUDA reports CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED with the open kernel modules on
	// Linux 5.12 or later; the driver names its flavour on the first line of its version
	// file ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04 ...").
	b, err := r.sys.ReadFile(nvidiaVersionPath)
	kernel := f["kernel"]
	if err != nil || kernel == "" {
		return
	}
	first, _, _ := strings.Cut(string(b), "\n")
	f["dmabuf"] = "unsupported"
	if cmp, ok := compareVersions(kernel, "5.12"); ok && cmp >= 0 && strings.Contains(first, "Open Kernel Module") {
		f["dmabuf"] = "supported"
	}
}

// nvidiaParams reads /proc/driver/nvidia/params: the driver prints "Name: %u" for each
// module parameter and RegistryDwords: "k=v;..." for the regkeys (nv-procfs.c). The
// /sys/module/nvidia/parameters copy of RegistryDwords reads empty even when set.
const nvidiaParamsPath = "/proc/driver/nvidia/params"

type nvParams struct {
	values map[string]string // "EnableStreamMemOPs" → "1"
	dwords map[string]string // from RegistryDwords: "PeerMappingOverride" → "1"
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
			for _, kv := range strings.Split(strings.Trim(v, `"`), ";") {
				if dk, dv, ok := strings.Cut(kv, "="); ok {
					p.dwords[strings.TrimSpace(dk)] = strings.TrimSpace(dv)
				}
			}
		}
	}
	return p, nil
}

// nvcc says whether a job finds an executable nvcc where EPv2 looks for one at run time
// (recipes.DefaultNVCCLookup).
func (r *Node) nvcc() string {
	state, _ := r.nvccAt()
	return state
}

// nvccAt is nvcc's state (present, absent, "" when not known) and, when present, its path,
// where EPv2 looks.
func (r *Node) nvccAt() (string, string) {
	return FindNVCC(r.sys, r.cfg.Env, recipes.DefaultNVCCLookup())
}

// nvccVersion is the version of the nvcc EPv2's JIT runs on this node, from the
// toolkit's version.json beside it (<toolkit>/version.json, "cuda_nvcc": {"version":
// "13.0.88"}): "" when there is no nvcc or no such file.
func (r *Node) nvccVersion() string {
	state, p := r.nvccAt()
	if state != "present" {
		return ""
	}
	b, err := r.sys.ReadFile(path.Join(path.Dir(path.Dir(p)), "version.json"))
	if err != nil {
		return ""
	}
	var v struct {
		NVCC struct {
			Version string `json:"version"`
		} `json:"cuda_nvcc"`
	}
	if json.Unmarshal(b, &v) != nil {
		return ""
	}
	return leadingVersion(v.NVCC.Version)
}

// imexDir holds the IMEX channels the administrator created (or the NVIDIA container
// runtime passed in): channel0, channel1, ...
const imexDir = "/dev/nvidia-caps-imex-channels"

func (r *Node) imexChannel() string {
	_, state := r.imexChannels()
	return state
}

// containerCgroup is what cgroup v1 paths of a containerised PID 1 name.
var containerCgroup = regexp.MustCompile(`(?m)(docker|containerd|kubepods|libpod|lxc)`)

// container says whether the probe runs in a container: the files Docker and Podman put
// at the root, a Kubernetes service-account mount, or a container's cgroup path.
func (r *Node) container() string {
	if r.presence("/.dockerenv", "/run/.containerenv", "/var/run/secrets/kubernetes.io") == "present" {
		return "yes"
	}
	b, err := r.sys.ReadFile("/proc/1/cgroup")
	if err != nil {
		return "" // not readable: unknown, never "no"
	}
	if containerCgroup.Match(b) {
		return "yes"
	}
	return "no"
}
