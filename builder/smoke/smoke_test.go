package smoke

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/embedded"
)

// standIn plays epbuild-nvshmem-smoke where there is no GPU: the program's arguments,
// its unique-ID hand-over through the file, and its output format to the byte
// (nvshmem_smoke.cu's printf formats; the details of a real run on one H100 with the
// nvidia-nvshmem-cu13 3.4.5 wheel). SMOKE_MODE picks what goes wrong; SMOKE_ENV_DIR
// receives each rank's environment and arguments.
const standIn = `#!/bin/sh
if [ "$1" = --devices ]; then
  if [ -n "$SMOKE_NO_LIB" ]; then
    echo "$0: error while loading shared libraries: libnvshmem_host.so.3: cannot open shared object file: No such file or directory" >&2
    exit 127
  fi
  echo "${SMOKE_DEVICES:-1}"
  exit 0
fi
rank=-1 npes=0 local=0 uid= timeout=120
while [ $# -gt 0 ]; do
  case "$1" in
    --rank) rank=$2 ;; --npes) npes=$2 ;; --local-pes) local=$2 ;; --uid-file) uid=$2 ;; --timeout) timeout=$2 ;;
    --device|--words) ;;
    *) echo "usage: $0 --rank R --npes N --uid-file FILE" >&2; exit 2 ;;
  esac
  shift 2
done
if [ -n "$SMOKE_ENV_DIR" ]; then
  env > "$SMOKE_ENV_DIR/rank$rank.env"
  echo "ARGS npes=$npes local=$local timeout=$timeout uiddir=$(dirname "$uid")" >> "$SMOKE_ENV_DIR/rank$rank.env"
fi
mode=${SMOKE_MODE:-ok}
step() { printf 'STEP %d %s %s %.1f %s\n' "$rank" "$1" "$2" "$3" "$4"; }
fail() { step "$1" fail "$2" "$3"; printf 'DONE %d 1\n' "$rank"; exit 1; }
# NVSHMEM's debug output goes to stdout too
[ "$mode" = chatty ] && i=0 && while [ $i -lt 3000 ]; do echo "vm:$$:$$ [0] NVSHMEM INFO line $i"; i=$((i+1)); done
if [ "$rank" = 0 ]; then
  [ "$mode" = uid-fail ] && fail uid 0.2 "nvshmemx_get_uniqueid failed: the bootstrap found no usable interface"
  printf 'unique-id' > "$uid.tmp" && mv "$uid.tmp" "$uid"
  step uid ok 0.4 "made and published (128 bytes)"
else
  n=0
  while [ ! -f "$uid" ]; do
    sleep 0.02; n=$((n+1))
    [ $n -gt $((timeout*50)) ] && fail uid $((timeout*1000)) "no unique id from rank 0 before the deadline"
  done
  step uid ok 1.0 "received from rank 0"
fi
if [ "$mode" = orphan ]; then
  sleep 300 >/dev/null 2>&1 &   # detached from the rank's pipes: the rank ends, it stays
  echo $! > "$SMOKE_PID_DIR/rank$rank.pid"
fi
if [ "$mode" = hang ]; then
  sleep 300 &
  echo $! > "$SMOKE_PID_DIR/rank$rank.pid"
  wait
fi
[ "$mode" = bootstrap-fail ] && [ "$rank" = 1 ] && fail bootstrap 0.1 "nvshmemx_set_attr_uniqueid_args failed"
if [ "$mode" = init-fail ]; then
  if [ "$rank" = 1 ]; then
    echo "/src/host/transport/transport.cpp:nvshmemi_transport_init: init failed for remote transport: ibrc" >&2
    fail init 41.7 "nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID) failed"
  fi
  sleep 300 & wait   # rank 0 waits in the bootstrap for a peer that is gone
fi
step init ok 783.2 "pe $rank of $npes on device 0"
step version ok 0 "loaded=${SMOKE_LOADED:-3.4.5} built=3.4.5 lib=${SMOKE_LIB:-/site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3}"
if [ "$mode" = malloc-initfail ] || [ "$mode" = malloc-statefail ]; then
  # NVSHMEM 3.4.5 finishing a deferred init inside nvshmem_malloc (NVSHMEMI_ERROR_EXIT)
  [ "$mode" = malloc-statefail ] && echo "nvshmem/src/src/device/init/init_device.cu:nvshmemi_get_mem_handle:128: Unable to access ibgda device state. 500" >&2
  echo "nvshmem/src/src/host/init/init.cu:1013: NULL value Unable to query pointer information." >&2
  echo "nvshmem/src/src/host/init/init.cu:nvshmemi_check_state_and_init:1119: nvshmem initialization failed, exiting" >&2
  exit 255
fi
[ "$mode" = malloc-fail ] && fail malloc 0.3 "nvshmem_malloc returned NULL: the symmetric heap is smaller than asked (NVSHMEM_SYMMETRIC_SIZE)"
step malloc ok 0.9 "2097156 bytes"
if [ "$mode" = barrier-timeout ] && [ "$rank" = 1 ]; then
  printf 'STEP %d %s fail 0 timed out in this step\nDONE %d 1\n' "$rank" barrier "$rank"
  exit 1
fi
step barrier ok 0.1 "nvshmem_barrier_all"
[ "$mode" = put-fail ] && fail put 2.5 "data from pe $(( (rank+npes-1)%npes )) wrong: 262144 words differ, flag missing"
step put ok 0.5 "262144 words and a flag to pe $(( (rank+1)%npes )), received from pe $(( (rank+npes-1)%npes ))"
if [ "$mode" = mpg ]; then
  echo "[src/host/team/team.cu:64] Called NVSHMEM API not supported with limited MPG (Multiple Processes Per GPU) runs" >&2
  exit 255
fi
if [ "$mode" = mpg-skip ]; then
  step split skip 0 "$local local PEs share 1 GPU(s): NVSHMEM does not split teams with several PEs per GPU"
else
  step split ok 0.3 "team of $(( npes/local )) (start $(( rank%local )), stride $local)"
fi
if [ "$mode" = finalize-die ] && [ "$rank" = 1 ]; then
  echo "nvshmem_finalize: proxy thread did not exit" >&2
  exit 1
fi
printf 'DONE %d 0\n' "$rank"
`

