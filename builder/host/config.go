package host

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// Transport is how NVSHMEM reaches other nodes, which decides the checks that apply.
type Transport string

// The transports a recipe can use.
const (
	TransportIBGDA Transport = "ibgda" // GPU-initiated RDMA on mlx5 (RoCE or IB)
	TransportIBRC  Transport = "ibrc"  // CPU-proxied RDMA on RoCE or IB
	TransportEFA   Transport = "efa"   // libfabric over AWS EFA
	TransportNone  Transport = "none"  // one node: NVLink only
)

// Config is what a recipe's runtime environment asks of the host.
type Config struct {
	Recipe    string    `json:"recipe,omitempty"`
	Transport Transport `json:"transport"`
	// GIDIndex is NVSHMEM_IB_GID_INDEX; -1 (NVSHMEM's default) lets NVSHMEM pick a RoCE v2
	// GID with an IPv4 address itself.
	GIDIndex int `json:"gid_index"`
	// HCAPrefix is NVSHMEM_HCA_PREFIX; empty means "mlx5" for IBGDA (R14) and any name otherwise.
	HCAPrefix string `json:"hca_prefix,omitempty"`
	// Mapping is DEEP_EP_DEVICE_TO_HCA_MAPPING as configured ("0:mlx5_0:1,..."); may be empty.
	Mapping     string `json:"mapping,omitempty"`
	NeedGDRCopy bool   `json:"need_gdrcopy,omitempty"`
	// NVSHMEMVersion is the NVSHMEM the install was built with.
	NVSHMEMVersion string `json:"nvshmem_version,omitempty"`
	// NCCLBuildVersion and NCCLRuntimeVersion ("2.21.5-1"); the check runs when both are set.
	NCCLBuildVersion   string `json:"nccl_build_version,omitempty"`
	NCCLRuntimeVersion string `json:"nccl_runtime_version,omitempty"`
	NCCLSameVersion    bool   `json:"nccl_same_version,omitempty"` // EPv2 needs the very same NCCL (R18)
	// MinMemlockBytes is the least soft RLIMIT_MEMLOCK accepted; 0 asks for "unlimited"
	// on RDMA transports, which is what NVSHMEM's registration of GPU memory expects.
	MinMemlockBytes uint64 `json:"min_memlock_bytes,omitempty"`
	// BufferBytes is the recipe's runtime.buffer-bytes: what DeepEP's buffer takes from
	// NVSHMEM's heap on each GPU (0: not declared).
	BufferBytes uint64 `json:"buffer_bytes,omitempty"`
	// FixedHeapBytes is the symmetric heap NVSHMEM reserves whole when it starts, with
	// CUDA VMM off (NVSHMEM_SYMMETRIC_SIZE, 1 GiB when unset); 0 when VMM is on and the
	// heap grows as DeepEP allocates.
	FixedHeapBytes uint64 `json:"fixed_heap_bytes,omitempty"`
	// NVCC is the recipe's runtime.nvcc: the component whose JIT compiles kernels on the
	// node, and where it looks for nvcc (nil: nothing is compiled at run time).
	NVCC *recipes.NVCC `json:"nvcc,omitempty"`
	// GPUsPerNode is the recipe's runtime.gpus-per-node (0: not declared); MNNVL its
	// runtime.mnnvl: the job shares GPU memory across the nodes of one NVLink domain.
	GPUsPerNode uint32 `json:"gpus_per_node,omitempty"`
	MNNVL       bool   `json:"mnnvl,omitempty"`
	// Machines are the build host machines (uname -m) the install's code is for: the
	// install's, from its manifest, else the recipe's toolchain.host-arch; none: unknown.
	Machines []string `json:"machines,omitempty"`
	// Hosts are the job's nodes (--hosts FILE, or the Slurm allocation), HostsFrom where
	// they were read; none: the hostname check is skipped.
	Hosts     []string `json:"-"`
	HostsFrom string   `json:"hosts_from,omitempty"`
	// Env is the runtime environment a job on this node gets (the recipe's, overridden
	// by the job's), for the facts that depend on it: the bootstrap interface, where
	// nvcc is found. Not part of the JSON: it holds the caller's whole environment.
	Env map[string]string `json:"-"`
}

