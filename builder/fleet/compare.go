package fleet

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder"
)

// Report is the fleet's comparison: one row per node that differs from the rest, on a
// facet (install, NVSHMEM, NCCL, NIC mapping, epbuild version, hostname) or a check.
type Report struct {
	Nodes       []NodeSummary `json:"nodes"`
	Differences []Difference  `json:"differences"`
	// Checks are the checks whose status is not the same on every node.
	Checks []CheckSpread `json:"checks"`
	// Failing are the nodes whose own report failed (a check with status fail), even
	// where every node fails the same way.
	Failing []string `json:"failing,omitempty"`
	// FailEverywhere are the checks that fail on every node: no difference, but no
	// node is ready either.
	FailEverywhere []FleetFailure `json:"fail_everywhere,omitempty"`
}

// FleetFailure is a check that fails on every node, with the first node's fix.
type FleetFailure struct {
	ID  string `json:"id"`
	Fix string `json:"fix,omitempty"`
}

// OK reports whether the nodes agree and none failed.
func (r *Report) OK() bool { return len(r.Differences) == 0 && len(r.Failing) == 0 }

// Odd lists the nodes named by a difference, in node order.
func (r *Report) Odd() []string {
	seen := map[string]bool{}
	for _, d := range r.Differences {
		seen[d.Node] = true
	}
	var out []string
	for _, n := range r.Nodes {
		if seen[n.Name] {
			out = append(out, n.Name)
		}
	}
	return out
}

// NodeSummary is one node's line in the report.
type NodeSummary struct {
	Name           string         `json:"name"`
	File           string         `json:"file"`
	Recipe         string         `json:"recipe,omitempty"`
	PlanKey        string         `json:"plan_key,omitempty"`
	EpbuildVersion string         `json:"epbuild_version,omitempty"`
	SchemaVersion  string         `json:"schema_version,omitempty"`
	Counts         map[string]int `json:"counts"`
	Failed         bool           `json:"failed"`
}

// Difference is one node that differs from the fleet.
type Difference struct {
	Node string `json:"node"`
	// What is the facet ("install", "nvshmem", "nccl", "nic-mapping", "epbuild",
	// "hostname") or "check <id>".
	What  string `json:"what"`
	Found string `json:"found"`
	// Fleet is what the majority has, and Of how many nodes have it ("" and 0 on a tie:
	// then every group is listed).
	Fleet string `json:"fleet"`
	Of    int    `json:"of"`
	Fix   string `json:"fix"`
}

// CheckSpread is a check whose status differs between nodes.
type CheckSpread struct {
	ID       string              `json:"id"`
	ByStatus map[string][]string `json:"by_status"` // status ("absent" too) → nodes
	Why      string              `json:"why,omitempty"`
}

// absent is the status of a check a node's report does not have.
const absent = "absent"

// facet is one property every node should share, read from its report.
type facet struct {
	name  string
	value func(n *Node) string // "" when the report does not say
	fix   func(n *Node, found, fleet string, ref *Node) string
	// optional facets are compared between the nodes that report them: a report that
	// does not say (an older epbuild, a check skipped for lack of input) is no difference.
	// Without an install or a pairing a node does differ.
	optional bool
}

