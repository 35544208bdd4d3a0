package fleet

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/verify"
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
	// Bandwidths are the bandwidths the nodes' epbuild test documents read, one entry
	// per test and pattern, each node's value beside the fleet's median.
	Bandwidths []BandwidthSpread `json:"bandwidths,omitempty"`
	// SlowBelow is the fraction of the median under which a node's bandwidth is slow.
	SlowBelow float64 `json:"slow_below,omitempty"`
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
	// Problem: why the node has no report to compare (Node.Problem).
	Problem string `json:"problem,omitempty"`
	// TestsFile is the node's epbuild test document, when given; TestsOnly: no
	// verify-install report was given for the node, only that document.
	TestsFile string `json:"tests_file,omitempty"`
	TestsOnly bool   `json:"tests_only,omitempty"`
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
	// Command is the fix as a command line to paste, where there is one: every word
	// shell-quoted, files by absolute path.
	Command string `json:"command,omitempty"`
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
	// command, when not nil, is the fix's command line ("" where none can be given)
	command func(n *Node, found string, ref *Node) string
	// optional facets are compared between the nodes that report them: a report that
	// does not say (an older epbuild, a check skipped for lack of input) is no difference.
	// Without an install or a pairing a node does differ.
	optional bool
}

func facets(opt Options) []facet {
	return []facet{
		{name: "install", value: installOf, fix: func(n *Node, _, fleet string, ref *Node) string {
			return installFix(n, fleet, ref, opt.ArtifactDir)
		}, command: func(n *Node, _ string, ref *Node) string {
			return installCommand(n, ref, opt.ArtifactDir)
		}},
		{name: "nvshmem", optional: true, value: checkValue("process.single-nvshmem", func(c verify.VerifyCheck) string { return c.Found }),
			fix: func(n *Node, _, fleet string, _ *Node) string {
				return fmt.Sprintf("make %s load the install's NVSHMEM (the fleet: %s): source the install's env.sh in the job (its LD_PRELOAD), "+
					"and remove other NVSHMEM copies from its Python environment (pip uninstall nvidia-nvshmem-cu12/cu13 where the recipe builds its own)", n.Name, fleet)
			}},
		{name: "nccl", optional: true, value: checkValue("host.nccl.version", func(c verify.VerifyCheck) string { return c.Read }),
			fix: func(n *Node, _, fleet string, _ *Node) string {
				return fmt.Sprintf("give %s the fleet's NCCL (%s): install that version, or put it first on LD_LIBRARY_PATH", n.Name, fleet)
			}},
		{name: "nic-mapping", value: mappingOf, fix: func(n *Node, found, fleet string, _ *Node) string {
			if found == "" {
				return fmt.Sprintf("run epbuild verify-install --host --json on %s: its report has no GPU↔NIC pairing", n.Name)
			}
			return fmt.Sprintf("%s's PCIe tree pairs its GPUs with other NICs than the fleet's: check its NIC names (udev or DOCA-OFED renaming) and card slots; "+
				"until they match, set DEEP_EP_DEVICE_TO_HCA_MAPPING=%s on %s only (a node-wide mapping of %s sends its GPUs through distant NICs)", n.Name, quote.Shell(found), n.Name, fleet)
		}, command: func(_ *Node, found string, _ *Node) string {
			if found == "" {
				return ""
			}
			return "export DEEP_EP_DEVICE_TO_HCA_MAPPING=" + quote.Shell(found)
		}},
		{name: "epbuild", optional: true, value: func(n *Node) string { return n.EpbuildVersion }, fix: func(n *Node, _, fleet string, _ *Node) string {
			return fmt.Sprintf("run the fleet's epbuild (%s) on %s: another version may check other things", fleet, n.Name)
		}},
	}
}

// installFix says how to give n the fleet's install; installCommand is the command to
// paste where this machine knows where the artifact lies.
func installFix(n *Node, fleet string, ref *Node, artifactDir string) string {
	art, prefix := installArgs(n, ref, artifactDir)
	switch {
	case art == "" || prefix == "":
		return fmt.Sprintf("install the fleet's artifact (%s) on %s with epbuild install ARTIFACT --prefix PREFIX: the reports name no artifact or prefix", fleet, n.Name)
	case !filepath.IsAbs(art):
		return fmt.Sprintf("install the fleet's artifact %s (%s) on %s with epbuild install and --prefix %s; fleet report --artifacts DIR, "+
			"the directory that holds it, prints the command (epbuild pull fetches it from the registry by its plan key)", art, fleet, n.Name, prefix)
	}
	return fmt.Sprintf("install the fleet's artifact (%s) on %s: %s (epbuild pull fetches it from the registry)", fleet, n.Name,
		installCommand(n, ref, artifactDir))
}

func installCommand(n *Node, ref *Node, artifactDir string) string {
	art, prefix := installArgs(n, ref, artifactDir)
	if art == "" || prefix == "" || !filepath.IsAbs(art) {
		return ""
	}
	return shellLine("epbuild", "install", art, "--prefix", prefix)
}

