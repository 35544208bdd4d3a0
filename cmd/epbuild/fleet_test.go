package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/embedded"
	"github.com/epbuild/epbuild/builder/quote"
)

// Reports written by verify-install --json on three installs, one of which lost the
// demo's PR #466 patch: fleet report names that node, and only it.
func TestFleetReportCLI(t *testing.T) {
	env := nodeEnv()
	reports := t.TempDir()
	for _, node := range []string{"gpu-a", "gpu-b", "gpu-c"} {
		prefix := pristineInstall(t) // the same prefix on every node, as on a cluster
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
	if code != 1 || !strings.Contains(out, "DIFFER: gpu-b\n") || !strings.Contains(out, "gpu-b  check effect.demo-py-lanes.") {
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
	// a report that cannot be read is a failing row naming it; the others are compared
	if code, out, errs := run(t, env, "fleet", "report", reports, broken); code != 1 || !strings.Contains(out, "gpu-d  report") ||
		!strings.Contains(out, "gpu-d:\n    - "+broken+":1:13: not JSON: unexpected EOF") || !strings.Contains(out, "DIFFER: gpu-b, gpu-d\n") {
		t.Errorf("a broken report: exit %d\n%s\n%s", code, out, errs)
	}
	if code, _, _ := run(t, env, "fleet", "report"); code != 2 {
		t.Errorf("no reports: exit %d", code)
	}
}

// writeReports writes synthetic verify-install reports, one a node, and returns their
// directory.
func writeReports(t *testing.T, reports map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range reports {
		if err := os.WriteFile(filepath.Join(dir, name+".json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func fleetReport(host, status, fix string) string {
	b, _ := json.Marshal(map[string]any{"ok": status == "pass", "hostname": host, "prefix": "/opt/deepep", "recipe": "demo",
		"plan_key": strings.Repeat("ab", 32), "artifact": "demo-abababababab.tar.zst",
		"checks": []map[string]string{{"id": "files", "status": status, "read": "/opt/deepep/manifest.json", "found": fix, "fix": fix}}})
	return string(b)
}

// Hostnames and check texts from reports reach the terminal escaped: no title, clear
// screen, colour, hyperlink, cursor movement, carriage return or line of their own (a
// forged verdict). --json carries them whole, JSON-escaped (control characters, U+2028).
func TestFleetReportEscapesReports(t *testing.T) {
	payloads := []string{
		"\x1b]0;owned\x07",   // window title
		"\x1b[2J\x1b[H",      // clear screen
		"\x1b[31mred\x1b[0m", // colour
		"\x1b]8;;http://evil.example/\x07x\x1b]8;;\x07", // hyperlink
		"\x1b[1A\x1b[2K",             // cursor up, erase line
		"x\r\nOK: the nodes agree\n", // a forged verdict
		"a\u2028b\u202ec\u009b1A",    // line separator, bidi override, C1 CSI
	}
	reports := map[string]string{}
	for i := range 8 { // the majority: the hostile nodes are the ones that differ
		reports[fmt.Sprintf("n%d", i)] = fleetReport(fmt.Sprintf("n%d", i), "pass", "")
	}
	for i, p := range payloads {
		reports[fmt.Sprintf("evil%d", i)] = fleetReport("evil"+p, "fail", "run "+p)
	}
	dir := writeReports(t, reports)
	code, out, errs := run(t, nodeEnv(), "fleet", "report", dir, "--artifacts", dir)
	if code != 1 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if i := strings.IndexAny(out, "\x1b\x07\r\u2028\u202e\u009b"); i >= 0 {
		t.Errorf("a control character reached the terminal at %d: %q", i, out[max(0, i-40):min(len(out), i+40)])
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "OK: the nodes agree") {
			t.Errorf("a forged line: %q\n%s", line, out)
		}
	}
	if !strings.Contains(out, `evilx\r\nOK: the nodes agree `) || !strings.Contains(out, `evil\x1b]0;owned\x07`) ||
		!strings.Contains(out, `- run \x1b[2J\x1b[H`) || !strings.Contains(out, "DIFFER: evil") {
		t.Errorf("the hostile names are not shown escaped:\n%s", out)
	}
	code, out, _ = run(t, nodeEnv(), "fleet", "report", dir, "--json")
	var rep struct {
		Nodes []struct{ Name string } `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || len(rep.Nodes) != len(reports) {
		t.Fatalf("--json: exit %d, %v\n%s", code, err, out)
	}
	names := map[string]bool{}
	for _, n := range rep.Nodes {
		names[n.Name] = true
	}
	for _, p := range payloads {
		if !names[strings.TrimSpace("evil"+p)] {
			t.Errorf("--json lost the name %q", "evil"+p)
		}
	}
	if strings.ContainsAny(out, "\x1b\x07\r\u2028\u2029") || !strings.Contains(out, `\u2028`) || !strings.Contains(out, `\u001b`) {
		t.Errorf("--json: raw control characters, or U+2028 not escaped")
	}
}

// The install fix is a command to paste: the artifact by its absolute path (--artifacts),
// each word shell-quoted, and it runs in sh as it reads.
func TestFleetInstallFixIsACommand(t *testing.T) {
	odd := `{"hostname": "n3", "prefix": "/opt/deep ep", "recipe": "demo", "plan_key": "` + strings.Repeat("cd", 32) +
		`", "artifact": "demo-cdcdcdcdcdcd.tar.zst", "checks": [{"id": "files", "status": "pass"}]}`
	dir := writeReports(t, map[string]string{"n1": fleetReport("n1", "pass", ""), "n2": fleetReport("n2", "pass", ""), "n3": odd})
	arts := filepath.Join(t.TempDir(), "it's here")
	_, out, _ := run(t, nodeEnv(), "fleet", "report", dir, "--artifacts", arts)
	want := "epbuild install " + quote.Shell(filepath.Join(arts, "demo-abababababab.tar.zst")) + " --prefix '/opt/deep ep'"
	if !strings.Contains(out, "\n      "+want+"\n") {
		t.Fatalf("no %q in\n%s", want, out)
	}
	// pasted into sh, it is that command with those words
	sh := exec.Command("sh", "-c", `epbuild() { printf '%s\n' "$@"; }; `+want)
	words, err := sh.Output()
	if err != nil || string(words) != "install\n"+filepath.Join(arts, "demo-abababababab.tar.zst")+"\n--prefix\n/opt/deep ep\n" {
		t.Errorf("sh runs %q: %q %v", want, words, err)
	}
	// without --artifacts, no bare file name that is not here
	_, out, _ = run(t, nodeEnv(), "fleet", "report", dir)
	if strings.Contains(out, "epbuild install demo-") || !strings.Contains(out, "--artifacts DIR") {
		t.Errorf("without --artifacts:\n%s", out)
	}
}

// The nodes that must have reported: --hosts FILE (kubectl's node/NAME lines too) or
// --slurm. A node without a report is a failing row, and the rest is still compared.
func TestFleetReportMissingNodes(t *testing.T) {
	dir := writeReports(t, map[string]string{"gpu01": fleetReport("gpu01", "pass", ""), "gpu02": fleetReport("gpu02", "pass", "")})
	hosts := filepath.Join(t.TempDir(), "nodes")
	if err := os.WriteFile(hosts, []byte("# kubectl get nodes -o name\nnode/gpu01\nnode/gpu02\nnode/gpu03\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--hosts", hosts}, {"--slurm"}} {
		env := nodeEnv("SLURM_JOB_NODELIST", "gpu[01-03]")
		code, out, errs := run(t, env, append([]string{"fleet", "report", dir}, args...)...)
		if code != 1 || !strings.Contains(out, "gpu03  report      no report from this node") || !strings.Contains(out, "DIFFER: gpu03\n") ||
			!strings.Contains(out, "fleet: 3 nodes") {
			t.Errorf("%v: exit %d\n%s\n%s", args, code, out, errs)
		}
	}
	if code, _, errs := run(t, nodeEnv(), "fleet", "report", dir, "--slurm"); code != 2 || !strings.Contains(errs, "SLURM_JOB_NODELIST is not set") {
		t.Errorf("--slurm outside a job: exit %d\n%s", code, errs)
	}
	if code, _, _ := run(t, nodeEnv(), "fleet", "report", dir, "--hosts", filepath.Join(dir, "none")); code != 2 {
		t.Errorf("a host list that does not exist: exit %d", code)
	}
	if code, out, _ := run(t, nodeEnv(), "fleet", "report", dir, "--hosts", hosts, "--max-report-bytes", "100"); code != 1 || !strings.Contains(out, "over the limit of 100 bytes") {
		t.Errorf("--max-report-bytes: exit %d\n%s", code, out)
	}
}
