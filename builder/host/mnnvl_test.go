package host

import (
	"bytes"
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// gb200Config is what hybrid-ep's GB200/GB300 variant asks of a node: one NVLink domain
// across nodes, 4 GPUs a node, no NIC.
func gb200Config() Config {
	return Config{Recipe: "hybrid-ep", Transport: TransportNone, GIDIndex: -1, GPUsPerNode: 4, MNNVL: true}
}

// A GB200 node with everything passes the NVL72 checks; the same node without its IMEX
// channel fails with the mknod that creates it (the major read from /proc/devices), and
// its capture fails the same way.
func TestGB200NodeChecks(t *testing.T) {
	t.Parallel()
	rep := Run(context.Background(), sysroot.New(hostfixture.GB200(t)), gb200Config())
	wantStatuses(t, rep, map[string]check.Status{
		"host.gpus": check.Pass, "host.ib.devices": check.Skip, "host.ib.port-state": check.Skip, "host.ib.link-layer": check.Skip,
		"host.pcie.gpu-nic-pairing": check.Skip, "host.gdrdrv": check.Skip, "host.memlock": check.Pass, "host.nccl.version": check.Skip,
		"host.gpu.free-memory": check.Skip, "host.jit.nvcc": check.Skip, "host.hostnames": check.Skip,
		"host.machine": check.Skip, "host.gpus.per-node": check.Pass, "host.mnnvl.imex": check.Pass, "host.mnnvl.fabric": check.Pass,
	})
	if c := mustCheck(t, rep, "host.mnnvl.imex"); c.Read != "/dev/nvidia-caps-imex-channels: channel0" {
		t.Errorf("imex: %q", c.Read)
	}
	if c := mustCheck(t, rep, "host.mnnvl.fabric"); !strings.Contains(c.Read, "4 GPUs registered") || !strings.Contains(c.Read, hostfixture.GB200Fabric.ClusterUUID) {
		t.Errorf("fabric: %q", c.Read)
	}
	if c := mustCheck(t, rep, "host.gpus"); !strings.HasPrefix(c.Read, "4 GPUs: 0008:01:00.0,0009:01:00.0,0018:01:00.0,0019:01:00.0") {
		t.Errorf("GB200 GPUs: %q", c.Read)
	}

	root := hostfixture.GB200With(t, hostfixture.GB200Opts{})
	rep = Run(context.Background(), sysroot.New(root), gb200Config())
	c := mustCheck(t, rep, "host.mnnvl.imex")
	if c.Status != check.Fail || !strings.Contains(c.Read, "no channel<N>") || !strings.Contains(c.Read, "major 234") ||
		!strings.Contains(c.Fix, "mknod /dev/nvidia-caps-imex-channels/channel0 c 234 0") || !strings.Contains(c.Fix, "nvidia-imex service") ||
		!strings.Contains(c.Fix, "NVIDIA_IMEX_CHANNELS=0") {
		t.Errorf("no IMEX channel: %+v", c)
	}
	b := capture(t, sysroot.New(root), gb200Config())
	dir := t.TempDir()
	if err := sysroot.Extract(bytes.NewReader(b), dir); err != nil {
		t.Fatal(err)
	}
	if got := Run(context.Background(), sysroot.New(dir), gb200Config()); !reflect.DeepEqual(got, rep) {
		t.Errorf("from the capture:\n%+v\nfrom the fixture:\n%+v", got, rep)
	}
	if h := listCapture(t, b)["proc/devices"]; h == nil {
		t.Error("the capture lacks /proc/devices, which the fix reads")
	}

	// a capture taken without the recipe answers its checks the same way
	b = capture(t, sysroot.New(root), Config{Transport: TransportNone, GIDIndex: -1})
	dir = t.TempDir()
	if err := sysroot.Extract(bytes.NewReader(b), dir); err != nil {
		t.Fatal(err)
	}
	if got := Run(context.Background(), sysroot.New(dir), gb200Config()); !reflect.DeepEqual(got, rep) {
		t.Errorf("from a capture taken without the recipe:\n%+v\nfrom the fixture:\n%+v", got, rep)
	}

	// a recipe that stays on one node asks none of it
	cfg := gb200Config()
	cfg.MNNVL, cfg.GPUsPerNode = false, 0
	rep = Run(context.Background(), sysroot.New(root), cfg)
	for _, id := range []string{"host.gpus.per-node", "host.mnnvl.imex", "host.mnnvl.fabric"} {
		if c := mustCheck(t, rep, id); c.Status != check.Skip {
			t.Errorf("%s without runtime.mnnvl or gpus-per-node: %+v", id, c)
		}
	}
}

// The node's GPUs against runtime.gpus-per-node: fewer fail, more warn, and only the
// GPUs the job sees (CUDA_VISIBLE_DEVICES) count.
func TestGPUsPerNode(t *testing.T) {
	t.Parallel()
	gb200, b200 := hostfixture.GB200(t), hostfixture.GCPB200(t)
	for _, tc := range []struct {
		name, root string
		want       uint32
		env        map[string]string
		status     check.Status
		text       string
	}{
		{"GB200 for 4", gb200, 4, nil, check.Pass, "4 GPUs in /sys/bus/pci/devices; runtime.gpus-per-node 4"},
		{"GB200 for 8", gb200, 8, nil, check.Fail, "--set runtime.gpus-per-node=4"},
		{"B200 for 4", b200, 4, nil, check.Warn, "the job uses 4 of the 8 GPUs"},
		{"B200 with 4 visible", b200, 4, map[string]string{"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, check.Pass, "4 of them visible"},
		{"GB200 with 2 visible", gb200, 4, map[string]string{"CUDA_VISIBLE_DEVICES": "0,1"}, check.Fail, "run on nodes with 4 GPUs"},
	} {
		cfg := gb200Config()
		cfg.GPUsPerNode, cfg.Env = tc.want, tc.env
		c := mustCheck(t, Run(context.Background(), sysroot.New(tc.root), cfg), "host.gpus.per-node")
		if c.Status != tc.status || !strings.Contains(c.Read+" "+c.Fix, tc.text) {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}

// GPUs that did not register with the NVLink fabric (an NVL72 node whose fabric is not up,
// or a node of no such rack), or that name two clusters, fail; nvidia-smi missing warns.
func TestMNNVLFabric(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fabric func(i int) hostfixture.Fabric
		status check.Status
		text   string
	}{
		{"one GPU in progress", func(i int) hostfixture.Fabric {
			if i == 2 {
				return hostfixture.Fabric{State: "In Progress", Status: "N/A", CliqueID: "N/A", ClusterUUID: "N/A"}
			}
			return hostfixture.GB200Fabric
		}, check.Fail, "GPU 2: State In Progress, Status N/A"},
		{"no fabric", func(int) hostfixture.Fabric { return hostfixture.NoFabric }, check.Fail, "GPU 0: State N/A"},
		{"a zero cluster", func(int) hostfixture.Fabric {
			return hostfixture.Fabric{State: "Completed", Status: "Success", CliqueID: "0", ClusterUUID: "00000000-0000-0000-0000-000000000000"}
		}, check.Fail, "ClusterUUID 00000000-0000"},
		{"two clusters", func(i int) hostfixture.Fabric {
			f := hostfixture.GB200Fabric
			if i == 3 {
				f.ClusterUUID = "7b1c0e55-0d6f-4f3e-a2d4-6a9c3b1e8f20"
			}
			return f
		}, check.Fail, "the GPUs name 2 clusters"},
	} {
		root := hostfixture.GB200With(t, hostfixture.GB200Opts{IMEXChannel: true, Fabric: tc.fabric})
		c := mustCheck(t, Run(context.Background(), sysroot.New(root), gb200Config()), "host.mnnvl.fabric")
		if c.Status != tc.status || !strings.Contains(c.Read, tc.text) {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
	root := hostfixture.GB200(t)
	if err := removeAll(hostfixture.At(t, root).Disk(hostfixture.CommandFile("nvidia-smi", "-q"))); err != nil {
		t.Fatal(err)
	}
	if c := mustCheck(t, Run(context.Background(), sysroot.New(root), gb200Config()), "host.mnnvl.fabric"); c.Status != check.Warn || !strings.Contains(c.Read, "nvidia-smi -q") {
		t.Errorf("no nvidia-smi output: %+v", c)
	}
}

// The node's machine, read from the NVIDIA driver's version file (the open modules' line on
// the GB200 node, the proprietary one on an x86_64 node), against the install's: an x86_64
// build on a Grace node fails saying where to build; the same machine passes; an unknown
// build machine, or a node without the driver's file, is skipped.
func TestHostMachine(t *testing.T) {
	t.Parallel()
	gb200 := hostfixture.GB200(t)
	x86 := hostfixture.New(t)
	x86.NvidiaVersion(false)
	for _, tc := range []struct {
		name, root string
		machines   []string
		status     check.Status
		text       string
	}{
		{"x86_64 install on GB200", gb200, []string{"x86_64"}, check.Fail, "Grace node of the GB200/GB300 rack (--set toolchain.host-arch=aarch64)"},
		{"aarch64 install on GB200", gb200, []string{"aarch64"}, check.Pass, "NVIDIA driver for aarch64 (/proc/driver/nvidia/version); built for aarch64"},
		{"aarch64 recipe on x86_64", x86.Root(), []string{"aarch64"}, check.Fail, "build on a x86_64 host"},
		{"either on x86_64", x86.Root(), []string{"x86_64", "aarch64"}, check.Pass, "NVIDIA driver for x86_64"},
		{"unknown build machine", gb200, nil, check.Skip, "not known"},
		{"no driver", hostfixture.New(t).Root(), []string{"x86_64"}, check.Skip, "/proc/driver/nvidia/version"},
	} {
		cfg := gb200Config()
		cfg.Machines = tc.machines
		c := mustCheck(t, Run(context.Background(), sysroot.New(tc.root), cfg), "host.machine")
		if c.Status != tc.status || !strings.Contains(c.Read+" "+c.Fix, tc.text) {
			t.Errorf("%s: %+v", tc.name, c)
		}
	}
}
