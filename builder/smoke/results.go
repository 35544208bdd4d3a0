package smoke

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/compat"
)

// step describes one step of the program: what it does, why a DeepEP job needs it and
// what to do when it fails. The program prints its steps in this order; bootstrap only
// when it fails, and finalize never (a rank that ends after its last step without DONE
// ended there).
type step struct {
	name, expected, why, fix, rule string
	// always: the row is reported even when no rank printed the step
	always bool
}

var steps = []step{
	{name: "start",
		expected: "the rank finds a CUDA device and selects it",
		why:      "every rank of a DeepEP job runs on its own GPU",
		fix:      "the CUDA driver did not answer: nvidia-smi must list the GPUs; CUDA_VISIBLE_DEVICES must not hide them"},
	{name: "uid", always: true, rule: "R28",
		expected: "rank 0 makes NVSHMEM's unique ID and every other rank receives it",
		why: "DeepEP initialises NVSHMEM by unique ID: rank 0 makes it with NVSHMEM's UID bootstrap, which listens on one " +
			"network interface, and the others get it out of band; a wrong interface is where multi-node jobs fail first",
		fix: "name the interface the ranks reach each other on: export NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=<if> before verify-install " +
			"(at build: --set env.NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME=<if>), and NVSHMEM_BOOTSTRAP_UID_SOCK_FAMILY=AF_INET6 for an IPv6 " +
			"interface; it must be up with an address (ip -br addr). A rank that received no ID waited for rank 0: read rank 0's failure"},
	{name: "bootstrap", rule: "R28",
		expected: "nvshmemx_set_attr_uniqueid_args takes the rank, the number of PEs and the unique ID",
		why:      "every rank hands the unique ID to NVSHMEM before init",
		fix: "the NVSHMEM this process loaded refused the unique ID: it is not the one the program was built against " +
			"(see smoke.version); source the install's env.sh, whose LD_PRELOAD and LD_LIBRARY_PATH load the install's NVSHMEM first"},
	{name: "init", always: true,
		expected: "nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID) returns on every rank, with its own PE number",
		why:      "DeepEP's Buffer initialises NVSHMEM the same way; a transport that cannot start ends the job here",
		fix: "read NVSHMEM's message in found (rerun with NVSHMEM_DEBUG=INFO for more). NVSHMEM_REMOTE_TRANSPORT must name a " +
			"transport this node has: ibrc, ucx, libfabric, ibdevx or none (R23; none on a node without RDMA NICs); IBGDA " +
			"(NVSHMEM_IB_ENABLE_IBGDA=1) and IBRC need peer memory (nvidia_peermem or dma-buf) and, for the GPU NIC handler, " +
			"PeerMappingOverride=1 (R16: verify-install --host checks both); the bootstrap interface is NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME (R28)"},
	{name: "version", always: true, rule: "R10/loaded-version",
		expected: "the NVSHMEM every rank loaded is the one the program was built against and the one the build recorded",
		why: "DeepEP's device code is compiled against one NVSHMEM; a process that loads another (torch bundles its own) " +
			"fails at run time with a device/host mismatch or hangs internode",
		fix: "two NVSHMEMs: source the install's env.sh (its LD_PRELOAD and LD_LIBRARY_PATH load the install's NVSHMEM ahead of " +
			"torch's, R10); remove other NVSHMEMs from LD_LIBRARY_PATH and LD_PRELOAD; never mix the pip NVSHMEM with a source-built one"},
	{name: "malloc", always: true,
		expected: "nvshmem_malloc of a small symmetric buffer succeeds and is writable",
		why:      "DeepEP allocates its RDMA buffer from NVSHMEM's symmetric heap",
		fix: "the symmetric heap is smaller than asked or the GPU is full: with NVSHMEM_DISABLE_CUDA_VMM=1 the heap is fixed at " +
			"NVSHMEM_SYMMETRIC_SIZE (default 1 GiB; sizes take K, M, G suffixes) and allocated at init, so set it above the " +
			"largest buffer a job allocates (DeepEP's low-latency test asks about 2.1 GB); check free GPU memory (nvidia-smi)"},
	{name: "barrier", always: true,
		expected: "every rank reaches nvshmem_barrier_all after its put",
		why:      "DeepEP synchronises its ranks through NVSHMEM barriers",
		fix: "a rank never reached the barrier: read the rows above for the rank that failed first and its stderr; " +
			"across nodes, the transport between them (init's fix)"},
	{name: "put", always: true,
		expected: "a put and a flag from the device to the next PE arrive intact",
		why:      "DeepEP's kernels write to their peers from the device: over NVLink/P2P on a node, over IBGDA or a proxy transport across nodes",
		fix: "on one node NVSHMEM puts through P2P/NVLink: the GPUs must reach each other (nvidia-smi topo -m) and NVSHMEM_DISABLE_P2P " +
			"must be unset; across nodes IBGDA needs NVSHMEM_IB_ENABLE_IBGDA=1, peer memory and PeerMappingOverride=1 (R16). " +
			"'no kernel image is available' means the smoke test was built for another GPU architecture than this node's (the recipe's arch)"},
	{name: "split", always: true,
		expected: "nvshmem_team_split_strided(NVSHMEM_TEAM_WORLD, pe % local PEs, local PEs, PEs / local PEs) makes a team",
		why:      "DeepEP splits NVSHMEM_TEAM_WORLD into one RDMA team per local GPU index, strided, at Buffer creation",
		fix: "with several PEs on one GPU NVSHMEM refuses team creation ('not supported with limited MPG') and exits: run one PE " +
			"per GPU; 'No more teams available': raise NVSHMEM_MAX_TEAMS (32 by default in NVSHMEM 3.4.5)"},
	{name: "finalize",
		expected: "nvshmem_barrier_all, nvshmem_free and nvshmem_finalize return after the last step",
		why:      "a job that cannot tear NVSHMEM down leaves ranks behind",
		fix:      "read the rank's stderr; a rank that ended early leaves the others waiting in the final barrier"},
}