// Validate rejects a Config the checks cannot interpret.
func (c Config) Validate() error {
	switch c.Transport {
	case TransportIBGDA, TransportIBRC, TransportEFA, TransportNone:
	default:
		return fmt.Errorf("host config: transport %q: want ibgda, ibrc, efa or none", c.Transport)
	}
	if c.GIDIndex < -1 {
		return fmt.Errorf("host config: GID index %d: want an index, or -1 for NVSHMEM's own choice", c.GIDIndex)
	}
	if c.Mapping != "" {
		if _, err := parseMapping(c.Mapping); err != nil {
			return fmt.Errorf("host config: %w", err)
		}
	}
	return nil
}

// rdma reports whether the transport uses RDMA NICs at all.
func (c Config) rdma() bool { return c.Transport != TransportNone }

// hcaPrefix is the name prefix NVSHMEM will select devices by.
func (c Config) hcaPrefix() string {
	if c.HCAPrefix == "" && c.Transport == TransportIBGDA {
		return "mlx5"
	}
	return c.HCAPrefix
}

// mappingEntry is one "<cuda dev>:<hca>[:port]" item of DEEP_EP_DEVICE_TO_HCA_MAPPING.
type mappingEntry struct {
	GPU  int
	HCA  string
	Port int // 0 when not given
}

func parseMapping(s string) ([]mappingEntry, error) {
	var out []mappingEntry
	seen := map[int]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		f := strings.Split(item, ":")
		if len(f) < 2 || len(f) > 3 || f[1] == "" {
			return nil, fmt.Errorf("mapping item %q: want <cuda dev>:<hca>[:port]", item)
		}
		gpu, err := strconv.Atoi(f[0])
		if err != nil || gpu < 0 {
			return nil, fmt.Errorf("mapping item %q: device %q is not a CUDA device index", item, f[0])
		}
		if seen[gpu] {
			return nil, fmt.Errorf("mapping item %q: device %d appears twice", item, gpu)
		}
		seen[gpu] = true
		e := mappingEntry{GPU: gpu, HCA: f[1]}
		if len(f) == 3 {
			if e.Port, err = strconv.Atoi(f[2]); err != nil || e.Port < 1 {
				return nil, fmt.Errorf("mapping item %q: port %q is not a port number", item, f[2])
			}
		}
		out = append(out, e)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("mapping %q has no items", s)
	}
	return out, nil
}

// compareVersions compares two vendor versions (compat.Version) by their X.Y.Z, then by
// package revision only when both carry one: a runtime often reports X.Y.Z alone
// ("2.21.5" is the release "2.21.5-1" was built from), and torch prints a tuple,
// "(2, 21, 5)". ok is false when either side is not a version.
func compareVersions(a, b string) (cmp int, ok bool) {
	va, err1 := compat.ParseVersion(tupleVersion(a))
	vb, err2 := compat.ParseVersion(tupleVersion(b))
	if err1 != nil || err2 != nil {
		return 0, false
	}
	ca, cb := compat.MustVersion(va.Core()), compat.MustVersion(vb.Core())
	if c := ca.Compare(cb); c != 0 {
		return c, true
	}
	if va.Revision() != 0 && vb.Revision() != 0 {
		return cmpUint(va.Revision(), vb.Revision()), true
	}
	return 0, true
}

// tupleVersion turns torch's "(2, 21, 5)" into "2.21.5"; anything else is kept.
func tupleVersion(s string) string {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "(") && strings.HasSuffix(s, ")") {
		return strings.Join(strings.Fields(strings.ReplaceAll(s[1:len(s)-1], ",", " ")), ".")
	}
	return s
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// natLess orders names with embedded numbers naturally: mlx5_2 before mlx5_10.
func natLess(a, b string) bool {
	for a != "" && b != "" {
		ca, cb := a[0], b[0]
		if isDigit(ca) && isDigit(cb) {
			da, ra := leadingDigits(a)
			db, rb := leadingDigits(b)
			ta, tb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if len(ta) != len(tb) {
				return len(ta) < len(tb)
			}
			if ta != tb {
				return ta < tb
			}
			a, b = ra, rb
			continue
		}
		if ca != cb {
			return ca < cb
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return s[:i], s[i:]
}
