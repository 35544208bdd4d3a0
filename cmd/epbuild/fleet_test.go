package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/embedded"
)

// Reports written by verify-install --json on three installs, one of which lost the
// demo's PR #466 patch: fleet report names that node, and only it.
func TestFleetReportCLI(t *testing.T) {
	art := demoArtifact(t)
	env := nodeEnv()
	reports := t.TempDir()
	for _, node := range []string{"gpu-a", "gpu-b", "gpu-c"} {
		prefix := filepath.Join(t.TempDir(), node, "opt", "deepep")
		if code, out, errs := run(t, env, "install", art, "--prefix", prefix); code != 0 {
			t.Fatalf("install: exit %d\n%s\n%s", code, out, errs)
		}
		if node == "gpu-b" {
			src, err := embedded.Files("demo", "pydemo")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(prefix, "pydemo", "python", "pydemo", "channel.py"), src["pydemo/channel.py"], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		// each node names itself in its report, as on a cluster
		_, out, _ := run(t, nodeEnv("EPBUILD_HOSTNAME", node), "verify-install", "--prefix", prefix, "--json")
		if err := os.WriteFile(filepath.Join(reports, node+".json"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	code, out, errs := run(t, env, "fleet", "report", reports)
	if code != 1 || !strings.Contains(out, "DIFFER: gpu-b\n") || !strings.Contains(out, "gpu-b  check effect.demo-py-lanes.") ||
		!strings.Contains(out, "epbuild install "+filepath.Base(art)) {
		t.Errorf("fleet report: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, _ = run(t, env, "fleet", "report", filepath.Join(reports, "gpu-a.json"), filepath.Join(reports, "gpu-b.json"), filepath.Join(reports, "gpu-c.json"), "--json")
	var rep struct {
		OK  bool     `json:"ok"`
		Odd []string `json:"odd"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || rep.OK || !slices.Equal(rep.Odd, []string{"gpu-b"}) {
		t.Errorf("fleet report --json: exit %d, %+v (%v)\n%s", code, rep, err, out)
	}
	if code, out, _ := run(t, env, "fleet", "report", filepath.Join(reports, "gpu-a.json"), filepath.Join(reports, "gpu-c.json")); code != 0 || !strings.Contains(out, "OK: the nodes agree") {
		t.Errorf("two agreeing nodes: exit %d\n%s", code, out)
	}
	broken := filepath.Join(t.TempDir(), "gpu-d.json")
	if err := os.WriteFile(broken, []byte("{\"checks\": [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, env, "fleet", "report", reports, broken); code != 2 || !strings.Contains(errs, broken+":") {
		t.Errorf("a broken report: exit %d\n%s", code, errs)
	}
	if code, _, _ := run(t, env, "fleet", "report"); code != 2 {
		t.Errorf("no reports: exit %d", code)
	}
}