// stepNamed is the step of that name.
func stepNamed(name string) step {
	i := slices.IndexFunc(steps, func(s step) bool { return s.name == name })
	return steps[i]
}

// after is the step a rank was in when it ended without a DONE line, by the last step
// it printed: the program prints barrier before put's verdict, and put's device kernel
// runs before the barrier.
func after(last string) string {
	switch last {
	case "", "start":
		return "uid"
	case "uid", "bootstrap":
		return "init"
	case "init":
		return "version"
	case "version":
		return "malloc"
	case "malloc", "barrier":
		return "put"
	case "put":
		return "split"
	}
	return "finalize"
}

// Expect is what the build recorded about the NVSHMEM the ranks must load.
type Expect struct {
	// Version is the NVSHMEM version recorded at build ("3.4.5-0", the wheel's "3.4.5");
	// "" when nothing was recorded.
	Version string
	// From says where Version was recorded ("component nvshmem in manifest.json").
	From string
	// LibDir is the directory the loaded library must lie in (the install's NVSHMEM,
	// or the wheel's directory on this host); "" when unknown.
	LibDir string
}

// outcome is one rank's part in one step.
type outcome struct {
	state  string // ok, fail, skip (printed); died, stopped, unreached, missing
	detail string
	ms     float64
}

// Results turns a run into check results: smoke.run, then one row per step in the
// order the program prints them, smoke.init-time after init, smoke.version in version's
// place. err is Run's.
func Results(rep *Report, err error, exp Expect) []check.Result {
	run := check.Result{ID: "smoke.run", Read: "epbuild-nvshmem-smoke, one process per PE",
		Expected: "the smoke test starts one process per PE and every rank ends by itself",
		Why:      "what a DeepEP job does with NVSHMEM before its first kernel, run on this node before a job"}
	var se *StartError
	switch {
	case errors.As(err, &se) || rep == nil:
		run.Status, run.Found = check.Fail, "did not run"
		if err != nil {
			run.Found = "did not run: " + err.Error()
		}
		run.Fix = "run it on a GPU node with the install's env (source env.sh); a library the loader cannot find means " +
			"the NVSHMEM it was built against is missing: reinstall the artifact"
		return []check.Result{run}
	}
	run.Read = fmt.Sprintf("%s, %d processes", rep.Binary, rep.PEs)
	views := make([]view, len(rep.Ranks))
	for i, r := range rep.Ranks {
		views[i] = viewOf(r)
	}
	run.Status, run.Found = check.Pass, runSummary(rep, views)
	if err != nil {
		run.Status, run.Found = check.Fail, run.Found+"; "+err.Error()
	}
	for _, v := range views {
		if v.r.Stopped == StopDeadline && !v.r.Done {
			run.Status = check.Fail
			run.Fix = fmt.Sprintf("a rank was still running at the deadline (%s) and was killed: its step's row says where; "+
				"if the node is only slow, raise --smoke-timeout", rep.Timeout)
		}
	}
	out := []check.Result{run}
	for _, st := range steps {
		r, ok := stepRow(st, rep, views)
		if !ok {
			continue
		}
		if st.name == "version" {
			r = versionRow(r, views, exp)
		}
		out = append(out, r)
		if st.name == "init" {
			out = append(out, initTime(views))
		}
	}
	return out
}

