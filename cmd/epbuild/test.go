package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/acceptance"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/recipes"
)

// testReport is what `epbuild test --json` prints after the envelope; fleet report
// reads it (docs/test.md).
type testReport struct {
	Prefix  string `json:"prefix"`
	Recipe  string `json:"recipe"`
	PlanKey string `json:"plan_key"`
	Procs   int    `json:"procs"`
	// ProcsFrom says where Procs came from: --procs, CUDA_VISIBLE_DEVICES, nvidia-smi -L.
	ProcsFrom string              `json:"procs_from"`
	Nodes     int                 `json:"nodes"`
	Tests     []acceptance.Result `json:"tests"`
}

func newTestCmd(app *App) *cobra.Command {
	var (
		procs, nodes int
		asJSON       bool
		only         []string
		timeout      time.Duration
		sysrootArg   string
	)
	cmd := &cobra.Command{
		Use:   "test PREFIX [--procs N] [--nodes N] [--only NAME] [--timeout D] [--sysroot CAPTURE] [--json]",
		Short: "Run the tests the install carries (the acceptance test after an install)",
		Long: `Run the tests the recipe declares for its components (tests: in the recipe) and the
artifact carries in COMPONENT/tests/ of the install at PREFIX: each in that directory, with
the install's runtime env (env.sh's, over this shell's), in a process group of its own that
is killed at the test's timeout (or --timeout D), so nothing it started is left running.
A test passes when it exits 0 in time.

{{procs}} in a test's command is --procs N: by default one process per GPU of this node
(CUDA_VISIBLE_DEVICES where set, else nvidia-smi -L; 1 where there is no GPU). A test that
needs several nodes (DeepEP's internode test) is "not run: needs N nodes" unless --nodes N
says the job spans that many; then start epbuild test on each node of the job, with the
variables the test reads to meet its peers (DeepEP's: MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, RANK). A test that needs an RDMA device (needs: [rdma] in the recipe: DeepEP
a84a248's low-latency test, whose NVSHMEM traffic cannot take NVLink) is "not run" on a
node without one (read under /sys/class/infiniband, or --sysroot's capture), and so is a
test that compiles kernels at run time (needs: [nvcc]) on a node without nvcc where the
recipe's runtime.nvcc says its JIT looks, in the tests' environment.

One table: each test, pass, fail or not-run, its seconds, the bandwidths it printed (the
recipe's patterns: name=GB/s, the mean over the lines that matched) and for a failure the
last lines of its output. --json prints the same as one document; ` + "`epbuild fleet report`" + ` reads
those of many nodes and flags a node whose bandwidth is below 0.9× the fleet's median.
See docs/test.md.

Exit codes: 0 every test that ran passed; 1 a test failed or timed out; 2 bad input (PREFIX
is no install, --only names no test, a bad flag); 3 this node lacks a test's program
(python3 not on the install's PATH).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case cmd.Flags().Changed("procs") && (procs < 1 || procs > maxSmokePEs):
				return usageError{fmt.Errorf("--procs %d: give 1 to %d processes (the default is one per GPU of this node)", procs, maxSmokePEs)}
			case nodes < 1:
				return usageError{fmt.Errorf("--nodes %d: the job spans at least 1 node", nodes)}
			case cmd.Flags().Changed("timeout") && timeout <= 0:
				return usageError{fmt.Errorf("--timeout %s: give a positive duration (90s, 20m)", timeout)}
			}
			it, err := install.LoadInstallTests(args[0], os.Environ(), only)
			if err != nil {
				return err
			}
			rep := testReport{Prefix: it.Prefix, Recipe: it.Recipe, PlanKey: it.PlanKey, Procs: procs, ProcsFrom: "--procs", Nodes: nodes}
			if !cmd.Flags().Changed("procs") {
				rep.Procs, rep.ProcsFrom = acceptance.GPUs(cmd.Context(), it.Env)
			}
			sys, done, err := sysroot.Open(sysrootArg)
			if err != nil {
				return err
			}
			defer done()
			rep.Tests = acceptance.Run(cmd.Context(), it.Tests, acceptance.Options{Procs: rep.Procs, Nodes: nodes, Env: it.Env, Timeout: timeout, Lacks: nodeLacks(sys, it)})
			if rep.Tests == nil {
				rep.Tests = []acceptance.Result{}
			}
			fail := testFailure(rep.Tests)
			if asJSON {
				var failed error // a nil *exitError is no error
				if fail != nil {
					failed = fail
				}
				if err := app.printJSON(failed, rep); err != nil {
					return err
				}
			} else {
				writeTests(app.Out, &rep)
			}
			switch {
			case fail == nil:
				return nil
			case asJSON:
				return &exitError{code: fail.code} // the document says why
			}
			return fail
		},
	}
	f := cmd.Flags()
	f.IntVar(&procs, "procs", 0, "processes each test starts on this node ({{procs}}; default: one per GPU, 1 without a GPU)")
	f.IntVar(&nodes, "nodes", 1, "nodes the job spans: a test that needs more is not run")
	f.StringArrayVar(&only, "only", nil, "run only this test (NAME or COMPONENT/NAME; repeatable)")
	f.DurationVar(&timeout, "timeout", 0, "each test's deadline, in place of the recipe's (90s, 20m)")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON (fleet report reads it)")
	f.StringVar(&sysrootArg, "sysroot", "", "read the node's devices from this capture (CAPTURE.tar.zst or a directory) instead of /, for what a test needs")
	return cmd
}

// nodeLacks says why the node read through sys cannot give a test of it what it needs.
func nodeLacks(sys sysroot.Root, it *install.InstallTests) func(string) string {
	return func(need string) string {
		switch need {
		case recipes.NeedNVCC:
			return lacksNVCC(sys, it)
		case recipes.NeedRDMA:
			devs, err := host.RDMADevices(sys)
			switch {
			case err != nil:
				return fmt.Sprintf("needs an RDMA device, and the node's could not be read: %v", err)
			case len(devs) == 0:
				return "needs an RDMA device (a verbs NIC under /sys/class/infiniband); this node has none"
			}
			return ""
		}
		return fmt.Sprintf("needs %q, which this epbuild does not know (a newer epbuild wrote the recipe)", need)
	}
}

// lacksNVCC says why a test that compiles kernels at run time cannot run here, in the
// tests' environment.
func lacksNVCC(sys sysroot.Root, it *install.InstallTests) string {
	env := map[string]string{}
	for _, kv := range it.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return host.LacksNVCC(sys, env, it.NVCC)
}

// testFailure is the exit the results call for: 3 when a test's program is missing on
// this node, 1 when a test failed, nil when every test that ran passed.
func testFailure(rs []acceptance.Result) *exitError {
	var missing, failed []string
	for _, r := range rs {
		switch {
		case r.Missing != "":
			missing = append(missing, quote.Term(r.Missing))
		case r.Status == acceptance.Fail:
			failed = append(failed, quote.Term(r.Component+"/"+r.Name))
		}
	}
	switch {
	case len(missing) > 0:
		return &exitError{code: exitEnv, msg: "this node lacks " + strings.Join(missing, ", ") + ", which a test runs: install it, or put it on PATH"}
	case len(failed) > 0:
		return &exitError{code: exitFailed, msg: "failed: " + strings.Join(failed, ", ")}
	}
	return nil
}

// tailShown is how many of a failed test's last lines the table shows (--json has all
// it kept).
const tailShown = 10

// writeTests prints the results as a table, then each failure's reason and last lines.
// What a test printed, and the names the recipe gave, go through quote.Term.
func writeTests(w io.Writer, rep *testReport) {
	t := quote.Term
	node := "1 node"
	if rep.Nodes > 1 {
		node = strconv.Itoa(rep.Nodes) + " nodes"
	}
	fmt.Fprintf(w, "test: %s (recipe %s), %d processes (%s), %s\n\n", t(rep.Prefix), t(rep.Recipe), rep.Procs, t(rep.ProcsFrom), node)
	if len(rep.Tests) == 0 {
		fmt.Fprintln(w, "no tests: the recipe declares none for its components (tests: in the recipe)")
		return
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "TEST\tSTATUS\tSECONDS\tBANDWIDTH (GB/s)")
	counts := map[string]int{}
	for _, r := range rep.Tests {
		counts[r.Status]++
		secs := "-"
		if r.Status != acceptance.NotRun {
			secs = strconv.FormatFloat(r.Seconds, 'f', 1, 64)
		}
		var bw []string
		for _, b := range r.Bandwidths {
			bw = append(bw, t(b.Name)+"="+strconv.FormatFloat(b.GBps, 'f', 2, 64))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t(r.Component+"/"+r.Name), r.Status, secs, orDash(strings.Join(bw, " ")))
	}
	tw.Flush()
	for _, r := range rep.Tests {
		if r.Status == acceptance.Pass {
			continue
		}
		fmt.Fprintf(w, "\n%s: %s: %s\n", t(r.Component+"/"+r.Name), r.Status, t(r.Reason))
		if r.Status == acceptance.Fail && len(r.Argv) > 0 {
			fmt.Fprintf(w, "  ran: %s\n", t(strings.Join(r.Argv, " ")))
		}
		tail := r.Tail[max(0, len(r.Tail)-tailShown):]
		for _, l := range tail {
			fmt.Fprintf(w, "  | %s\n", t(reportClip(l, 200)))
		}
	}
	verdict := "PASS"
	if counts[acceptance.Fail] > 0 {
		verdict = "FAIL"
	}
	fmt.Fprintf(w, "\n%s: %d passed, %d failed, %d not run\n", verdict, counts[acceptance.Pass], counts[acceptance.Fail], counts[acceptance.NotRun])
}
