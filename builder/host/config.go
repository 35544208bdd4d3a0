package host

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
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
	// GIDIndex is NVSHMEM_IB_GID_INDEX (NVSHMEM's default is 0); checked on RoCE ports.
	GIDIndex int `json:"gid_index"`
	// HCAPrefix is NVSHMEM_HCA_PREFIX; empty means "mlx5" for IBGDA (R14) and any name otherwise.
	HCAPrefix string `json:"hca_prefix,omitempty"`
	// Mapping is DEEP_EP_DEVICE_TO_HCA_MAPPING as configured ("0:mlx5_0:1,..."); may be empty.
	Mapping                 string `json:"mapping,omitempty"`
	NeedGDRCopy             bool   `json:"need_gdrcopy,omitempty"`
	NeedPeerMem             bool   `json:"need_peermem,omitempty"`
	NeedPeerMappingOverride bool   `json:"need_peer_mapping_override,omitempty"` // and EnableStreamMemOPs (R16)
	// NVSHMEMVersion is the NVSHMEM the install was built with; ≤ 3.2.5 sees peer memory
	// only through /sys/kernel/mm/memory_peers (R17).
	NVSHMEMVersion string `json:"nvshmem_version,omitempty"`
	// NCCLBuildVersion and NCCLRuntimeVersion ("2.21.5-1"); the check runs when both are set.
	NCCLBuildVersion   string `json:"nccl_build_version,omitempty"`
	NCCLRuntimeVersion string `json:"nccl_runtime_version,omitempty"`
	NCCLSameVersion    bool   `json:"nccl_same_version,omitempty"` // EPv2 needs the very same NCCL (R18)
	// MinMemlockBytes is the least soft RLIMIT_MEMLOCK accepted; 0 asks for "unlimited"
	// on RDMA transports, which is what NVSHMEM's registration of GPU memory expects.
	MinMemlockBytes uint64 `json:"min_memlock_bytes,omitempty"`
}

// Validate rejects a Config the checks cannot interpret.
func (c Config) Validate() error {
	switch c.Transport {
	case TransportIBGDA, TransportIBRC, TransportEFA, TransportNone:
	default:
		return fmt.Errorf("host config: transport %q: want ibgda, ibrc, efa or none", c.Transport)
	}
	if c.GIDIndex < 0 {
		return fmt.Errorf("host config: GID index %d is negative", c.GIDIndex)
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

// versionNumbers extracts the numbers of a vendor version ("2.21.5-1" → 2 21 5 1;
// "(2, 21, 5)" as torch prints it → 2 21 5).
func versionNumbers(s string) []int {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsDigit(r) }) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil
		}
		out = append(out, n)
	}
	return out
}

// compareVersions compares X.Y.Z numerically, then the package revision R of X.Y.Z-R only
// when both carry one (a runtime often reports X.Y.Z alone). ok is false when either
// side is not a version.
func compareVersions(a, b string) (cmp int, ok bool) {
	na, nb := versionNumbers(a), versionNumbers(b)
	if len(na) == 0 || len(nb) == 0 {
		return 0, false
	}
	for i := 0; i < 3; i++ {
		x, y := at(na, i), at(nb, i)
		if x != y {
			return sign(x - y), true
		}
	}
	if len(na) > 3 && len(nb) > 3 && na[3] != nb[3] {
		return sign(na[3] - nb[3]), true
	}
	return 0, true
}

func at(n []int, i int) int {
	if i < len(n) {
		return n[i]
	}
	return 0
}

func sign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
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