// view is one rank's outcome in every step.
type view struct {
	r  Rank
	by map[string]outcome
	// endedIn is the step the rank ended in: its failed step, or the one after its
	// last line when it printed no DONE ("" when it finished).
	endedIn string
}

func viewOf(r Rank) view {
	v := view{r: r, by: map[string]outcome{}}
	last := ""
	for _, s := range r.Steps {
		if _, dup := v.by[s.Name]; !dup {
			v.by[s.Name] = outcome{state: s.Status, detail: s.Detail, ms: s.MS}
		}
		last = s.Name
		if s.Status == "fail" && v.endedIn == "" {
			v.endedIn = s.Name
		}
	}
	if v.endedIn == "" && !r.Done {
		v.endedIn = after(last)
		state := "died"
		if r.Stopped == StopPeer || r.Stopped == StopCancel {
			state = "stopped"
		}
		v.by[v.endedIn] = outcome{state: state}
	}
	return v
}

// at is the rank's outcome in step name: what it printed, the step it ended in, not
// reached (it ended first), or missing (a rank that finished without printing it).
// bootstrap and finalize print only when they fail: a rank that went past them passed.
func (v view) at(name string) outcome {
	if o, ok := v.by[name]; ok {
		return o
	}
	silent := name == "bootstrap" || name == "finalize"
	switch {
	case silent && (v.endedIn == "" || place(v.endedIn) > place(name)):
		return outcome{state: "ok", detail: "passed"}
	case v.endedIn != "" || silent:
		return outcome{state: "unreached"}
	}
	return outcome{state: "missing"}
}

// place is a step's place in the order the program prints its steps.
func place(name string) int {
	return slices.IndexFunc(steps, func(s step) bool { return s.name == name })
}

func stepRow(st step, rep *Report, views []view) (check.Result, bool) {
	r := check.Result{ID: "smoke." + st.name, Read: fmt.Sprintf("STEP %s lines of %d ranks (%s)", st.name, len(views), rep.Binary),
		Expected: st.expected, Why: st.why, Rule: st.rule}
	var fails, skips, stopped, oks []string
	seen := false
	for _, v := range views {
		if _, ok := v.by[st.name]; ok {
			seen = true
		}
		o := v.at(st.name)
		switch o.state {
		case "ok":
			oks = append(oks, o.detail)
		case "skip":
			skips = append(skips, fmt.Sprintf("rank %d: %s", v.r.Rank, o.detail))
		case "fail":
			fails = append(fails, withStderr(fmt.Sprintf("rank %d: %s", v.r.Rank, o.detail), v.r))
		case "died":
			how := v.r.Exit
			if v.r.Stopped == StopDeadline {
				how = fmt.Sprintf("still in it at the deadline (%s): killed", rep.Timeout)
			}
			fails = append(fails, withStderr(fmt.Sprintf("rank %d ended without finishing %s (%s)", v.r.Rank, st.name, how), v.r))
		case "stopped":
			stopped = append(stopped, fmt.Sprintf("rank %d was stopped in %s: %s", v.r.Rank, st.name, stopWhy(v.r.Stopped)))
		case "missing":
			fails = append(fails, fmt.Sprintf("rank %d finished without a %s line: not the program this epbuild reads", v.r.Rank, st.name))
		case "unreached":
			skips = append(skips, fmt.Sprintf("rank %d did not reach it (%s ended it)", v.r.Rank, v.endedIn))
		}
	}
	if !seen && !st.always {
		return r, false
	}
	switch {
	case len(fails) > 0:
		r.Status, r.Found, r.Fix = check.Fail, some(append(fails, stopped...)), st.fix
		if st.name == "uid" && (strings.Contains(r.Found, "CUDA device") || strings.Contains(r.Found, "cudaSetDevice")) {
			r.Fix = stepNamed("start").fix // the rank found no GPU before it made or received an ID
		}
		if st.name == "malloc" {
			r.Fix = mallocFix(r.Found)
		}
		if strings.Contains(r.Found, "timed out") || strings.Contains(r.Found, "at the deadline") {
			r.Fix += "; if the node is only slow, raise --smoke-timeout"
		}
	case len(oks) == len(views):
		r.Status, r.Found = check.Pass, oks[0]
		if len(views) > 1 {
			r.Found = "rank 0: " + oks[0] + fmt.Sprintf(" (all %d ranks ok)", len(views))
		}
	default:
		r.Status, r.Found = check.Skip, some(dedupe(append(stopped, skips...)))
	}
	return r, true
}