func writeStandIn(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), Binary)
	if err := os.WriteFile(p, []byte(standIn), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// env is a small base environment with the stand-in's knobs.
func env(t *testing.T, kv ...string) []string {
	t.Helper()
	return append([]string{"PATH=" + os.Getenv("PATH")}, kv...)
}

func run(t *testing.T, o Options) (*Report, []check.Result) {
	t.Helper()
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	if o.Grace == 0 {
		// long enough that a rank which goes on after its peer failed finishes on a
		// loaded machine; the tests whose ranks wait for a failed peer set a short one
		o.Grace = 20 * time.Second
	}
	rep, err := Run(context.Background(), o)
	return rep, Results(rep, err, Expect{Version: "3.4.5", From: "nvidia-nvshmem-cu13 (manifest.json)", LibDir: "/site-packages/nvidia/nvshmem"})
}

func statuses(rs []check.Result) map[string]string {
	m := map[string]string{}
	for _, r := range rs {
		m[r.ID] = string(r.Status)
	}
	return m
}

func wantRows(t *testing.T, rs []check.Result, want map[string]string) {
	t.Helper()
	got := statuses(rs)
	for id, st := range want {
		if got[id] != st {
			r, _ := check.Find(rs, id)
			t.Errorf("%s: %q, want %s (found %q)", id, got[id], st, r.Found)
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			t.Errorf("unexpected row %s", id)
		}
	}
	for _, r := range rs {
		if r.Read == "" || r.Expected == "" || r.Why == "" {
			t.Errorf("%s lacks what it read, expected or why: %+v", r.ID, r)
		}
		if (r.Status == check.Fail) != (r.Fix != "") && r.ID != "smoke.run" {
			t.Errorf("%s: status %s with fix %q: a failing row needs a fix, a passing one none", r.ID, r.Status, r.Fix)
		}
	}
}

func find(t *testing.T, rs []check.Result, id string) check.Result {
	t.Helper()
	r, ok := check.Find(rs, id)
	if !ok {
		t.Fatalf("no row %s", id)
	}
	return r
}

var allOK = map[string]string{"smoke.run": "pass", "smoke.uid": "pass", "smoke.init": "pass", "smoke.init-time": "pass",
	"smoke.version": "pass", "smoke.malloc": "pass", "smoke.barrier": "pass", "smoke.put": "pass", "smoke.split": "pass"}

// Every step passes: one row each, in the program's order, from what the ranks printed;
// the ranks get the environment and arguments they need, one per device by default.
func TestAllStepsPass(t *testing.T) {
	bin := writeStandIn(t)
	envDir := t.TempDir()
	rep, rs := run(t, Options{Binary: bin, Env: env(t, "SMOKE_DEVICES=2", "SMOKE_ENV_DIR="+envDir, "NVSHMEM_SYMMETRIC_SIZE=4G")})
	wantRows(t, rs, allOK)
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	want := []string{"smoke.run", "smoke.uid", "smoke.init", "smoke.init-time", "smoke.version", "smoke.malloc", "smoke.barrier", "smoke.put", "smoke.split"}
	if !slices.Equal(ids, want) {
		t.Errorf("rows %v, want %v", ids, want)
	}
	if rep.PEs != 2 || rep.Devices != 2 || len(rep.Ranks) != 2 {
		t.Fatalf("PEs %d, devices %d, ranks %d: want two, one per device", rep.PEs, rep.Devices, len(rep.Ranks))
	}
	if r := find(t, rs, "smoke.init"); r.Found != "rank 0: pe 0 of 2 on device 0 (all 2 ranks ok)" {
		t.Errorf("init found %q", r.Found)
	}
	if r := find(t, rs, "smoke.init-time"); r.Found != "rank 0: 783 ms; slowest rank 0: 783 ms (2 ranks)" {
		t.Errorf("init-time found %q", r.Found)
	}
	v := find(t, rs, "smoke.version")
	if !strings.Contains(v.Found, "loaded 3.4.5 from /site-packages/nvidia/nvshmem/lib/libnvshmem_host.so.3; built against 3.4.5; recorded at build 3.4.5") || v.Rule != "R10/loaded-version" {
		t.Errorf("version: %q (rule %q)", v.Found, v.Rule)
	}
	if r := find(t, rs, "smoke.split"); !strings.Contains(r.Found, "team of 1 (start 0, stride 2)") {
		t.Errorf("split found %q", r.Found)
	}
	var uidDirs []string
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(envDir, fmt.Sprintf("rank%d.env", rank)))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if !strings.Contains(s, "NVSHMEM_SYMMETRIC_SIZE=4G\n") {
			t.Errorf("rank %d did not get the env it was given:\n%s", rank, s)
		}
		m := regexp.MustCompile(`ARGS npes=(\d+) local=(\d+) timeout=(\d+) uiddir=(\S+)`).FindStringSubmatch(s)
		if m == nil || m[1] != "2" || m[2] != "2" {
			t.Fatalf("rank %d arguments: %q", rank, m)
		}
		if n, _ := strconv.Atoi(m[3]); n < 1 || n >= 30 {
			t.Errorf("rank %d --timeout %s: must be under the run's 30 s, so that the rank names its step first", rank, m[3])
		}
		uidDirs = append(uidDirs, m[4])
	}
	if uidDirs[0] != uidDirs[1] {
		t.Errorf("ranks got different unique-id files: %v", uidDirs)
	}
	if _, err := os.Stat(uidDirs[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the unique-id directory %s is left behind: %v", uidDirs[0], err)
	}
}