func facets() []facet {
	return []facet{
		{name: "install", value: installOf, fix: func(n *Node, _, fleet string, ref *Node) string {
			art, prefix := ref.Report.Artifact, n.Report.Prefix
			if art == "" {
				art = "ARTIFACT"
			}
			if prefix == "" {
				prefix = "PREFIX"
			}
			return fmt.Sprintf("install the fleet's artifact (%s) on %s: epbuild install %s --prefix %s (epbuild pull fetches it from the registry)", fleet, n.Name, art, prefix)
		}},
		{name: "nvshmem", optional: true, value: checkValue("process.single-nvshmem", func(c builder.VerifyCheck) string { return c.Found }),
			fix: func(n *Node, _, fleet string, _ *Node) string {
				return fmt.Sprintf("make %s load the install's NVSHMEM (the fleet: %s): source the install's env.sh in the job (its LD_PRELOAD), "+
					"and remove other NVSHMEM copies from its Python environment (pip uninstall nvidia-nvshmem-cu12/cu13 where the recipe builds its own)", n.Name, fleet)
			}},
		{name: "nccl", optional: true, value: checkValue("host.nccl.version", func(c builder.VerifyCheck) string { return c.Read }),
			fix: func(n *Node, _, fleet string, _ *Node) string {
				return fmt.Sprintf("give %s the fleet's NCCL (%s): install that version, or put it first on LD_LIBRARY_PATH", n.Name, fleet)
			}},
		{name: "nic-mapping", value: mappingOf, fix: func(n *Node, found, fleet string, _ *Node) string {
			if found == "" {
				return fmt.Sprintf("run epbuild verify-install --host --json on %s: its report has no GPU↔NIC pairing", n.Name)
			}
			return fmt.Sprintf("%s's PCIe tree pairs its GPUs with other NICs than the fleet's: check its NIC names (udev or DOCA-OFED renaming) and card slots; "+
				"until they match, set DEEP_EP_DEVICE_TO_HCA_MAPPING=%s on %s only (a node-wide mapping of %s sends its GPUs through distant NICs)", n.Name, found, n.Name, fleet)
		}},
		{name: "epbuild", optional: true, value: func(n *Node) string { return n.EpbuildVersion }, fix: func(n *Node, _, fleet string, _ *Node) string {
			return fmt.Sprintf("run the fleet's epbuild (%s) on %s: another version may check other things", fleet, n.Name)
		}},
	}
}

// installOf is the install's identity: recipe, plan key and, when reported, the manifest's
// sha256.
func installOf(n *Node) string {
	r := n.Report
	if r.PlanKey == "" {
		return ""
	}
	s := r.Recipe + " plan " + short(r.PlanKey)
	if n.ManifestSHA256 != "" {
		s += " manifest sha256 " + short(n.ManifestSHA256)
	}
	return s
}

func short(k string) string { return k[:min(12, len(k))] }

// mappingOf is the DEEP_EP_DEVICE_TO_HCA_MAPPING value the node's PCIe tree implies.
func mappingOf(n *Node) string {
	_, v, _ := strings.Cut(n.Report.MappingLine, "=")
	return v
}

// checkValue reads a facet from one check; a skipped or absent check says nothing.
func checkValue(id string, get func(builder.VerifyCheck) string) func(n *Node) string {
	return func(n *Node) string {
		c, ok := n.Report.Check(id)
		if !ok || c.Status == "skip" {
			return ""
		}
		return get(c)
	}
}

// Compare finds what differs between the nodes.
func Compare(nodes []Node) *Report {
	rep := &Report{}
	for i := range nodes {
		n := &nodes[i]
		rep.Nodes = append(rep.Nodes, NodeSummary{Name: n.Name, File: n.File, Recipe: n.Report.Recipe, PlanKey: n.Report.PlanKey,
			EpbuildVersion: n.EpbuildVersion, SchemaVersion: n.SchemaVersion, Counts: n.Report.Counts(), Failed: n.Report.Failed()})
		if n.Report.Failed() {
			rep.Failing = append(rep.Failing, n.Name)
		}
	}
	rep.Differences = append(rep.Differences, duplicateHostnames(nodes)...)
	for _, f := range facets() {
		rep.Differences = append(rep.Differences, f.compare(nodes)...)
	}
	spreads, diffs, common := compareChecks(nodes)
	rep.Checks, rep.FailEverywhere = spreads, common
	rep.Differences = append(rep.Differences, diffs...)
	// one node's rows together, nodes in input order
	order := map[string]int{}
	for i, n := range nodes {
		if _, ok := order[n.Name]; !ok {
			order[n.Name] = i
		}
	}
	slices.SortStableFunc(rep.Differences, func(a, b Difference) int { return order[a.Node] - order[b.Node] })
	return rep
}

// duplicateHostnames: two reports from one hostname are one node checked twice and
// another not at all, or two nodes with one name (which NCCL and MPI launchers trip over).
func duplicateHostnames(nodes []Node) []Difference {
	files := map[string][]string{}
	for _, n := range nodes {
		if n.Hostname != "" {
			files[n.Hostname] = append(files[n.Hostname], n.File)
		}
	}
	var out []Difference
	for _, h := range slices.Sorted(maps.Keys(files)) {
		if fs := files[h]; len(fs) > 1 {
			out = append(out, Difference{Node: h, What: "hostname", Found: fmt.Sprintf("%d reports: %s", len(fs), strings.Join(fs, ", ")),
				Fix: "give every node its own hostname, and write each node's report once (reports/$(hostname).json)"})
		}
	}
	return out
}

