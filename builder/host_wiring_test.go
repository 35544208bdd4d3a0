package builder

import (
	"github.com/epbuild/epbuild/builder/internal/fixture"

	"context"
	"github.com/epbuild/epbuild/builder/verify"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/hostfixture"
	"github.com/epbuild/epbuild/builder/host/sysroot"
)

// verify-install --host runs the node's checks and the host rules on the install's plan.
func TestVerifyHostWiring(t *testing.T) {
	prefix := freshInstall(t)
	root := hostfixture.GCPB200(t)
	hostfixture.At(t, root).Kernel("6.8.0-1015-gcp")
	rep, err := verify.Verify(context.Background(), verify.VerifyOptions{Prefix: prefix, Host: true, Sysroot: sysroot.New(root)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"host.gpus", "host.ib.devices", "host.nccl.version", "files", "process.single-nvshmem"} {
		fixture.Result(t, rep.Checks, id)
	}
	if rep.Facts["kernel"] != "6.8.0" || rep.Facts["ib.driver"] != "mlx5_core" || rep.MappingLine == "" {
		t.Errorf("facts %v, mapping %q", rep.Facts, rep.MappingLine)
	}
	for _, c := range rep.Checks {
		if strings.HasPrefix(c.ID, "rule.") && c.Status == check.Fail {
			t.Errorf("the demo recipe breaks a host rule: %+v", c)
		}
	}
}