// --smoke-pes N on fewer GPUs: the program skips the split with its reason, which is a
// skip, not a failure.
func TestTwoPEsOnOneGPUSkipTheSplit(t *testing.T) {
	rep, rs := run(t, Options{Binary: writeStandIn(t), PEs: 2, Env: env(t, "SMOKE_MODE=mpg-skip")})
	want := maps(allOK, "smoke.split", "skip")
	wantRows(t, rs, want)
	if rep.Devices != -1 {
		t.Errorf("devices %d: the PEs were given, --devices must not run", rep.Devices)
	}
	if r := find(t, rs, "smoke.split"); r.Found != "rank 0: 2 local PEs share 1 GPU(s): NVSHMEM does not split teams with several PEs per GPU" {
		t.Errorf("split found %q", r.Found)
	}
	if check.Failed(rs) {
		t.Error("a skipped split fails the run")
	}
}

func maps(m map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(out, kv[i])
		} else {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

// A rank that NVSHMEM ends prints nothing more: the step after its last line is the one
// that failed, with NVSHMEM's message from stderr and that step's fix.
func TestRankEndedByNVSHMEMNamesTheStep(t *testing.T) {
	_, rs := run(t, Options{Binary: writeStandIn(t), PEs: 2, Env: env(t, "SMOKE_MODE=mpg")})
	wantRows(t, rs, maps(allOK, "smoke.split", "fail"))
	r := find(t, rs, "smoke.split")
	for _, want := range []string{"rank 0 ended without finishing split (exit status 255)",
		"stderr: [src/host/team/team.cu:64] Called NVSHMEM API not supported with limited MPG (Multiple Processes Per GPU) runs",
		"rank 1 ended without finishing split"} {
		if !strings.Contains(r.Found, want) {
			t.Errorf("split found %q, want %q in it", r.Found, want)
		}
	}
	if !strings.Contains(r.Fix, "one PE per GPU") || !strings.Contains(r.Fix, "NVSHMEM_MAX_TEAMS") {
		t.Errorf("split fix %q", r.Fix)
	}
	if run := find(t, rs, "smoke.run"); !strings.Contains(run.Found, "rank 1 ended in split without DONE (exit status 255)") {
		t.Errorf("run found %q", run.Found)
	}
}

// Each failing step fails its own row, with its fix; the rows after it were not reached.
func TestEachFailingStepHasItsFix(t *testing.T) {
	for _, c := range []struct {
		mode, row, found, fix string
		want                  map[string]string
	}{
		{"uid-fail", "smoke.uid", "rank 0: nvshmemx_get_uniqueid failed", "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME",
			map[string]string{"smoke.run": "pass", "smoke.uid": "fail", "smoke.init": "skip", "smoke.init-time": "skip", "smoke.version": "skip",
				"smoke.malloc": "skip", "smoke.barrier": "skip", "smoke.put": "skip", "smoke.split": "skip"}},
		{"init-fail", "smoke.init", "rank 1: nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID) failed; stderr: /src/host/transport/transport.cpp:nvshmemi_transport_init: init failed for remote transport: ibrc",
			"NVSHMEM_REMOTE_TRANSPORT",
			map[string]string{"smoke.run": "pass", "smoke.uid": "pass", "smoke.init": "fail", "smoke.init-time": "skip", "smoke.version": "skip",
				"smoke.malloc": "skip", "smoke.barrier": "skip", "smoke.put": "skip", "smoke.split": "skip"}},
		{"malloc-fail", "smoke.malloc", "the symmetric heap is smaller than asked", "NVSHMEM_SYMMETRIC_SIZE",
			maps(allOK, "smoke.malloc", "fail", "smoke.barrier", "skip", "smoke.put", "skip", "smoke.split", "skip")},
		// not the heap: NVSHMEM finished a deferred init in nvshmem_malloc and that failed
		{"malloc-initfail", "smoke.malloc", "nvshmem initialization failed", "this is an init failure, not the heap",
			maps(allOK, "smoke.malloc", "fail", "smoke.barrier", "skip", "smoke.put", "skip", "smoke.split", "skip")},
		{"malloc-statefail", "smoke.malloc", "Unable to access ibgda device state. 500", "not one NVSHMEM build",
			maps(allOK, "smoke.malloc", "fail", "smoke.barrier", "skip", "smoke.put", "skip", "smoke.split", "skip")},
		{"put-fail", "smoke.put", "rank 0: data from pe 1 wrong: 262144 words differ, flag missing", "NVSHMEM_DISABLE_P2P",
			maps(allOK, "smoke.put", "fail", "smoke.split", "skip")},
		{"barrier-timeout", "smoke.barrier", "rank 1: timed out in this step", "raise --smoke-timeout",
			maps(allOK, "smoke.barrier", "fail", "smoke.put", "skip", "smoke.split", "skip")},
	} {
		t.Run(c.mode, func(t *testing.T) {
			o := Options{Binary: writeStandIn(t), PEs: 2, Env: env(t, "SMOKE_MODE="+c.mode)}
			if c.mode == "uid-fail" || c.mode == "init-fail" {
				o.Grace = 200 * time.Millisecond // the other rank waits for the failed one
			}
			_, rs := run(t, o)
			wantRows(t, rs, c.want)
			r := find(t, rs, c.row)
			if !strings.Contains(r.Found, c.found) {
				t.Errorf("%s found %q, want %q in it", c.row, r.Found, c.found)
			}
			if !strings.Contains(r.Fix, c.fix) {
				t.Errorf("%s fix %q, want %q in it", c.row, r.Fix, c.fix)
			}
			if strings.HasPrefix(c.mode, "malloc-") && c.mode != "malloc-fail" && strings.Contains(r.Fix, "NVSHMEM_SYMMETRIC_SIZE") {
				t.Errorf("%s blames the heap's size for an init failure: %q", c.row, r.Fix)
			}
		})
	}
}

// bootstrap and finalize print nothing unless they fail: their rows appear only then,
// and a rank that went past them passed them.
func TestSilentSteps(t *testing.T) {
	_, rs := run(t, Options{Binary: writeStandIn(t), PEs: 2, Env: env(t, "SMOKE_MODE=finalize-die")})
	wantRows(t, rs, maps(allOK, "smoke.finalize", "fail"))
	if r := find(t, rs, "smoke.finalize"); r.Found != "rank 1 ended without finishing finalize (exit status 1); stderr: nvshmem_finalize: proxy thread did not exit" {
		t.Errorf("finalize found %q", r.Found)
	}
	_, rs = run(t, Options{Binary: writeStandIn(t), PEs: 2, Env: env(t, "SMOKE_MODE=bootstrap-fail")})
	wantRows(t, rs, maps(allOK, "smoke.bootstrap", "fail", "smoke.init", "skip", "smoke.init-time", "pass", "smoke.version", "skip",
		"smoke.malloc", "skip", "smoke.barrier", "skip", "smoke.put", "skip", "smoke.split", "skip"))
	if r := find(t, rs, "smoke.bootstrap"); r.Found != "rank 1: nvshmemx_set_attr_uniqueid_args failed" || r.Rule != "R28" {
		t.Errorf("bootstrap found %q, rule %q", r.Found, r.Rule)
	}
}

// When one rank fails, the rank that waits for it is stopped after the grace period,
// not left until the deadline, and its row says it was stopped, not that it failed.
func TestPeerOfAFailedRankIsStopped(t *testing.T) {
	rep, rs := run(t, Options{Binary: writeStandIn(t), PEs: 2, Timeout: 10 * time.Minute, Grace: 200 * time.Millisecond,
		Env: env(t, "SMOKE_MODE=init-fail")})
	if rep.Ranks[0].Stopped != StopPeer || rep.Ranks[1].Stopped != "" {
		t.Fatalf("stopped: rank 0 %q, rank 1 %q; want rank 0 stopped after rank 1 failed", rep.Ranks[0].Stopped, rep.Ranks[1].Stopped)
	}
	r := find(t, rs, "smoke.init")
	if r.Status != check.Fail || !strings.Contains(r.Found, "rank 1: nvshmemx_init_attr") || !strings.Contains(r.Found, "rank 0 was stopped in init: another rank had failed") {
		t.Errorf("init: %s %q", r.Status, r.Found)
	}
}

// A version mismatch: the process loaded another NVSHMEM than it was built against (or
// the build recorded), from outside the install.
func TestVersionMismatch(t *testing.T) {
	_, rs := run(t, Options{Binary: writeStandIn(t), PEs: 1,
		Env: env(t, "SMOKE_LOADED=3.3.20", "SMOKE_LIB=/usr/lib/python3/site-packages/torch/lib/libnvshmem_host.so.3")})
	wantRows(t, rs, maps(allOK, "smoke.version", "fail"))
	r := find(t, rs, "smoke.version")
	for _, want := range []string{"rank 0 loaded NVSHMEM 3.3.20 but was built against 3.4.5", "loaded NVSHMEM 3.3.20, the build recorded 3.4.5",
		"not the install's NVSHMEM under /site-packages/nvidia/nvshmem"} {
		if !strings.Contains(r.Found, want) {
			t.Errorf("version found %q, want %q in it", r.Found, want)
		}
	}
	if !strings.Contains(r.Fix, "LD_PRELOAD") {
		t.Errorf("version fix %q", r.Fix)
	}
	// the built NVSHMEM records a package revision the library does not report
	exp := Expect{Version: "3.5.19-1"}
	ok := versionRow(check.Result{Status: check.Pass}, []view{viewOf(Rank{Done: true, Steps: []Step{{Name: "version", Status: "ok", Detail: "loaded=3.5.19 built=3.5.19 lib=/opt/x/nvshmem/lib/libnvshmem_host.so.3.5.19"}}})}, exp)
	if ok.Status != check.Pass {
		t.Errorf("3.5.19 loaded, 3.5.19-1 recorded: %s %q", ok.Status, ok.Found)
	}
}

// A rank that does not end by the deadline is killed with everything it started; the
// step it was in fails, naming the deadline.
func TestDeadlineKillsEveryDescendant(t *testing.T) {
	pids := t.TempDir()
	start := time.Now()
	rep, rs := run(t, Options{Binary: writeStandIn(t), PEs: 2, Timeout: 3 * time.Second, Grace: time.Hour,
		Env: env(t, "SMOKE_MODE=hang", "SMOKE_PID_DIR="+pids)})
	took := time.Since(start)
	for _, r := range rep.Ranks {
		if r.Stopped != StopDeadline || r.Done {
			t.Errorf("rank %d: stopped %q, done %v", r.Rank, r.Stopped, r.Done)
		}
	}
	r := find(t, rs, "smoke.init")
	if r.Status != check.Fail || !strings.Contains(r.Found, "rank 0 ended without finishing init (still in it at the deadline (3s): killed)") ||
		!strings.Contains(r.Fix, "raise --smoke-timeout") {
		t.Errorf("init: %s %q fix %q", r.Status, r.Found, r.Fix)
	}
	if run := find(t, rs, "smoke.run"); run.Status != check.Fail || !strings.Contains(run.Found, "killed in init (the deadline)") {
		t.Errorf("run: %s %q", run.Status, run.Found)
	}
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(pids, fmt.Sprintf("rank%d.pid", rank)))
		if err != nil {
			t.Fatalf("rank %d started no child: the test proves nothing (%v)", rank, err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if alive(pid) {
			t.Errorf("rank %d's child %d outlived the deadline (the run took %s)", rank, pid, took)
		}
	}
}

// A rank that finishes but leaves a process behind (detached from its pipes) does not
// leave it running: the rank's process group goes with it.
func TestFinishedRankLeavesNothingBehind(t *testing.T) {
	pids := t.TempDir()
	_, rs := run(t, Options{Binary: writeStandIn(t), PEs: 2, Env: env(t, "SMOKE_MODE=orphan", "SMOKE_PID_DIR="+pids)})
	wantRows(t, rs, allOK)
	for rank := range 2 {
		b, err := os.ReadFile(filepath.Join(pids, fmt.Sprintf("rank%d.pid", rank)))
		if err != nil {
			t.Fatalf("rank %d started no child: the test proves nothing (%v)", rank, err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if alive(pid) {
			t.Errorf("rank %d's child %d outlived the run", rank, pid)
		}
	}
}

// alive reports whether pid is a live process (a zombie waiting for its reaper is not).
func alive(pid int) bool {
	for range 100 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		if f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return false
		}
		time.Sleep(20 * time.Millisecond) // SIGKILL is delivered asynchronously
	}
	return true
}

// What keeps the smoke test from running is one failed row that says why.
func TestCannotRun(t *testing.T) {
	bin := writeStandIn(t)
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"no binary", Options{Binary: filepath.Join(t.TempDir(), Binary)}, "no such file"},
		{"no device", Options{Binary: bin, Env: env(t, "SMOKE_DEVICES=0")}, "--devices sees no CUDA device"},
		{"loader", Options{Binary: bin, Env: env(t, "SMOKE_NO_LIB=1")}, "libnvshmem_host.so.3: cannot open shared object file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rep, err := Run(context.Background(), c.o)
			var se *StartError
			if !errors.As(err, &se) || rep != nil {
				t.Fatalf("Run: %v, %v; want a StartError", rep, err)
			}
			rs := Results(rep, err, Expect{})
			if len(rs) != 1 || rs[0].ID != "smoke.run" || rs[0].Status != check.Fail || !strings.Contains(rs[0].Found, c.want) || rs[0].Fix == "" {
				t.Errorf("results %+v, want one failed smoke.run naming %q", rs, c.want)
			}
		})
	}
}

