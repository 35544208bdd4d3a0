package host

import (
	"bytes"
	"maps"
	"testing"

	"github.com/epbuild/epbuild/builder/host/hostfixture"
)

// The facts the rules ask for, read from the node and kept by a capture.
func TestFactsOfTheFixtureNodes(t *testing.T) {
	t.Parallel()
	root := hostfixture.GCPB200(t)
	f := hostfixture.At(t, root)
	f.Kernel("6.14.0-1007-gcp")
	f.DpkgPackages(map[string]string{"doca-ofed": "3.0.0-058000", "rdma-core": "2507mlnx58-1.2507097"})
	cfg := gcpB200Config()
	got := NewNode(NewSysroot(root), cfg).Facts()
	want := map[string]string{
		"kernel": "6.14.0", "doca-ofed": "3.0.0", "ib.link-layer": "Ethernet", "ib.driver": "mlx5_core",
		"ib.name-prefix": "mlx5", "gdrdrv": "absent", "peermem": "nvidia_peermem",
		"regkey.PeerMappingOverride": "1", "regkey.EnableStreamMemOPs": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}

	// a capture holds the facts, and only the package's stanza of the dpkg database
	b := capture(t, NewSysroot(root), cfg)
	dir := t.TempDir()
	if err := ExtractCapture(bytes.NewReader(b), dir); err != nil {
		t.Fatal(err)
	}
	if again := NewNode(NewSysroot(dir), cfg).Facts(); !maps.Equal(again, got) {
		t.Errorf("facts from the capture:\n%v\nfrom the node:\n%v", again, got)
	}
	if h := listCapture(t, b)["var/lib/dpkg/status"]; h == nil || h.Size > 200 {
		t.Errorf("the capture's dpkg status: %+v", h)
	}

	// GCP's own names, and an EFA node
	rocep := hostfixture.GCPB200With(t, hostfixture.NodeOpts{NICName: hostfixture.RoCEName})
	cfg.HCAPrefix = ""
	if f := NewNode(NewSysroot(rocep), cfg).Facts(); f["ib.name-prefix"] != "rocep" || f["peermem"] != "none" || hasKey(f, "kernel") || hasKey(f, "doca-ofed") {
		t.Errorf("rocep node: %v", f)
	}
	if f := NewNode(NewSysroot(hostfixture.AWSP5(t)), awsP5Config()).Facts(); f["ib.driver"] != "efa" || f["ib.link-layer"] != "Unknown" || f["gdrdrv"] != "loaded" {
		t.Errorf("p5 node: %v", f)
	}
	// a package that is only configured, not installed, has no version
	g := hostfixture.New(t)
	g.Write("/var/lib/dpkg/status", "Package: doca-ofed\nStatus: deinstall ok config-files\nVersion: 3.2.1-044000\n\n")
	if f := NewNode(NewSysroot(g.Root()), Config{Transport: TransportNone}).Facts(); f["doca-ofed"] != "none" {
		t.Errorf("a removed package: %v", f)
	}
}

func hasKey(m map[string]string, k string) bool {
	_, ok := m[k]
	return ok
}
