package fleet

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// testDoc is an epbuild test --json document of one node: the envelope, then each test
// "name:status:gbps" (gbps left out: no bandwidth line).
func testDoc(host string, tests ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"schema_version": 1, "epbuild_version": "dev", "hostname": %q, "ok": true, "command": "test", "prefix": "/opt/deepep", "recipe": "single-node", "plan_key": "ab", "procs": 8, "procs_from": "nvidia-smi -L", "nodes": 1, "tests": [`, host)
	for i, t := range tests {
		f := strings.Split(t, ":")
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"component": "deepep", "name": %q, "status": %q, "argv": ["python3"], "procs": 8, "seconds": 1, "exit_code": 0, "reason": "exited 1", "tail": ["x"]`, f[0], f[1])
		if len(f) > 2 {
			fmt.Fprintf(&b, `, "bandwidths": [{"name": "dispatch", "gbps": %s, "min_gbps": 1, "samples": 8}]`, f[2])
		}
		b.WriteByte('}')
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// epbuild test documents, alone or beside verify-install reports: each node's bandwidth
// beside the median, a node under 0.9× it is slow (a difference), a failed test fails
// its node, a test not run is no difference, and a document joins the report of its
// hostname.
func TestFleetBandwidths(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a-test.json", testDoc("gpu-a", "low-latency:pass:100", "internode:not-run"))
	writeFile(t, dir, "b-test.json", testDoc("gpu-b", "low-latency:pass:98", "internode:not-run"))
	writeFile(t, dir, "c-test.json", testDoc("gpu-c", "low-latency:pass:80", "internode:not-run"))
	writeFile(t, dir, "d-test.json", testDoc("gpu-d", "low-latency:pass:89", "intranode:fail"))
	writeFile(t, dir, "gpu-a.json", syntheticReport("gpu-a", 3, nil))
	writeFile(t, dir, "gpu-b.json", syntheticReport("gpu-b", 3, nil))
	nodes, err := Load([]string{dir}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, fmt.Sprintf("%s:%v:%v", n.Name, n.testsOnly, n.TestsFile != ""))
	}
	if !slices.Equal(names, []string{"gpu-a:false:true", "gpu-b:false:true", "gpu-c:true:true", "gpu-d:true:true"}) {
		t.Fatalf("nodes: %v", names)
	}
	rep := Compare(nodes, Options{})
	if len(rep.Bandwidths) != 1 {
		t.Fatalf("bandwidths: %+v", rep.Bandwidths)
	}
	b := rep.Bandwidths[0]
	if b.Test != "deepep/low-latency" || b.Name != "dispatch" || b.Median != 93.5 || len(b.Nodes) != 4 ||
		b.Nodes[0].Node != "gpu-c" || !b.Nodes[0].Slow || b.Nodes[1].Node != "gpu-d" || b.Nodes[1].Slow {
		t.Errorf("bandwidth: %+v", b)
	}
	if odd := rep.Odd(); !slices.Equal(odd, []string{"gpu-c", "gpu-d"}) || rep.OK() {
		t.Errorf("odd %v, ok %v:\n%s", odd, rep.OK(), dump(rep))
	}
	if !slices.Equal(rep.Failing, []string{"gpu-d"}) {
		t.Errorf("failing: %v", rep.Failing)
	}
	var what []string
	for _, d := range rep.Differences {
		what = append(what, d.Node+" "+d.What)
	}
	if !slices.Equal(what, []string{"gpu-c bandwidth deepep/low-latency dispatch", "gpu-d test deepep/intranode"}) {
		t.Errorf("differences: %v", what)
	}
	// a lower threshold lets gpu-c pass
	if rep := Compare(nodes, Options{SlowBelow: 0.8}); slices.Contains(rep.Odd(), "gpu-c") {
		t.Errorf("--slow-below 0.8 still flags gpu-c: %v", rep.Odd())
	}
	// the nodes that agree, with their reports: OK
	nodes, err = Load([]string{dir + "/a-test.json", dir + "/b-test.json", dir + "/gpu-a.json", dir + "/gpu-b.json"}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep := Compare(nodes, Options{}); !rep.OK() || len(rep.Nodes) != 2 {
		t.Errorf("two agreeing nodes:\n%s", dump(rep))
	}
}

// A test document that is not one is a failing row like any report, and never a panic.
func TestFleetRefusesBrokenTestDocs(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"no-tests":    `{"hostname": "n1", "command": "test"}`,
		"not-a-list":  `{"hostname": "n2", "command": "test", "tests": {"a": 1}}`,
		"no-name":     `{"hostname": "n3", "command": "test", "tests": [{"status": "pass"}]}`,
		"bad-gbps":    `{"hostname": "n4", "command": "test", "tests": [{"name": "x", "status": "pass", "bandwidths": [{"name": "d", "gbps": "fast"}]}]}`,
		"tests-first": `{"tests": [{"name": "x", "status": "pass"}], "command": "test", "hostname": "n5"}`,
	} {
		writeFile(t, dir, name+".json", []byte(body))
	}
	nodes, err := Load([]string{dir}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	problems := map[string]string{}
	for _, n := range nodes {
		problems[n.Name] = n.Problem
	}
	for name, want := range map[string]string{"no-tests": `no "tests"`, "not-a-list": "not a list", "no-name": "no name or status", "bad-gbps": "not JSON", "n5": ""} {
		if !strings.Contains(problems[name], want) || (want == "" && problems[name] != "") {
			t.Errorf("%s: problem %q, want %q (all: %v)", name, problems[name], want, problems)
		}
	}
	_ = Compare(nodes, Options{})
}
