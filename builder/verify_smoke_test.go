package builder

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/epbuild/epbuild/builder/verify"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/smoke"
)

// smokeStandIn prints what epbuild-nvshmem-smoke prints when every step passes (its
// formats; the details of a real one-PE run on an H100), and leaves each rank's
// environment in $SMOKE_ENV_DIR.
const smokeStandIn = `#!/bin/sh
[ "$1" = --devices ] && { echo 1; exit 0; }
rank=$2 npes=$4
[ -n "$SMOKE_ENV_DIR" ] && env > "$SMOKE_ENV_DIR/rank$rank.env"
step() { printf 'STEP %d %s ok %.1f %s\n' "$rank" "$1" "$2" "$3"; }
step uid 0.4 "made and published (128 bytes)"
step init 783.2 "pe $rank of $npes on device 0"
step version 0 "loaded=3.4.5 built=3.4.5 lib=/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3"
step malloc 0.9 "2097156 bytes"
step barrier 0.1 "nvshmem_barrier_all"
step put 0.5 "262144 words and a flag to pe 0, received from pe 0"
step split 0.3 "team of 1 (start 0, stride 1)"
printf 'DONE %d 0\n' "$rank"
`

// verify-install --smoke finds the program in the install and runs it with the env the
// other checks use (the install's runtime env on a clean base) plus the caller's NVSHMEM
// settings; without --smoke nothing runs.
func TestVerifySmoke(t *testing.T) {
	prefix := freshInstall(t)
	if rep := mustVerify(t, prefix); rep.Smoke != nil || hasSmokeRow(rep) {
		t.Fatal("smoke rows without --smoke")
	}
	opts := verify.VerifyOptions{Prefix: prefix, Smoke: true, SmokePEs: 2, SmokeTimeout: time.Minute}
	rep, err := verify.Verify(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	// the demo's recipe has no smoke test: skipped, saying why, not failed
	if c, ok := rep.Check("smoke.run"); !ok || c.Status != "skip" || !strings.Contains(c.Found, "has no nvshmem-smoke component") || rep.Failed() {
		t.Errorf("an install whose recipe has no smoke test: %+v", c)
	}

	bin := filepath.Join(prefix, "libdemo", "bin", smoke.Binary)
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, []byte(smokeStandIn), 0o755); err != nil {
		t.Fatal(err)
	}
	pinFile(t, prefix, filepath.Join("libdemo", "bin", smoke.Binary))
	envDir := t.TempDir()
	opts.Environ = append(verify.CleanEnviron(os.Getenv), "SMOKE_ENV_DIR="+envDir)
	opts.JobEnv = []string{"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=lo", "DEMO_LANE_MAPPING=9:9", "PYTHONPATH=/elsewhere", "FOO=bar"}
	rep, err = verify.Verify(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, rep, map[string]string{"smoke.run": "pass", "smoke.uid": "pass", "smoke.init": "pass", "smoke.init-time": "pass",
		"smoke.version": "pass", "smoke.malloc": "pass", "smoke.barrier": "pass", "smoke.put": "pass", "smoke.split": "pass"})
	if rep.Smoke == nil || len(rep.Smoke.Ranks) != 2 || rep.Smoke.Binary != bin {
		t.Fatalf("report's smoke run: %+v", rep.Smoke)
	}
	if c, _ := rep.Check("smoke.run"); !strings.Contains(c.Read, "the install's runtime env (env.sh) and the caller's NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME") {
		t.Errorf("smoke.run read %q", c.Read)
	}
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(envDir, fmt.Sprintf("rank%d.env", rank)))
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, "="); ok {
				got[k] = v
			}
		}
		for k, want := range map[string]string{
			"NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": "lo",      // the caller's NVSHMEM setting
			"DEMO_LANE_MAPPING":                 "0:2,1:1", // the recipe's runtime env, not the caller's value of a non-NVSHMEM name
			"FOO":                               "",        // nothing else of the caller's
		} {
			if got[k] != want {
				t.Errorf("rank %d: %s=%q, want %q", rank, k, got[k], want)
			}
		}
		if !strings.HasPrefix(got["LD_LIBRARY_PATH"], filepath.Join(prefix, "libdemo", "lib")) ||
			!strings.HasPrefix(got["PYTHONPATH"], filepath.Join(prefix, "pydemo", "python")) || strings.Contains(got["PYTHONPATH"], "/elsewhere") {
			t.Errorf("rank %d: LD_LIBRARY_PATH %q, PYTHONPATH %q: not the install's", rank, got["LD_LIBRARY_PATH"], got["PYTHONPATH"])
		}
	}
}

func hasSmokeRow(rep *verify.VerifyReport) bool {
	for _, c := range rep.Checks {
		if strings.HasPrefix(c.ID, "smoke.") {
			return true
		}
	}
	return false
}

// pinFile adds a file planted in an install to its manifest and the receipt's pin of the
// manifest, as if the artifact had carried it: verify-install then runs the install's
// programs (it runs none from a prefix whose files fail their checks).
func pinFile(t *testing.T, prefix, rel string) {
	t.Helper()
	mp := filepath.Join(prefix, manifest.ManifestName)
	var m map[string]any
	b, err := os.ReadFile(mp)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(prefix, rel))
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(filepath.Join(prefix, rel))
	if err != nil {
		t.Fatal(err)
	}
	files, _ := m["files"].([]any)
	for d := filepath.Dir(rel); d != "." && d != "/"; d = filepath.Dir(d) {
		known := false
		for _, f := range files {
			known = known || f.(map[string]any)["path"] == filepath.ToSlash(d)
		}
		if !known {
			files = append(files, map[string]any{"path": filepath.ToSlash(d), "type": "dir", "mode": 0o755})
		}
	}
	files = append(files, map[string]any{"path": filepath.ToSlash(rel), "type": "file", "mode": int(info.Mode().Perm()),
		"size": len(data), "sha256": manifest.SHA256Hex(data)})
	sort.Slice(files, func(i, j int) bool {
		return files[i].(map[string]any)["path"].(string) < files[j].(map[string]any)["path"].(string)
	})
	m["files"] = files
	nb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	nb = append(nb, '\n')
	if err := os.WriteFile(mp, nb, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := manifest.ReadReceipt(prefix)
	if err != nil {
		t.Fatal(err)
	}
	r.ManifestSHA256 = manifest.SHA256Hex(nb)
	rb, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, manifest.ReceiptName), append(rb, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
