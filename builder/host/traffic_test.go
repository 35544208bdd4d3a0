package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// addCounter adds n to a counter file the way the NIC would, through the class symlink.
func addCounter(t *testing.T, root, dev, rel string, n uint64) {
	t.Helper()
	f := hostfixture.At(t, root)
	p := f.Disk(fmt.Sprintf("/sys/class/infiniband/%s/ports/1/%s", dev, rel))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strconv.FormatUint(v+n, 10)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

const xmit = "counters/port_xmit_data"

func TestTrafficSpread(t *testing.T) {
	t.Parallel()
	root := hostfixture.GCPB200(t)
	sys := sysroot.New(root)
	ctx := context.Background()
	sample := func(per func(i int) uint64) TrafficReport {
		t.Helper()
		rep, err := SampleTraffic(ctx, sys, func(context.Context) error {
			for i := 0; i < 8; i++ {
				addCounter(t, root, fmt.Sprintf("mlx5_%d", i), xmit, per(i))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}

	// The field failure: every GPU on mlx5_0.
	rep := sample(func(i int) uint64 {
		if i == 0 {
			return 250_000_000
		}
		return 0
	})
	if rep.Check.Status != check.Fail || rep.Check.ID != "host.traffic.spread" || !strings.Contains(rep.Check.Fix, "_setup_device_hca_mapping") {
		t.Errorf("all on mlx5_0: %+v", rep.Check)
	}
	if rep.TotalBytes != 1_000_000_000 || rep.NICs[0].Bytes != 1_000_000_000 || rep.NICs[0].UnitBytes != 4 || rep.NICs[0].Share != 1 {
		t.Errorf("port_xmit_data counts 4-byte units: %+v", rep.NICs[0])
	}

	// Even spread.
	rep = sample(func(int) uint64 { return 1000 })
	if rep.Check.Status != check.Pass || rep.TotalBytes != 32000 || len(rep.NICs) != 8 {
		t.Errorf("even: %+v total %d", rep.Check, rep.TotalBytes)
	}

	// Uneven but not dominated: mlx5_0 has 30% where 12.5% is fair.
	rep = sample(func(i int) uint64 {
		if i == 0 {
			return 3000
		}
		return 1000
	})
	if rep.Check.Status != check.Warn {
		t.Errorf("uneven: %+v", rep.Check)
	}

	// Nothing moved over RDMA.
	if rep = sample(func(int) uint64 { return 0 }); rep.Check.Status != check.Warn || rep.TotalBytes != 0 {
		t.Errorf("idle: %+v", rep.Check)
	}

	// A run that fails still reports, and the error says what failed.
	boom := errors.New("dispatch timed out")
	rep, err := SampleTraffic(ctx, sys, func(context.Context) error {
		addCounter(t, root, "mlx5_1", xmit, 10)
		return boom
	})
	if !errors.Is(err, boom) || rep.TotalBytes != 40 {
		t.Errorf("failed run: err %v, total %d", err, rep.TotalBytes)
	}

	// A counter reset during the run is noted, not counted as a huge transfer.
	rep, err = SampleTraffic(ctx, sys, func(context.Context) error {
		f := hostfixture.At(t, root)
		f.Write("/sys/class/infiniband/mlx5_2/ports/1/counters/port_xmit_data", "0\n")
		for i := 0; i < 8; i++ {
			addCounter(t, root, fmt.Sprintf("mlx5_%d", i), xmit, 500)
		}
		return nil
	})
	if err != nil || rep.Check.Status != check.Warn || !strings.Contains(rep.Check.Read, "went backwards") || rep.TotalBytes != 7*2000 {
		t.Errorf("reset: err %v %+v total %d", err, rep.Check, rep.TotalBytes)
	}
}

func TestTrafficOnEFAUsesTxBytes(t *testing.T) {
	t.Parallel()
	root := hostfixture.AWSP5(t)
	rep, err := SampleTraffic(context.Background(), sysroot.New(root), func(context.Context) error {
		for _, d := range []string{"rdmap4s0", "rdmap5s0", "rdmap6s0", "rdmap7s0"} {
			addCounter(t, root, d, "hw_counters/tx_bytes", 1000)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.NICs) != 32 || rep.TotalBytes != 4000 || rep.NICs[0].UnitBytes != 1 {
		t.Errorf("%d NICs, total %d, unit %d", len(rep.NICs), rep.TotalBytes, rep.NICs[0].UnitBytes)
	}
	// 4 of 32 EFAs carry everything: each has 25% where 3.1% is fair.
	if rep.Check.Status != check.Warn {
		t.Errorf("%+v", rep.Check)
	}
}

func TestTrafficWithOneNICIsNotJudged(t *testing.T) {
	t.Parallel()
	f := hostfixture.New(t)
	sw := f.PCIeSwitch(0, 0)
	nic := sw.Endpoint()
	f.PCI(nic, "0x15b3", "0x020000", 0, "mlx5_core")
	f.IBDevice("mlx5_0", nic, "mlx5_core", hostfixture.ActiveRoCE([4]byte{10, 0, 0, 1}))
	rep, err := SampleTraffic(context.Background(), sysroot.New(f.Root()), func(context.Context) error {
		addCounter(t, f.Root(), "mlx5_0", xmit, 5)
		return nil
	})
	if err != nil || rep.Check.Status != check.Skip || rep.TotalBytes != 20 {
		t.Errorf("err %v, %+v, total %d", err, rep.Check, rep.TotalBytes)
	}
}
