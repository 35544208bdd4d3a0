package fleet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/epbuild/epbuild/builder/verify"
)

// syntheticReport is a report of k checks, "c0".."c<k-1>", each passing, except those
// fail says.
func syntheticReport(host string, k int, fail func(i int) bool) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"ok": true, "hostname": %q, "schema_version": 1, "prefix": "/opt/deepep", "recipe": "demo", "plan_key": "%s", "checks": [`, host, strings.Repeat("ab", 32))
	for i := range k {
		st := "pass"
		if fail != nil && fail(i) {
			st = "fail"
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id": "c%d", "status": %q, "read": "/opt/deepep/f%d", "found": "x", "why": "w", "fix": "reinstall"}`, i, st, i)
	}
	b.WriteString(`], "pairs": [{"gpu": 0}], "facts": {"kernel": "6.8"}}`)
	return []byte(b.String())
}

func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The comparison reads each check at most twice (once to count statuses by id, once for
// the texts of the checks that differ), whatever the number of checks: no check is looked
// up by scanning a report, which made 140k checks take a minute. Load keeps no check's
// texts: one id and status a check, interned.
func TestCompareIsLinearInTheChecks(t *testing.T) {
	dir := t.TempDir()
	const k, nodes = 20000, 3
	var files []string
	for i := range nodes {
		// node 2 fails every other check: 10k differences, every one needing its texts
		files = append(files, writeFile(t, dir, fmt.Sprintf("n%d.json", i), syntheticReport(fmt.Sprintf("n%d", i), k, func(j int) bool { return i == 2 && j%2 == 0 })))
	}
	ns, err := Load(files, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if n.Problem != "" || n.Report.Checks != nil || len(n.checks) != k || n.counts["pass"]+n.counts["fail"] != k {
			t.Fatalf("node %s: problem %q, %d checks held, %d recorded", n.Name, n.Problem, len(n.Report.Checks), len(n.checks))
		}
	}
	tab := ns[0].tab
	if tab.visits != nodes*k {
		t.Fatalf("Load read %d checks, want %d", tab.visits, nodes*k)
	}
	rep := Compare(ns, Options{})
	if got := tab.visits - nodes*k; got > nodes*k {
		t.Errorf("Compare read %d checks of %d: more than once each", got, nodes*k)
	}
	if len(rep.Checks) != k/2 || len(rep.Differences) != k/2 || rep.Differences[0].Node != "n2" || rep.Differences[0].What != "check c0" ||
		rep.Differences[1].What != "check c2" || !slices.Equal(rep.Checks[0].ByStatus["pass"], []string{"n0", "n1"}) {
		t.Errorf("%d spreads, %d differences, first %+v", len(rep.Checks), len(rep.Differences), rep.Differences[:min(2, len(rep.Differences))])
	}
	// nodes that agree: the second pass is not run at all
	before := tab.visits
	Compare(ns[:2], Options{})
	if tab.visits != before {
		t.Errorf("two agreeing nodes: %d checks read again", tab.visits-before)
	}
}

// A report that is not a regular file is refused without reading it: a FIFO no one
// writes and a symlink to /dev/zero would block or never end. A report over the limit
// is refused by its size, and the rest of the fleet is still compared.
func TestLoadRefusesWhatCannotBeAReport(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.json", syntheticReport("a", 3, nil))
	writeFile(t, dir, "b.json", syntheticReport("b", 3, nil))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.json")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "big.json", syntheticReport("big", 200, nil))
	ns, err := Load([]string{dir}, LoadOptions{MaxBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	problems := map[string]string{}
	for _, n := range ns {
		problems[n.Name] = n.Problem
	}
	if problems["a"] != "" || problems["b"] != "" || !strings.Contains(problems["fifo"], "not a regular file") ||
		!strings.Contains(problems["zero"], "not a regular file") || !strings.Contains(problems["big"], "over the limit of 4096 bytes") {
		t.Errorf("problems %q", problems)
	}
	rep := Compare(ns, Options{})
	if rep.OK() || len(rep.Differences) != 3 || len(rep.Nodes) != 5 {
		t.Errorf("%+v", rep.Differences)
	}
}

// A host list names the nodes that must have reported: one that did not is a failing row
// (a node whose task never ran writes nothing, and the others agreeing must not hide it);
// a report from a node the list does not name is a difference. Names match whole or up
// to the first dot (Slurm's short names, a hostname's FQDN).
func TestLoadExpectedHosts(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "gpu1.json", syntheticReport("gpu1.cluster.local", 3, nil))
	writeFile(t, dir, "gpu2.json", syntheticReport("gpu2", 3, nil))
	writeFile(t, dir, "old9.json", syntheticReport("old9", 3, nil))
	ns, err := Load([]string{dir}, LoadOptions{Expected: []string{"gpu1", "gpu2", "gpu3", "gpu2"}})
	if err != nil {
		t.Fatal(err)
	}
	rep := Compare(ns, Options{})
	var rows []string
	for _, d := range rep.Differences {
		rows = append(rows, d.Node+" "+d.What+": "+d.Found)
	}
	want := []string{"old9 host list: a report from a node the host list does not name", "gpu3 report: no report from this node"}
	if !slices.Equal(rows, want) || rep.OK() || len(rep.Nodes) != 4 || !slices.Equal(rep.Odd(), []string{"old9", "gpu3"}) {
		t.Errorf("rows %q, odd %v", rows, rep.Odd())
	}
	// a list and an empty directory: every node is missing, none is an error
	ns, err = Load([]string{t.TempDir()}, LoadOptions{Expected: []string{"gpu1"}})
	if err != nil || len(ns) != 1 || ns[0].Problem != "no report" {
		t.Errorf("%v %+v", err, ns)
	}
}

func TestReadHostsTakesKubectlNames(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, "hosts", []byte("# kubectl get nodes -l cloud.google.com/gke-accelerator -o name\nnode/gke-a3-pool-1\nnode/gke-a3-pool-2\n\ngpu[01-02]\n"))
	hosts, err := ReadHosts(p)
	if err != nil || !slices.Equal(hosts, []string{"gke-a3-pool-1", "gke-a3-pool-2", "gpu01", "gpu02"}) {
		t.Errorf("%q %v", hosts, err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHosts(filepath.Join(dir, "fifo")); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a FIFO: %v", err)
	}
}

// FuzzLoadReport: no input makes the parser panic, hang or accept what is not one JSON
// object; what it accepts has an id and a status for every check it recorded.
func FuzzLoadReport(f *testing.F) {
	f.Add(syntheticReport("a", 2, func(i int) bool { return i == 1 }))
	f.Add([]byte(`{"checks": [{"id": "x", "status": "pass"}], "checks": null}`))
	f.Add([]byte(`{"hostname": "a\u2028b", "checks": [{"id": "x", "status": "weird"}]} `))
	f.Add([]byte("{\n\"checks\": [\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "node.json")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		tab := newTable()
		n := readNode(p, 1<<20, tab)
		if n.Problem != "" {
			if d := problemRow(&n); !strings.HasPrefix(d.Fix, p) {
				t.Errorf("a problem that does not name the file: %q", d.Fix)
			}
			return
		}
		if !json.Valid(b) {
			t.Errorf("accepted what is not JSON: %q", b)
		}
		if len(n.checks) == 0 {
			t.Error("accepted a report without checks")
		}
		for _, c := range n.checks {
			if tab.idNames[c.id] == "" || tab.stNames[c.status] == "" {
				t.Errorf("a check without id or status: %+v", c)
			}
		}
		Compare([]Node{n, {Name: "mem", Report: verify.VerifyReport{Checks: []verify.VerifyCheck{{ID: "x", Status: "pass"}}}}}, Options{})
	})
}

// BenchmarkReport compares twelve reports of 50k checks each, read from files.
func BenchmarkReport(b *testing.B) {
	dir := b.TempDir()
	var files []string
	for i := range 12 {
		files = append(files, writeFile(b, dir, fmt.Sprintf("n%02d.json", i), syntheticReport(fmt.Sprintf("n%02d", i), 50000, func(j int) bool { return i == 3 && j%100 == 0 })))
	}
	b.ResetTimer()
	for b.Loop() {
		ns, err := Load(files, LoadOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if rep := Compare(ns, Options{}); len(rep.Differences) != 500 {
			b.Fatalf("%d differences", len(rep.Differences))
		}
	}
}