// mallocFix names what NVSHMEM said, not a guess: NVSHMEM 3.x finishes a unique-ID init
// lazily, in the first API call after nvshmemx_init_attr when that init could not
// complete (nvshmemi_check_state_and_init in src/host/init/init.cu), so a rank that
// fails "at malloc" with "nvshmem initialization failed" failed its init; only a heap or
// memory message points at the heap's size.
func mallocFix(found string) string {
	init := stepNamed("init").fix
	switch {
	case strings.Contains(found, "Unable to access ibgda device state") || strings.Contains(found, "Unable to access device state"):
		return "NVSHMEM's host library could not find its device state in the program's device code (CUDA error 500, " +
			"symbol not found): the program's device code and the libnvshmem_host it loaded are not one NVSHMEM build, or " +
			"the device code has no image for this GPU. Check smoke.version (the loaded library), that env.sh is sourced " +
			"(its LD_PRELOAD loads the install's NVSHMEM), and that the recipe's arch covers this GPU; then " + init
	case strings.Contains(found, "check_state_and_init") || strings.Contains(found, "initialization failed"):
		return "NVSHMEM finishes its initialisation in the first call after nvshmemx_init_attr when init could not complete, " +
			"so this is an init failure, not the heap: " + init
	case strings.Contains(found, "out of memory") || strings.Contains(found, "heap") || strings.Contains(found, "cudaMalloc"):
		return stepNamed("malloc").fix
	}
	return "read NVSHMEM's message in found (rerun with NVSHMEM_DEBUG=INFO for more). " + stepNamed("malloc").fix
}

// withStderr adds the end of the rank's stderr (NVSHMEM's own message), when it has one.
func withStderr(s string, r Rank) string {
	if m := Message(r.Stderr); m != "" {
		return s + "; stderr: " + m
	}
	return s
}

// some joins the first few items and counts the rest.
func some(items []string) string {
	const n = 3
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
}

// dedupe collapses skip reasons that differ only in the rank.
func dedupe(items []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range items {
		key := s
		if _, rest, ok := strings.Cut(s, ": "); ok && strings.HasPrefix(s, "rank ") {
			key = rest
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, s)
		}
	}
	return out
}

func runSummary(rep *Report, views []view) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d PE(s)", rep.PEs)
	if rep.Devices >= 0 {
		fmt.Fprintf(&b, ", one per CUDA device (--devices: %d)", rep.Devices)
	}
	var finished, failed []string
	for _, v := range views {
		switch {
		case v.r.Done && v.r.Failed == 0:
			finished = append(finished, strconv.Itoa(v.r.Rank))
		case v.r.Done:
			failed = append(failed, fmt.Sprintf("rank %d failed %s (%s)", v.r.Rank, v.endedIn, v.r.Exit))
		case v.r.Stopped != "":
			failed = append(failed, fmt.Sprintf("rank %d killed in %s (%s)", v.r.Rank, v.endedIn, stopWhy(v.r.Stopped)))
		default:
			failed = append(failed, fmt.Sprintf("rank %d ended in %s without DONE (%s)", v.r.Rank, v.endedIn, v.r.Exit))
		}
	}
	if len(failed) == 0 {
		fmt.Fprintf(&b, "; every rank finished (DONE 0)")
	} else {
		fmt.Fprintf(&b, "; %s", strings.Join(failed, "; "))
	}
	fmt.Fprintf(&b, "; %.1f s", rep.Elapsed.Seconds())
	return b.String()
}

func stopWhy(s string) string {
	switch s {
	case StopDeadline:
		return "the deadline"
	case StopPeer:
		return "another rank had failed"
	case StopCancel:
		return "verify-install was interrupted"
	}
	return s
}

