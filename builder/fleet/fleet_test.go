package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/builder/verify"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/embedded"
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/recipes"
)

// installs are the demo artifact installed twice, once as built and once with the
// field failure: an unpatched pydemo/channel.py (the demo's PR #466) over the install.
var installs struct {
	once          sync.Once
	dir           string
	good, missing string
	err           error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if installs.dir != "" {
		_ = os.RemoveAll(installs.dir)
	}
	os.Exit(code)
}

func demoInstalls(t *testing.T) (good, missing string) {
	t.Helper()
	installs.once.Do(func() {
		installs.dir, installs.err = os.MkdirTemp("", "epbuild-fleet-test-")
		if installs.err == nil {
			installs.good, installs.missing, installs.err = installDemo(installs.dir)
		}
	})
	if installs.err != nil {
		t.Fatalf("install the demo: %v", installs.err)
	}
	return installs.good, installs.missing
}

func installDemo(dir string) (string, string, error) {
	ctx := context.Background()
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		return "", "", err
	}
	p, err := res.Resolve("demo", nil)
	if err != nil {
		return "", "", err
	}
	c, err := cache.Open(filepath.Join(dir, "cache"))
	if err != nil {
		return "", "", err
	}
	l := log.New(io.Discard)
	src, err := stage.NewSources(c, "", l, source.ProgressOff)
	if err != nil {
		return "", "", err
	}
	st, err := store.OpenStore(c.Dir())
	if err != nil {
		return "", "", err
	}
	tc := (&toolchain.Prober{Getenv: os.Getenv}).Probe(ctx)
	r := &stage.Runner{Store: st, Sources: src, Log: l, Toolchain: tc, Environ: os.Environ(), OutDir: filepath.Join(dir, "out"), Version: "test"}
	out, err := r.Run(ctx, p)
	if err != nil {
		return "", "", err
	}
	var prefixes []string
	for _, name := range []string{"good", "missing"} {
		prefix := filepath.Join(dir, name, "opt", "deepep")
		if _, err := install.Install(ctx, install.InstallOptions{Artifact: out.Artifact, Prefix: prefix, Version: "test"}); err != nil {
			return "", "", err
		}
		prefixes = append(prefixes, prefix)
	}
	orig, err := embedded.Files("demo", "pydemo")
	if err != nil {
		return "", "", err
	}
	if err := os.WriteFile(filepath.Join(prefixes[1], "pydemo", "python", "pydemo", "channel.py"), orig["pydemo/channel.py"], 0o644); err != nil {
		return "", "", err
	}
	return prefixes[0], prefixes[1], nil
}

// nodeJSON is what verify-install --json prints, with the fields newer reports add.
type nodeJSON struct {
	OK             bool   `json:"ok"`
	Hostname       string `json:"hostname,omitempty"`
	SchemaVersion  int    `json:"schema_version,omitempty"`
	EpbuildVersion string `json:"epbuild_version,omitempty"`
	*verify.VerifyReport
}