// NVSHMEM_DEBUG output on stdout around the STEP lines does not hide them.
func TestChattyStdout(t *testing.T) {
	rep, rs := run(t, Options{Binary: writeStandIn(t), PEs: 1, Env: env(t, "SMOKE_MODE=chatty")})
	wantRows(t, rs, allOK)
	if n := len(rep.Ranks[0].Other); n == 0 || n > maxOtherLines {
		t.Errorf("kept %d other lines", n)
	}
}

func TestParse(t *testing.T) {
	in := "NVSHMEM WARN something\n" +
		"STEP 1 uid ok 1.0 received from rank 0\n" +
		"STEP 0 uid ok 0.4 made and published (128 bytes)\n" + // another rank's line
		"STEP 1 init ok 783.2 pe 1 of 2 on device 0\n" +
		"STEP 1 version ok 0.0 loaded=3.4.5 built=3.4.5 lib=/a b/libnvshmem_host.so.3\n" +
		"STEP 1 malloc ok 0.9 \n" + // an empty detail
		"STEP 1 put maybe 1.0 x\n" + // not a status
		"STEP 1 barrier ok x y\n" + // not a number
		"DONE 1 0\n"
	out := Parse(strings.NewReader(in), 1)
	var names []string
	for _, s := range out.Steps {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"uid", "init", "version", "malloc"}) || !out.Done || out.Failed != 0 {
		t.Errorf("steps %v done %v failed %d", names, out.Done, out.Failed)
	}
	if out.Steps[1].MS != 783.2 || out.Steps[1].Detail != "pe 1 of 2 on device 0" || out.Steps[3].Detail != "" {
		t.Errorf("steps %+v", out.Steps)
	}
	if v, ok := parseVersion(out.Steps[2].Detail); !ok || v.lib != "/a b/libnvshmem_host.so.3" {
		t.Errorf("version %+v", v)
	}
	if len(out.Other) != 4 {
		t.Errorf("other lines %q", out.Other)
	}
}

