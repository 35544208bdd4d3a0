package host

import (
	"fmt"
	"sort"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
)

// pairGPUs finds, for each GPU, the NICs nearest to it in the PCIe tree (deepest common
// ancestor in the /sys/devices path, NUMA node as the tie-break), and chooses one per GPU,
// distinct where the nearest sets allow (greedy in CUDA order). shared lists the GPUs
// that had to take a NIC another GPU already has.
func pairGPUs(gpus []pciDevice, nics []ibDevice) (pairs []Pair, depths []int, shared []string) {
	used := map[string]int{} // NIC → first GPU that took it
	for i, g := range gpus {
		best, bestNUMA := -1, false
		var nearest []ibDevice
		via := ""
		for _, n := range nics {
			if n.PCI.Path == "" {
				continue
			}
			d, v := treeDepth(g.Path, n.PCI.Path)
			sameNUMA := g.NUMA >= 0 && g.NUMA == n.PCI.NUMA
			switch {
			case d > best || (d == best && sameNUMA && !bestNUMA):
				best, bestNUMA, via = d, sameNUMA, v
				nearest = []ibDevice{n}
			case d == best && sameNUMA == bestNUMA:
				nearest = append(nearest, n)
			}
		}
		sort.Slice(nearest, func(a, b int) bool { return natLess(nearest[a].Name, nearest[b].Name) })
		p := Pair{GPU: i, PCI: g.Addr, NUMA: g.NUMA, Via: via}
		if best == 0 {
			p.Via = ""
		}
		for _, n := range nearest {
			p.Nearest = append(p.Nearest, n.Name)
		}
		for _, n := range nearest {
			if _, taken := used[n.Name]; !taken {
				p.HCA, p.Port = n.Name, n.activePort()
				break
			}
		}
		if p.HCA == "" && len(nearest) > 0 {
			p.HCA, p.Port = nearest[0].Name, nearest[0].activePort()
			shared = append(shared, fmt.Sprintf("GPU %d shares %s with GPU %d", i, p.HCA, used[p.HCA]))
		}
		if _, taken := used[p.HCA]; !taken && p.HCA != "" {
			used[p.HCA] = i
		}
		pairs = append(pairs, p)
		depths = append(depths, max(best, 0))
	}
	return pairs, depths, shared
}

// checkPairing computes the pairing and compares it with the configured mapping.
func (r *Node) checkPairing() check.Result {
	c := check.Result{
		ID: "host.pcie.gpu-nic-pairing",
		Why: "each GPU should send through the NIC under its own PCIe switch; DeepEP " +
			"takes the pairing from DEEP_EP_DEVICE_TO_HCA_MAPPING (PR #466), and without it " +
			"every GPU used mlx5_0 (6.5 GB/s instead of 40+). CUDA device order is assumed " +
			"to be PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID, CUDA_VISIBLE_DEVICES unset)",
	}
	switch {
	case !r.cfg.rdma():
		return skip(c, "transport none: no NIC is used")
	case r.gpuErr != nil:
		return fail(c, r.gpuErr.Error(), "")
	case len(r.gpus) == 0:
		return skip(c, "no GPU found (see host.gpus)")
	case len(r.selected) == 0:
		return skip(c, "no usable RDMA device (see host.ib.devices)")
	}
	pairs, depths, shared := pairGPUs(r.gpus, r.selected)
	r.pairs = pairs
	var lines []string
	weak := 0
	for i, p := range pairs {
		rel := describeDepth(depths[i])
		if depths[i] < 2 {
			weak++
		}
		lines = append(lines, fmt.Sprintf("GPU %d %s → %s (%s%s)", p.GPU, p.PCI,
			strings.Join(p.Nearest, ","), rel, viaText(p.Via)))
	}
	if v := (Report{Pairs: pairs}).MappingValue(); v != "" {
		lines = append(lines, "implies DEEP_EP_DEVICE_TO_HCA_MAPPING="+v)
	}
	c.Read = strings.Join(lines, "\n")

	if r.cfg.Mapping != "" {
		if msgs := compareMapping(r.cfg.Mapping, pairs, r.selected); len(msgs) > 0 {
			c.Read = strings.Join(msgs, "\n") + "\n" + c.Read
			return fail(c, c.Read, "set DEEP_EP_DEVICE_TO_HCA_MAPPING="+
				(Report{Pairs: pairs}).MappingValue()+" (from the PCIe tree)")
		}
	}
	switch {
	case len(shared) > 0:
		c.Read = strings.Join(shared, "\n") + "\n" + c.Read
		return warn(c, c.Read, "fewer NICs than GPUs near each other: expect GPUs to share NIC bandwidth")
	case weak > 0:
		return warn(c, c.Read, fmt.Sprintf("%d GPU(s) have no NIC under the same PCIe switch: "+
			"GPUDirect RDMA crosses the host bridge; check the slot placement", weak))
	}
	c.Status = check.Pass
	return c
}

func viaText(via string) string {
	if via == "" {
		return ""
	}
	return " via " + via
}

// compareMapping checks the configured mapping against the pairing; each message names
// the GPU, the NIC the PCIe tree pairs it with, and what the mapping says.
func compareMapping(mapping string, pairs []Pair, nics []ibDevice) []string {
	entries, err := parseMapping(mapping)
	if err != nil {
		return []string{err.Error()}
	}
	known := map[string]ibDevice{}
	for _, n := range nics {
		known[n.Name] = n
	}
	var msgs []string
	byGPU := map[int]mappingEntry{}
	for _, e := range entries {
		byGPU[e.GPU] = e
		if e.GPU >= len(pairs) {
			msgs = append(msgs, fmt.Sprintf("the mapping names GPU %d but the node has %d GPUs", e.GPU, len(pairs)))
		}
	}
	for _, p := range pairs {
		e, ok := byGPU[p.GPU]
		if !ok {
			msgs = append(msgs, fmt.Sprintf("GPU %d has no entry in the mapping (NVSHMEM picks a NIC itself)", p.GPU))
			continue
		}
		nic, exists := known[e.HCA]
		switch {
		case !exists:
			msgs = append(msgs, fmt.Sprintf("GPU %d: the mapping says %s, which is not a usable RDMA device here", p.GPU, e.HCA))
		case !contains(p.Nearest, e.HCA):
			msgs = append(msgs, fmt.Sprintf("GPU %d is paired with %s but the mapping says %s", p.GPU, strings.Join(p.Nearest, ","), e.HCA))
		case e.Port != 0 && !hasActivePort(nic, e.Port):
			msgs = append(msgs, fmt.Sprintf("GPU %d: the mapping says %s port %d, which is not an ACTIVE port", p.GPU, e.HCA, e.Port))
		}
	}
	return msgs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func hasActivePort(d ibDevice, n int) bool {
	for _, p := range d.Ports {
		if p.Num == n && p.active() {
			return true
		}
	}
	return false
}