// installArgs are the artifact (by absolute path where known) and the prefix of n's fix.
func installArgs(n *Node, ref *Node, artifactDir string) (art, prefix string) {
	art, prefix = ref.Report.Artifact, cmp.Or(n.Report.Prefix, ref.Report.Prefix)
	if art != "" && !filepath.IsAbs(art) && artifactDir != "" {
		if abs, err := filepath.Abs(filepath.Join(artifactDir, filepath.Base(art))); err == nil {
			art = abs
		}
	}
	return art, prefix
}

// shellLine is a command line to paste: each word shell-quoted.
func shellLine(words ...string) string {
	for i, w := range words {
		words[i] = quote.Shell(w)
	}
	return strings.Join(words, " ")
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
func checkValue(id string, get func(verify.VerifyCheck) string) func(n *Node) string {
	return func(n *Node) string {
		c, ok := n.facts[id]
		if !ok || c.Status == "skip" {
			return ""
		}
		return get(c)
	}
}

// Options are what Compare needs beyond the reports.
type Options struct {
	// ArtifactDir is where the fleet's artifacts lie on this machine, so that an install
	// fix can name the artifact by its absolute path; "": not known.
	ArtifactDir string
	// SlowBelow: a node whose bandwidth is below this fraction of the nodes' median is
	// slow (0: DefaultSlowBelow).
	SlowBelow float64
}

// Compare finds what differs between the nodes. A node with a Problem (no report, or one
// that cannot be read) is a difference of its own and takes no part in the majorities.
func Compare(nodes []Node, opt Options) *Report {
	rep := &Report{}
	tab := newTable()
	for i := range nodes {
		if nodes[i].tab != nil {
			tab = nodes[i].tab // Load's: the ids every node was read with
			break
		}
	}
	var usable []Node
	for i := range nodes {
		n := &nodes[i]
		if n.testsOnly {
			rep.Nodes = append(rep.Nodes, NodeSummary{Name: n.Name, File: n.File, EpbuildVersion: n.EpbuildVersion, SchemaVersion: n.SchemaVersion,
				Counts: map[string]int{}, TestsFile: n.TestsFile, TestsOnly: true})
			continue
		}
		if n.Problem == "" && n.tab != tab {
			if err := n.stream(tab, nil, nil); err != nil {
				n.Problem = err.Error()
			}
		}
		rep.Nodes = append(rep.Nodes, NodeSummary{Name: n.Name, File: n.File, Recipe: n.Report.Recipe, PlanKey: n.Report.PlanKey,
			EpbuildVersion: n.EpbuildVersion, SchemaVersion: n.SchemaVersion, Counts: n.counts, Failed: n.failed || n.Problem != "", Problem: n.Problem,
			TestsFile: n.TestsFile})
		if n.Problem != "" {
			d := problemRow(n)
			rep.Nodes[len(rep.Nodes)-1].Problem = d.Found
			rep.Differences = append(rep.Differences, d)
			continue
		}
		if n.failed {
			rep.Failing = append(rep.Failing, n.Name)
		}
		if n.Unlisted {
			rep.Differences = append(rep.Differences, Difference{Node: n.Name, What: "host list", Found: "a report from a node the host list does not name",
				Fix: "remove " + n.File + " if it is left from another run, else add the node to the host list"})
		}
		usable = append(usable, *n)
	}
	rep.Differences = append(rep.Differences, duplicateHostnames(usable)...)
	for _, f := range facets(opt) {
		rep.Differences = append(rep.Differences, f.compare(usable)...)
	}
	spreads, diffs, common := compareChecks(usable, tab)
	rep.Checks, rep.FailEverywhere = spreads, common
	rep.Differences = append(rep.Differences, diffs...)
	compareTests(rep, nodes, opt)
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

// problemRow is the difference of a node without a report to compare.
func problemRow(n *Node) Difference {
	d := Difference{Node: n.Name, What: "report", Found: n.Problem}
	if n.problemAt != "" {
		d.Found = "line " + n.problemAt[1:] + ": " + n.Problem
	}
	if n.File == "" && n.Report.Checks == nil {
		d.Found = "no report from this node"
		d.Fix = "run epbuild verify-install --host --json on " + n.Name + " and write its report beside the others, named after the node " +
			"(a node whose install is missing or broken still writes a report, with failing checks: none at all means the task did not run there)"
	} else {
		d.Fix = n.File + n.problemAt + ": " + n.Problem + "; replace it with what epbuild verify-install --host --json prints on " + n.Name + " (the whole output, nothing else)"
	}
	return d
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
			if f.command != nil {
				d.Command = f.command(&nodes[i], values[i], ref)
			}
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

// checkInfo is what the fleet says about one check id.
type checkInfo struct {
	seen   int           // nodes whose report has it
	counts []statusCount // nodes by status ("absent" added once every node is counted)
	fleet  string        // the majority's status
	spread bool          // its status differs between nodes
	// failAll: it fails on every node; fix is then the first node's fix (fixed: set)
	failAll, fixed bool
	fix, why       string
	by             map[string][]string
	// last and text: 1 + the node whose statuses, and whose texts, were last visited (a
	// report's second check with one id is not counted again)
	last, text int
}

type statusCount struct {
	status string
	n      int
}

func (ci *checkInfo) add(status string) {
	for i := range ci.counts {
		if ci.counts[i].status == status {
			ci.counts[i].n++
			return
		}
	}
	ci.counts = append(ci.counts, statusCount{status, 1})
}

// compareChecks finds checks whose status differs between nodes, and the nodes off the
// fleet's status for each. It is linear in the checks of all reports: the nodes' interned
// statuses are counted by id, then only the reports with a check off the fleet's are read
// again, for those checks' texts.
func compareChecks(nodes []Node, tab *table) ([]CheckSpread, []Difference, []FleetFailure) {
	info := make([]checkInfo, len(tab.idNames))
	for i := range nodes {
		for _, c := range nodes[i].checks {
			info[c.id].seen++
			info[c.id].add(tab.stNames[c.status])
		}
	}
	var spreadIDs []int32
	second := false
	for id := range info {
		ci := &info[id]
		if ci.seen == 0 {
			continue
		}
		if a := len(nodes) - ci.seen; a > 0 {
			ci.counts = append(ci.counts, statusCount{absent, a})
		}
		if len(ci.counts) == 1 {
			ci.failAll = ci.counts[0].status == "fail"
			second = second || ci.failAll
			continue
		}
		ci.spread, second = true, true
		ci.fleet = slices.MinFunc(ci.counts, func(a, b statusCount) int {
			return cmp.Or(b.n-a.n, statusRank(a.status)-statusRank(b.status), strings.Compare(a.status, b.status))
		}).status
		ci.by = map[string][]string{}
		spreadIDs = append(spreadIDs, int32(id))
	}
	if !second {
		return nil, nil, nil
	}
	type keyed struct {
		id int32
		d  Difference
	}
	var diffs []keyed
	anyFailAll := false
	for id := range info {
		anyFailAll = anyFailAll || info[id].failAll
	}
	for i := range nodes {
		n := &nodes[i]
		var rows []keyed
		// who has which status comes from the statuses recorded; the report is read again
		// only for the texts of its checks off the fleet's (and the first node's, for the
		// fix of a check that fails everywhere)
		read := i == 0 && anyFailAll
		for _, c := range n.checks {
			ci := &info[c.id]
			ci.last = i + 1
			if !ci.spread {
				continue
			}
			st := tab.stNames[c.status]
			ci.by[st] = append(ci.by[st], n.Name)
			read = read || st != ci.fleet
		}
		for _, id := range spreadIDs {
			ci := &info[id]
			if ci.last == i+1 {
				continue
			}
			ci.by[absent] = append(ci.by[absent], n.Name)
			if ci.fleet != absent {
				rows = append(rows, keyed{id, Difference{Node: n.Name, What: "check " + tab.idNames[id], Found: absent, Fleet: ci.fleet, Of: ci.count(ci.fleet),
					Fix: "its report lacks this check: run the fleet's epbuild with the same flags (--host, --prefix) on " + n.Name}})
			}
		}
		if read {
			err := n.stream(tab, nil, func(c verify.VerifyCheck) error {
				id, ok := tab.ids[c.ID]
				if !ok {
					return fmt.Errorf("check %s appeared on a second read", c.ID)
				}
				ci := &info[id]
				if ci.text == i+1 {
					return nil // a second check with this id: the first one counts
				}
				ci.text = i + 1
				if ci.failAll && !ci.fixed {
					ci.fix, ci.fixed = c.Fix, true
				}
				st := string(c.Status)
				if !ci.spread || st == ci.fleet {
					return nil
				}
				ci.why = cmp.Or(ci.why, c.Why)
				fix := cmp.Or(c.Fix, "see "+c.Read)
				found := st
				if detail := oneLine(cmp.Or(c.Found, c.Read)); detail != "" && st != "pass" {
					found += ": " + detail
				}
				rows = append(rows, keyed{id, Difference{Node: n.Name, What: "check " + c.ID, Found: found, Fleet: ci.fleet, Of: ci.count(ci.fleet), Fix: fix}})
				return nil
			})
			if err != nil {
				rows = append(rows, keyed{-1, Difference{Node: n.Name, What: "report", Found: err.Error(), Fix: "run fleet report again"}})
			}
		}
		slices.SortStableFunc(rows, func(a, b keyed) int { return cmp.Compare(a.id, b.id) })
		diffs = append(diffs, rows...)
	}
	var (
		spreads []CheckSpread
		out     []Difference
		common  []FleetFailure
	)
	for id := range info {
		ci := &info[id]
		switch {
		case ci.spread:
			spreads = append(spreads, CheckSpread{ID: tab.idNames[id], ByStatus: ci.by, Why: ci.why})
		case ci.failAll:
			common = append(common, FleetFailure{ID: tab.idNames[id], Fix: ci.fix})
		}
	}
	for _, k := range diffs {
		out = append(out, k.d)
	}
	return spreads, out, common
}

func (ci *checkInfo) count(status string) int {
	for _, c := range ci.counts {
		if c.status == status {
			return c.n
		}
	}
	return 0
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