// The parser reads what the shipped program prints: its formats, and every step name it
// can print is one Results knows.
func TestParserMatchesTheProgram(t *testing.T) {
	files, err := embedded.Files("tools", "nvshmem-smoke")
	if err != nil {
		t.Fatal(err)
	}
	src := string(files["nvshmem_smoke.cu"])
	if src == "" {
		t.Fatal("the embedded repository has no nvshmem_smoke.cu")
	}
	for _, f := range []string{`printf("STEP %d %s %s %.1f %s\n"`, `printf("DONE %d 1\n"`, `printf("DONE %d 0\n"`,
		`"STEP %d %s fail 0 timed out in this step\nDONE %d 1\n"`, `a == "--devices"`, `"--rank"`, `"--npes"`, `"--local-pes"`,
		`"--uid-file"`, `"--timeout"`} {
		if !strings.Contains(src, f) {
			t.Errorf("nvshmem_smoke.cu no longer has %s: update the parser with it", f)
		}
	}
	printed := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b(?:step|fail)\("([a-z-]+)"`).FindAllStringSubmatch(src, -1) {
		printed[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`g_step = "([a-z-]+)"`).FindAllStringSubmatch(src, -1) {
		printed[m[1]] = true
	}
	if len(printed) < 7 {
		t.Fatalf("found only %v in the program: the patterns no longer match it", printed)
	}
	known := map[string]bool{}
	for _, s := range steps {
		known[s.name] = true
		if s.fix == "" || s.why == "" || s.expected == "" {
			t.Errorf("step %s lacks a fix, why or expected", s.name)
		}
	}
	for name := range printed {
		if !known[name] {
			t.Errorf("the program prints step %q, which Results does not know", name)
		}
		if order := slices.IndexFunc(steps, func(s step) bool { return s.name == name }); order < 0 {
			t.Errorf("step %q has no row", name)
		}
	}
	for name := range known {
		if !printed[name] && name != "finalize" {
			t.Errorf("Results knows step %q, which the program never prints", name)
		}
	}
}

func TestProgramTimeout(t *testing.T) {
	for d, want := range map[time.Duration]int{2 * time.Minute: 110, 10 * time.Second: 8, time.Second: 1, 100 * time.Millisecond: 1} {
		if got := programTimeout(d); got != want {
			t.Errorf("programTimeout(%s) = %d, want %d", d, got, want)
		}
	}
}