// majority finds the most common value and how many hold it; ok is false on a tie.
func majority(values []string) (string, int, bool) {
	count := map[string]int{}
	for _, v := range values {
		count[v]++
	}
	keys := slices.SortedFunc(maps.Keys(count), func(a, b string) int {
		return cmp.Or(count[b]-count[a], strings.Compare(a, b))
	})
	if len(keys) > 1 && count[keys[0]] == count[keys[1]] {
		return "", 0, false
	}
	return keys[0], count[keys[0]], true
}

func (f facet) compare(all []Node) []Difference {
	var (
		nodes  []Node
		values []string
	)
	for i := range all {
		v := f.value(&all[i])
		if v == "" && f.optional {
			continue
		}
		nodes, values = append(nodes, all[i]), append(values, v)
	}
	if !slices.ContainsFunc(values, func(v string) bool { return v != "" }) {
		return nil // no report says: nothing to compare
	}
	fleet, of, ok := majority(values)
	var ref *Node
	for i := range nodes {
		if values[i] == fleet {
			ref = &nodes[i]
			break
		}
	}
	var out []Difference
	for i := range nodes {
		if ok && values[i] == fleet {
			continue
		}
		found, shown := values[i], fleet
		if found == "" {
			found = "not reported"
		}
		d := Difference{Node: nodes[i].Name, What: f.name, Found: found, Fleet: shown, Of: of}
		if !ok {
			d.Fleet = "no majority"
			d.Fix = fmt.Sprintf("the nodes split evenly on %s: decide which is right, then fix the others", f.name)
		} else {
			d.Fix = f.fix(&nodes[i], values[i], fleet, ref)
		}
		out = append(out, d)
	}
	return out
}

// statusRank orders statuses from healthy to broken; on a tie the healthiest status is
// the fleet's.
func statusRank(s string) int {
	switch s {
	case "pass":
		return 0
	case "skip":
		return 1
	case "warn":
		return 2
	case absent:
		return 3
	}
	return 4 // fail, or a status this version does not know
}

// compareChecks finds checks whose status differs between nodes, and the nodes off the
// fleet's status for each.
func compareChecks(nodes []Node) ([]CheckSpread, []Difference, []FleetFailure) {
	var ids []string
	seen := map[string]bool{}
	for _, n := range nodes {
		for _, c := range n.Report.Checks {
			if !seen[c.ID] {
				seen[c.ID] = true
				ids = append(ids, c.ID)
			}
		}
	}
	var (
		spreads []CheckSpread
		diffs   []Difference
		common  []FleetFailure
	)
	for _, id := range ids {
		statuses := make([]string, len(nodes))
		checks := make([]builder.VerifyCheck, len(nodes))
		by := map[string][]string{}
		for i, n := range nodes {
			c, ok := n.Report.Check(id)
			statuses[i] = absent
			if ok {
				statuses[i], checks[i] = string(c.Status), c
			}
			by[statuses[i]] = append(by[statuses[i]], n.Name)
		}
		if len(by) == 1 {
			if statuses[0] == "fail" {
				common = append(common, FleetFailure{ID: id, Fix: checks[0].Fix})
			}
			continue
		}
		count := map[string]int{}
		for _, s := range statuses {
			count[s]++
		}
		fleet := slices.MinFunc(slices.Collect(maps.Keys(count)), func(a, b string) int {
			return cmp.Or(count[b]-count[a], statusRank(a)-statusRank(b))
		})
		sp := CheckSpread{ID: id, ByStatus: by}
		for i := range nodes {
			if sp.Why == "" && checks[i].Why != "" {
				sp.Why = checks[i].Why
			}
			if statuses[i] == fleet {
				continue
			}
			fix := checks[i].Fix
			if statuses[i] == absent {
				fix = "its report lacks this check: run the fleet's epbuild with the same flags (--host, --prefix) on " + nodes[i].Name
			}
			if fix == "" {
				fix = "see " + checks[i].Read
			}
			found := statuses[i]
			if detail := oneLine(cmp.Or(checks[i].Found, checks[i].Read)); detail != "" && statuses[i] != "pass" {
				found += ": " + detail
			}
			diffs = append(diffs, Difference{Node: nodes[i].Name, What: "check " + id, Found: found, Fleet: fleet, Of: count[fleet], Fix: fix})
		}
		spreads = append(spreads, sp)
	}
	return spreads, diffs, common
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
