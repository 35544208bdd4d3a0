package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// Slurm's compressed host lists, expanded as scontrol show hostnames prints them.
func TestExpandHostlist(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"node[01-04,07]":          "node01 node02 node03 node04 node07",
		"node1,node2":             "node1 node2",
		"gpu[8-11]":               "gpu8 gpu9 gpu10 gpu11",
		"gpu[008-010]":            "gpu008 gpu009 gpu010",
		"rack[1-2]-gpu[1,3]":      "rack1-gpu1 rack1-gpu3 rack2-gpu1 rack2-gpu3",
		"a[1-2],b,c[05]":          "a1 a2 b c05",
		"a4-highgpu-8g-[0-1]":     "a4-highgpu-8g-0 a4-highgpu-8g-1",
		" node[1-2] , login01 ":   "node1 node2 login01",
		"vm":                      "vm",
		"n[1-2].cluster,n3.other": "n1.cluster n2.cluster n3.other",
	} {
		got, err := ExpandHostlist(in)
		if err != nil || strings.Join(got, " ") != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"node[01-04": "without its ']'", "node]1[": "']' without '['", "node[4-1]": "runs backwards",
		"node[a-b]": "not a number", "node[]": "not a number", "": "names no host", "n[0-99999999]": "more than 65536",
		"a[0-300]b[0-300]": "more than 65536",
	} {
		if _, err := ExpandHostlist(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", in, err, want)
		}
	}
}

func writeHosts(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The job's nodes: --hosts FILE, else the Slurm allocation, through scontrol where it
// runs (a capture stands in for it here) and through ExpandHostlist otherwise.
func TestJobHosts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	file := writeHosts(t, "# the job's nodes\nnode01 slots=8\nnode02  slots=8 # rack 2\n\nnode[03-04]\n")
	hosts, from, err := JobHosts(ctx, sysroot.New(t.TempDir()), file, map[string]string{"SLURM_JOB_NODELIST": "x[1-9]"})
	if err != nil || from != file || strings.Join(hosts, " ") != "node01 node02 node03 node04" {
		t.Errorf("file: %q %q %v", hosts, from, err)
	}
	if _, _, err := JobHosts(ctx, sysroot.New(t.TempDir()), writeHosts(t, "node[01-\n"), nil); err == nil || !strings.Contains(err.Error(), "hosts:1:") {
		t.Errorf("a bad line: %v", err)
	}
	if _, _, err := JobHosts(ctx, sysroot.New(t.TempDir()), writeHosts(t, "# nobody\n"), nil); err == nil || !strings.Contains(err.Error(), "no host listed") {
		t.Errorf("an empty file: %v", err)
	}
	if _, _, err := JobHosts(ctx, sysroot.New(t.TempDir()), filepath.Join(t.TempDir(), "absent"), nil); err == nil {
		t.Error("a missing file")
	}
	env := map[string]string{"SLURM_JOB_NODELIST": "a4-[0-1]"}
	hosts, from, err = JobHosts(ctx, sysroot.New(t.TempDir()), "", env)
	if err != nil || from != "SLURM_JOB_NODELIST" || !slices.Equal(hosts, []string{"a4-0", "a4-1"}) {
		t.Errorf("Slurm, our parser: %q %q %v", hosts, from, err)
	}
	f := hostfixture.New(t)
	f.Command("a4-0\na4-1\n", "scontrol", "show", "hostnames", "a4-[0-1]")
	hosts, from, err = JobHosts(ctx, sysroot.New(f.Root()), "", env)
	if err != nil || from != "SLURM_JOB_NODELIST (scontrol show hostnames)" || !slices.Equal(hosts, []string{"a4-0", "a4-1"}) {
		t.Errorf("Slurm, scontrol: %q %q %v", hosts, from, err)
	}
	if hosts, _, err := JobHosts(ctx, sysroot.New(t.TempDir()), "", map[string]string{"SLURM_NODELIST": "old[1-2]"}); err != nil || len(hosts) != 2 {
		t.Errorf("older Slurm: %q %v", hosts, err)
	}
	if hosts, from, err := JobHosts(ctx, sysroot.New(t.TempDir()), "", nil); hosts != nil || from != "" || err != nil {
		t.Errorf("no list: %q %q %v", hosts, from, err)
	}
}

// Distinct hostnames, this node's among them: NVSHMEM tells nodes apart by gethostname().
func TestHostnamesCheck(t *testing.T) {
	t.Parallel()
	f := hostfixture.New(t)
	f.Hostname("vm")
	run := func(hosts ...string) check.Result {
		cfg := Config{Transport: TransportNone, GIDIndex: -1, Hosts: hosts, HostsFrom: "SLURM_JOB_NODELIST"}
		return mustCheck(t, Run(context.Background(), sysroot.New(f.Root()), cfg), "host.hostnames")
	}
	if c := run(); c.Status != check.Skip {
		t.Errorf("no list: %+v", c)
	}
	if c := run("node01", "node02", "NODE01"); c.Status != check.Fail || !strings.Contains(c.Read, "NODE01 (and node01)") {
		t.Errorf("a node twice: %+v", c)
	}
	// the GPU machine's clones: every node calls itself vm
	if c := run("node01", "node02"); c.Status != check.Warn || !strings.Contains(c.Read, "this node's hostname is vm, which the list does not name") ||
		!strings.Contains(c.Fix, "hostnamectl set-hostname") {
		t.Errorf("vm among node01, node02: %+v", c)
	}
	if c := run("vm", "vm2"); c.Status != check.Pass {
		t.Errorf("vm among vm, vm2: %+v", c)
	}
	if c := run("vm.cluster.local", "vm2.cluster.local"); c.Status != check.Pass {
		t.Errorf("a short hostname against full names: %+v", c)
	}
	if c := run("10.0.0.1", "10.0.0.2"); c.Status != check.Pass || !strings.Contains(c.Read, "addresses, not names") {
		t.Errorf("addresses: %+v", c)
	}
	g := hostfixture.New(t)
	g.Hostname("node02.cluster")
	cfg := Config{Transport: TransportNone, GIDIndex: -1, Hosts: []string{"node01", "node02"}, HostsFrom: "hosts"}
	if c := mustCheck(t, Run(context.Background(), sysroot.New(g.Root()), cfg), "host.hostnames"); c.Status != check.Pass {
		t.Errorf("node02.cluster among node01, node02: %+v", c)
	}
	if !sameHost("Node01", "node01") || sameHost("node01.a", "node01.b") || sameHost("node0", "node01") {
		t.Error("sameHost")
	}
}

// No host list makes the expansion panic or grow past its bound, and what it accepts it
// gives back in full: every name it expands is non-empty.
func FuzzExpandHostlist(f *testing.F) {
	for _, s := range []string{"node[01-04,07]", "rack[1-2]-gpu[1,3]", "a,b", "x[", "x]", "n[0-99999999]", "[1-2][3-4][5-6]", "a[1-2],,b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		hosts, err := ExpandHostlist(s)
		if err != nil {
			return
		}
		if len(hosts) == 0 || len(hosts) > maxHosts {
			t.Fatalf("%q: %d hosts", s, len(hosts))
		}
		for _, h := range hosts {
			if strings.TrimSpace(h) == "" {
				t.Fatalf("%q: an empty name in %q", s, hosts)
			}
		}
	})
}