// initTime reports how long NVSHMEM's initialisation took: rank 0's, and the slowest.
func initTime(views []view) check.Result {
	r := check.Result{ID: "smoke.init-time", Read: "the init step's milliseconds on each rank",
		Expected: "a time, for comparison between nodes and installs",
		Why:      "DeepEP pays NVSHMEM's unique-ID initialisation at every Buffer creation; a node far slower than its peers has a bootstrap or transport problem"}
	slow, slowRank, n := -1.0, -1, 0
	var first string
	for _, v := range views {
		o := v.at("init")
		if o.state != "ok" {
			continue
		}
		n++
		if first == "" {
			first = fmt.Sprintf("rank %d: %.0f ms", v.r.Rank, o.ms)
		}
		if o.ms > slow {
			slow, slowRank = o.ms, v.r.Rank
		}
	}
	if n == 0 {
		r.Status, r.Found = check.Skip, "no rank finished init"
		return r
	}
	r.Status, r.Found = check.Pass, first
	if n > 1 {
		r.Found += fmt.Sprintf("; slowest rank %d: %.0f ms (%d ranks)", slowRank, slow, n)
	}
	return r
}

// version is a parsed "loaded=X built=Y lib=PATH" detail.
type version struct{ loaded, built, lib string }

func parseVersion(detail string) (version, bool) {
	var v version
	for _, f := range strings.Fields(detail) {
		k, val, _ := strings.Cut(f, "=")
		switch k {
		case "loaded":
			v.loaded = val
		case "built":
			v.built = val
		case "lib":
			v.lib = val
		}
	}
	if i := strings.Index(detail, "lib="); i >= 0 {
		v.lib = strings.TrimSpace(detail[i+len("lib="):]) // a path may hold spaces
	}
	return v, v.loaded != "" && v.built != ""
}

// versionRow judges the version lines the step row passed: every rank loaded the same
// NVSHMEM, the one its headers were, the one the build recorded, from where it should.
func versionRow(r check.Result, views []view, exp Expect) check.Result {
	if r.Status != check.Pass {
		return r
	}
	var vs []version
	for _, v := range views {
		pv, ok := parseVersion(v.at("version").detail)
		if !ok {
			r.Status, r.Found = check.Fail, fmt.Sprintf("rank %d printed %q, not loaded=X built=Y lib=PATH", v.r.Rank, v.at("version").detail)
			r.Fix = "rebuild the install: its smoke test is not the one this epbuild reads"
			return r
		}
		vs = append(vs, pv)
	}
	v := vs[0]
	r.Found = fmt.Sprintf("loaded %s from %s; built against %s", v.loaded, v.lib, v.built)
	if exp.Version != "" {
		r.Found += "; recorded at build " + exp.Version
		if exp.From != "" {
			r.Found += " (" + exp.From + ")"
		}
	}
	var bad []string
	for i, x := range vs {
		switch {
		case x.loaded != v.loaded || x.lib != v.lib:
			bad = append(bad, fmt.Sprintf("rank %d loaded %s from %s, rank 0 %s from %s", i, x.loaded, x.lib, v.loaded, v.lib))
		case x.loaded != x.built:
			bad = append(bad, fmt.Sprintf("rank %d loaded NVSHMEM %s but was built against %s", i, x.loaded, x.built))
		}
	}
	if exp.Version != "" && !sameRelease(v.loaded, exp.Version) {
		bad = append(bad, fmt.Sprintf("loaded NVSHMEM %s, the build recorded %s", v.loaded, exp.Version))
	}
	if exp.LibDir != "" && !within(v.lib, exp.LibDir) {
		bad = append(bad, fmt.Sprintf("loaded %s, not the install's NVSHMEM under %s", v.lib, exp.LibDir))
	}
	if len(bad) > 0 {
		r.Status, r.Fix = check.Fail, stepNamed("version").fix
		r.Found = some(dedupe(bad)) + " (" + r.Found + ")"
	}
	return r
}

// sameRelease compares X.Y.Z: the library reports no package revision (3.4.5-0 and
// 3.5.19-1 load as 3.4.5 and 3.5.19).
func sameRelease(loaded, recorded string) bool {
	a, err1 := compat.ParseVersion(loaded)
	b, err2 := compat.ParseVersion(recorded)
	if err1 != nil || err2 != nil {
		return loaded == recorded
	}
	return a.Core() == b.Core()
}

// within reports whether path lies under dir, with symlinks resolved on both sides
// (a wheel's lib/ may be reached through a link).
func within(path, dir string) bool {
	for _, pair := range [][2]string{{path, dir}, {resolve(path), resolve(dir)}} {
		if rel, err := filepath.Rel(pair[1], pair[0]); err == nil && filepath.IsLocal(rel) {
			return true
		}
	}
	return false
}

func resolve(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}
