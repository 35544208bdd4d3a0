package fleet

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/epbuild/epbuild/builder/acceptance"
	"github.com/epbuild/epbuild/builder/quote"
)

// DefaultSlowBelow is the fraction of the fleet's median bandwidth under which a node is
// slow: DeepEP's bandwidths vary a few percent between runs on one node; a node 10% under
// the others has a slower link, NIC or GPU.
const DefaultSlowBelow = 0.9

// BandwidthSpread is one bandwidth of one test across the nodes that passed it.
type BandwidthSpread struct {
	// Test is COMPONENT/NAME; Name is the recipe's pattern name.
	Test   string  `json:"test"`
	Name   string  `json:"name"`
	Median float64 `json:"median_gbps"`
	// Nodes are each node's value (the mean over the lines its run printed), slowest
	// first.
	Nodes []NodeBandwidth `json:"nodes"`
}

// NodeBandwidth is one node's value of a bandwidth; Slow when under SlowBelow × Median.
type NodeBandwidth struct {
	Node  string  `json:"node"`
	GBps  float64 `json:"gbps"`
	Ratio float64 `json:"ratio"`
	Slow  bool    `json:"slow,omitempty"`
}

// compareTests adds the nodes' test results to the report: a test that failed on a node
// is a difference of that node (and the node fails), and for each bandwidth read by the
// nodes that passed the test, a node under SlowBelow × the median is a difference.
func compareTests(rep *Report, nodes []Node, opt Options) {
	slow := opt.SlowBelow
	if slow <= 0 {
		slow = DefaultSlowBelow
	}
	type key struct{ test, name string }
	values := map[key][]NodeBandwidth{}
	var keys []key
	some := false
	for _, n := range nodes {
		if n.Problem != "" || n.TestsFile == "" {
			continue
		}
		some = true
		failed := false
		for _, r := range n.Tests {
			test := r.Component + "/" + r.Name
			switch r.Status {
			case acceptance.Pass:
			case acceptance.NotRun:
				continue
			default:
				failed = true
				rep.Differences = append(rep.Differences, Difference{Node: n.Name, What: "test " + test, Found: r.Status + ": " + r.Reason,
					Fix: fmt.Sprintf("run epbuild test PREFIX --only %s on %s and read the end of its output (its JSON's tail); a test that fails on one node "+
						"only points at that node's GPUs, NICs or driver", quote.Shell(test), n.Name)})
				continue
			}
			for _, b := range r.Bandwidths {
				if b.GBps <= 0 {
					continue
				}
				k := key{test, b.Name}
				if _, seen := values[k]; !seen {
					keys = append(keys, k)
				}
				values[k] = append(values[k], NodeBandwidth{Node: n.Name, GBps: b.GBps})
			}
		}
		if failed && !slices.Contains(rep.Failing, n.Name) {
			rep.Failing = append(rep.Failing, n.Name)
		}
	}
	if !some {
		return
	}
	rep.SlowBelow = slow
	for _, k := range keys {
		vs := values[k]
		med := median(vs)
		sp := BandwidthSpread{Test: k.test, Name: k.name, Median: med}
		for _, v := range vs {
			v.Ratio = v.GBps / med
			// one node alone has no fleet to be slower than
			v.Slow = len(vs) > 1 && v.GBps < slow*med
			if v.Slow {
				rep.Differences = append(rep.Differences, Difference{Node: v.Node, What: "bandwidth " + k.test + " " + k.name,
					Found: fmt.Sprintf("%.2f GB/s, %.2f× the median", v.GBps, v.Ratio),
					Fleet: fmt.Sprintf("median %.2f GB/s", med), Of: len(vs),
					Fix: fmt.Sprintf("%s is below %.2f× the fleet's median: compare its GPUs' and NICs' links (nvidia-smi topo -m, link speed and width in lspci -vv, "+
						"ibstat rates) and clocks with a fast node's, and run epbuild test --only %s there again to rule out a busy node", v.Node, slow, quote.Shell(k.test))})
			}
			sp.Nodes = append(sp.Nodes, v)
		}
		slices.SortStableFunc(sp.Nodes, func(a, b NodeBandwidth) int { return cmp.Compare(a.GBps, b.GBps) })
		rep.Bandwidths = append(rep.Bandwidths, sp)
	}
}

// median of the values (the mean of the two middle ones for an even count).
func median(vs []NodeBandwidth) float64 {
	xs := make([]float64, len(vs))
	for i, v := range vs {
		xs[i] = v.GBps
	}
	slices.Sort(xs)
	m := len(xs) / 2
	if len(xs)%2 == 1 {
		return xs[m]
	}
	return (xs[m-1] + xs[m]) / 2
}