// verifyNode runs the real verify-install (files, recipe checks, host checks on the
// root) and writes its JSON report to dir/file.
func verifyNode(t *testing.T, dir, file, hostname, prefix, root string) {
	t.Helper()
	rep, err := verify.Verify(context.Background(), verify.VerifyOptions{Prefix: prefix, Host: true, Sysroot: sysroot.New(root)})
	if err != nil {
		t.Fatal(err)
	}
	// the demo uses no NIC, so its host.memlock is skipped (scoped to the recipe); a
	// recipe that runs RDMA gets this row on nodes with the default 8 MiB limit, the
	// same on every node: it stands for a failure the whole fleet shares
	for i, c := range rep.Checks {
		if c.ID == "host.memlock" {
			rep.Checks[i].Status, rep.Checks[i].Found, rep.Checks[i].Fix = check.Fail, "8388608 bytes", "raise the locked-memory limit: ulimit -l unlimited (limits.conf memlock, or the job scheduler's)"
		}
	}
	nj := nodeJSON{OK: !rep.Failed(), VerifyReport: rep}
	if hostname != "" {
		nj.Hostname, nj.SchemaVersion, nj.EpbuildVersion = hostname, 1, "test"
	}
	b, err := json.MarshalIndent(nj, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func mlx5(i int) string { return fmt.Sprintf("mlx5_%d", i) }

// Five nodes; node03's NICs are named in another order than its slots (its PCIe tree
// pairs GPU 0 with mlx5_1, ...), node04's install lacks the demo's PR #466 patch. The
// report names exactly those two, each with a fix.
func TestFleetNamesTheOddNodes(t *testing.T) {
	good, missing := demoInstalls(t)
	normal := writeNode(t, mlx5)
	rotated := writeNode(t, func(i int) string { return mlx5((i + 1) % 4) })
	dir := t.TempDir()
	verifyNode(t, dir, "node01.json", "node01", good, normal)
	verifyNode(t, dir, "node02.json", "", good, normal) // an older report: named by its file
	verifyNode(t, dir, "node03.json", "node03", good, rotated)
	verifyNode(t, dir, "node04.json", "node04", missing, normal)
	verifyNode(t, dir, "node05.json", "node05", good, normal)

	nodes, err := Load([]string{dir}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name)
	}
	if !slices.Equal(names, []string{"node01", "node02", "node03", "node04", "node05"}) || nodes[1].Hostname != "" || nodes[0].SchemaVersion != "1" {
		t.Fatalf("nodes %v (node02 hostname %q, node01 schema %q)", names, nodes[1].Hostname, nodes[0].SchemaVersion)
	}
	rep := Compare(nodes, Options{})
	if odd := rep.Odd(); !slices.Equal(odd, []string{"node03", "node04"}) {
		t.Errorf("odd nodes %v, want node03 and node04; differences:\n%s", odd, dump(rep))
	}
	byNode := map[string][]Difference{}
	for _, d := range rep.Differences {
		byNode[d.Node] = append(byNode[d.Node], d)
		if d.Fix == "" {
			t.Errorf("%s %s has no fix", d.Node, d.What)
		}
	}
	if d := byNode["node03"]; len(d) != 1 || d[0].What != "nic-mapping" || d[0].Found != "0:mlx5_1:1,1:mlx5_2:1,2:mlx5_3:1,3:mlx5_0:1" ||
		d[0].Fleet != "0:mlx5_0:1,1:mlx5_1:1,2:mlx5_2:1,3:mlx5_3:1" || d[0].Of != 4 || !strings.Contains(d[0].Fix, "DEEP_EP_DEVICE_TO_HCA_MAPPING=0:mlx5_1:1,") {
		t.Errorf("node03: %+v", d)
	}
	whats := map[string]bool{}
	for _, d := range byNode["node04"] {
		whats[d.What] = true
		if strings.HasPrefix(d.What, "check effect.") && (d.Fleet != "pass" || !strings.HasPrefix(d.Found, "fail") || !strings.Contains(d.Fix, "reinstall")) {
			t.Errorf("node04 %s: %+v", d.What, d)
		}
	}
	for _, w := range []string{"check files", "check files.changed:pydemo/python/pydemo/channel.py", "check effect.demo-py-lanes.0", "check effect.demo-py-lanes.1"} {
		if !whats[w] {
			t.Errorf("node04 lacks %q among %v", w, whats)
		}
	}
	if whats["install"] || whats["nic-mapping"] {
		t.Errorf("node04 has the fleet's plan and NICs, yet: %v", whats)
	}
	if rep.OK() {
		t.Error("a fleet with two odd nodes is OK")
	}
	// every node's locked-memory limit is too low for RDMA: no difference, but listed with
	// its fix
	i := slices.IndexFunc(rep.FailEverywhere, func(f FleetFailure) bool { return f.ID == "host.memlock" })
	if i < 0 || !strings.Contains(rep.FailEverywhere[i].Fix, "ulimit -l unlimited") || len(rep.Failing) != 5 {
		t.Errorf("fail everywhere %+v, failing %v", rep.FailEverywhere, rep.Failing)
	}
}

func dump(r *Report) string {
	var b strings.Builder
	for _, d := range r.Differences {
		fmt.Fprintf(&b, "  %s %s: %s (fleet %s)\n", d.Node, d.What, d.Found, d.Fleet)
	}
	return b.String()
}

// The facets that need a GPU node (NVSHMEM loaded in the process, NCCL at run time)
// are compared the same way: reports made from the real types, one node changed.
func TestFleetNCCLAndNVSHMEM(t *testing.T) {
	base := func(nccl, nvshmem string) verify.VerifyReport {
		return verify.VerifyReport{Prefix: "/opt/deepep", Recipe: "gcp-b200", PlanKey: strings.Repeat("ab", 32), Artifact: "gcp-b200-abababababab.tar.zst",
			Checks: []verify.VerifyCheck{
				{ID: "process.single-nvshmem", Status: "pass", Read: "/proc/self/maps", Found: nvshmem},
				{ID: "host.nccl.version", Status: "pass", Read: nccl},
			}}
	}
	ok := base("NCCL runtime 2.27.3, built against 2.27.3-1", "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3")
	nodes := []Node{{Name: "a", Report: ok}, {Name: "b", Report: ok}, {Name: "c", Report: ok},
		{Name: "d", Report: base("NCCL runtime 2.21.5, built against 2.27.3-1", "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3")},
		{Name: "e", Report: base("NCCL runtime 2.27.3, built against 2.27.3-1", "/usr/lib/python3/dist-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3")}}
	rep := Compare(nodes, Options{})
	var got []string
	for _, d := range rep.Differences {
		got = append(got, d.Node+" "+d.What)
	}
	if !slices.Equal(got, []string{"d nccl", "e nvshmem"}) {
		t.Errorf("differences %q", got)
	}
	// a plan that differs is an install difference, with the fleet's artifact in the fix
	other := ok
	other.PlanKey = strings.Repeat("cd", 32)
	nodes[2].Report = other
	// the fix is a command to paste: the artifact by its absolute path, each word quoted
	installs := 0
	for _, d := range Compare(nodes, Options{ArtifactDir: "/srv/deep ep"}).Differences {
		if d.What == "install" {
			installs++
			if d.Node != "c" || !strings.Contains(d.Fix, "epbuild install '/srv/deep ep/gcp-b200-abababababab.tar.zst' --prefix /opt/deepep") {
				t.Errorf("install difference %+v", d)
			}
		}
	}
	// where the artifact lies is not known: no bare name as if it were here
	for _, d := range Compare(nodes, Options{}).Differences {
		if d.What == "install" {
			installs++
			if strings.Contains(d.Fix, "epbuild install gcp-b200") || !strings.Contains(d.Fix, "--artifacts DIR") {
				t.Errorf("install difference without the artifacts' directory: %+v", d)
			}
		}
	}
	if installs != 2 {
		t.Errorf("%d install differences, want 2", installs)
	}
	// an even split has no majority: every side is listed
	tie := Compare([]Node{{Name: "a", Report: ok}, {Name: "b", Report: base("NCCL runtime 2.21.5, built against 2.27.3-1", "/opt/deepep/nvshmem/lib/libnvshmem_host.so.3")}}, Options{})
	if len(tie.Differences) != 2 || tie.Differences[0].Fleet != "no majority" {
		t.Errorf("a tie: %+v", tie.Differences)
	}
}

func TestLoadRefusesWhatIsNotAReport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		file, content, says string
	}{
		{"broken.json", "{\n  \"checks\": [\n    {\"id\": \"files\",, }\n", "broken.json:3:"},
		{"empty.json", `{"ok": true, "checks": []}`, "not a verify-install --json report"},
		{"noid.json", `{"checks": [{"status": "pass"}]}`, "check 1 has no id"},
		{"list.json", `{"checks": {"id": "files"}}`, `"checks" is not a list`},
		{"trailing.json", `{"checks": [{"id": "files", "status": "pass"}]} {}`, "trailing.json:1:"},
	} {
		good := write("good.json", `{"hostname": "good", "checks": [{"id": "files", "status": "pass"}]}`)
		nodes, err := Load([]string{good, write(tc.file, tc.content)}, LoadOptions{})
		if err != nil || len(nodes) != 2 || nodes[1].Problem == "" || nodes[0].Problem != "" {
			t.Errorf("%s: %v %+v", tc.file, err, nodes)
			continue
		}
		// the unreadable report is a failing row; the other is still compared
		rep := Compare(nodes, Options{})
		if rep.OK() || len(rep.Differences) != 1 || rep.Differences[0].What != "report" || !strings.Contains(rep.Differences[0].Fix, tc.says) ||
			len(rep.Nodes) != 2 || rep.Nodes[1].Problem == "" {
			t.Errorf("%s: %+v", tc.file, rep)
		}
		os.Remove(filepath.Join(dir, tc.file))
	}
	if _, err := Load([]string{t.TempDir()}, LoadOptions{}); err == nil || !strings.Contains(err.Error(), "no *.json reports") {
		t.Errorf("an empty directory: %v", err)
	}
	if _, err := Load([]string{filepath.Join(dir, "nothere.json")}, LoadOptions{}); err == nil || err.(*InputError).ExitCode() != 2 {
		t.Errorf("a path that does not exist: %v", err)
	}
	// two reports from one hostname
	rep := `{"hostname": "gpu7", "checks": [{"id": "files", "status": "pass", "read": "x"}]}`
	nodes, err := Load([]string{write("a.json", rep), write("b.json", rep)}, LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	diffs := Compare(nodes, Options{}).Differences
	if len(diffs) != 1 || diffs[0].What != "hostname" || !strings.Contains(diffs[0].Found, "a.json") {
		t.Errorf("a duplicate hostname: %+v", diffs)
	}
}
