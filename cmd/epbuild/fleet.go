package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/fleet"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/quote"
)

func newFleetCmd(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Compare many nodes' verify-install reports",
	}
	var (
		asJSON    bool
		hostsFile string
		slurm     bool
		maxBytes  int64
		artifacts string
		slowBelow float64
	)
	report := &cobra.Command{
		Use:   "report FILE...|DIR... [--hosts FILE | --slurm] [--artifacts DIR] [--slow-below F] [--max-report-bytes N] [--json]",
		Short: "One table of what differs between nodes, each with its fix",
		Long: `Read many nodes' ` + "`epbuild verify-install --host --json`" + ` reports (files, or the *.json files
of directories) and print one table: each node that differs from the majority in its
install (recipe, plan, manifest), the NVSHMEM its processes load, its NCCL, its GPU↔NIC
mapping or its epbuild, and each check whose status differs between nodes, with the fix.
A node is named by its report's hostname, else by the file name without .json. Checks
that fail on every node are listed after the table. See docs/fleet.md for collecting the
reports with Slurm or Kubernetes.

` + "`epbuild test --json`" + ` documents (docs/test.md) are read too, beside the reports or alone,
and joined to the node of their hostname: a test that failed on a node is a difference of
that node, and a BANDWIDTH table shows each test's bandwidths on every node that passed
it, with the nodes' median; a node below --slow-below (default 0.9) times the median is
SLOW, a difference.

A node must be expected to be missed: --hosts FILE (one host a line, '#' comments, Slurm's
node[01-04] syntax, and ` + "`kubectl get nodes -o name`" + `'s node/NAME) or --slurm (the job's
SLURM_JOB_NODELIST) lists the nodes that must have reported. A listed node without a
report, and a report that cannot be read (not a regular file, over --max-report-bytes,
not a verify-install report; named with line:column for broken JSON), is a failing row;
the other nodes are still compared. --artifacts DIR, where the fleet's artifact lies,
makes the install fix a command to paste.

Exit codes: 0 the nodes agree and none failed a check; 1 a node differs, failed, is
missing or its report cannot be read; 2 bad arguments (a path that does not exist, a
directory without reports and no host list, an unreadable host list).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			expected, err := fleetHosts(app, hostsFile, slurm)
			if err != nil {
				return err
			}
			nodes, err := fleet.Load(args, fleet.LoadOptions{MaxBytes: maxBytes, Expected: expected})
			if err != nil {
				return err
			}
			if slowBelow <= 0 || slowBelow > 1 {
				return usageError{fmt.Errorf("--slow-below %g: give a fraction of the median above 0 and at most 1 (0.9: 10%% under the median is slow)", slowBelow)}
			}
			rep := fleet.Compare(nodes, fleet.Options{ArtifactDir: artifacts, SlowBelow: slowBelow})
			if asJSON {
				var fail error
				if !rep.OK() {
					fail = &exitError{code: exitFailed, msg: "the nodes differ or a check failed"}
				}
				if err := app.printJSON(fail, struct {
					Odd []string `json:"odd"`
					*fleet.Report
				}{rep.Odd(), rep}); err != nil {
					return err
				}
			} else {
				writeFleet(app.Out, rep)
			}
			if !rep.OK() {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	report.Flags().BoolVar(&asJSON, "json", false, "print the comparison as JSON")
	report.Flags().StringVar(&hostsFile, "hosts", "", "the nodes that must have reported: one host a line (kubectl get nodes -o name's node/NAME too)")
	report.Flags().BoolVar(&slurm, "slurm", false, "the nodes that must have reported are the Slurm job's (SLURM_JOB_NODELIST)")
	report.Flags().Int64Var(&maxBytes, "max-report-bytes", fleet.DefaultMaxReport, "the largest report read (bytes); a larger one is a failing row")
	report.Flags().StringVar(&artifacts, "artifacts", "", "the directory holding the fleet's artifact, for the install fix's command")
	report.Flags().Float64Var(&slowBelow, "slow-below", fleet.DefaultSlowBelow, "a node whose test bandwidth is below this fraction of the nodes' median is slow")
	report.MarkFlagsMutuallyExclusive("hosts", "slurm")
	cmd.AddCommand(report)
	return cmd
}

// fleetHosts is the list of nodes that must have reported: --hosts FILE, else the Slurm
// job's with --slurm, else nil (whichever reported).
func fleetHosts(app *App, file string, slurm bool) ([]string, error) {
	switch {
	case file != "":
		hosts, err := fleet.ReadHosts(file)
		if err != nil {
			return nil, &fleet.InputError{File: file, Err: err}
		}
		return hosts, nil
	case slurm:
		for _, k := range []string{"SLURM_JOB_NODELIST", "SLURM_NODELIST"} {
			if list := strings.TrimSpace(app.Getenv(k)); list != "" {
				hosts, err := host.ExpandHostlist(list)
				if err != nil {
					return nil, usageError{fmt.Errorf("%s: %w", k, err)}
				}
				return hosts, nil
			}
		}
		return nil, usageError{fmt.Errorf("--slurm: SLURM_JOB_NODELIST is not set: run fleet report inside the job's allocation (salloc, sbatch), or list the nodes with --hosts FILE")}
	}
	return nil, nil
}

// maxCell keeps the table readable; --json has every value whole.
const maxCell = 60

// writeFleet prints the report as a table. Every string in it came from a report (or a
// host list): each is passed through quote.Term, so that no hostname or check text can
// move the cursor, set a title, add a line or a column.
func writeFleet(w io.Writer, r *fleet.Report) {
	t := quote.Term
	odd := r.Odd()
	verb := "differ"
	if len(odd) == 1 {
		verb = "differs"
	}
	fmt.Fprintf(w, "fleet: %d nodes, %d %s from the rest", len(r.Nodes), len(odd), verb)
	if len(odd) > 0 {
		fmt.Fprintf(w, " (%s)", termJoin(odd))
	}
	fmt.Fprintf(w, ", %d failed a check\n\n", len(r.Failing))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRECIPE\tPLAN\tPASS\tWARN\tFAIL\tSKIP\tREPORT")
	for _, n := range r.Nodes {
		file := orDash(n.File)
		if n.TestsOnly {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t%s\n", t(n.Name), t(file))
			continue
		}
		if n.Problem != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t%s\n", t(n.Name), t(file))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", t(n.Name), t(orDash(n.Recipe)), t(orDash(n.PlanKey[:min(12, len(n.PlanKey))])),
			n.Counts["pass"], n.Counts["warn"], n.Counts["fail"], n.Counts["skip"], t(file))
	}
	tw.Flush()
	if len(r.Differences) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tDIFFERS IN\tFOUND\tFLEET")
		for _, d := range r.Differences {
			fl := t(reportClip(d.Fleet, maxCell))
			if d.Of > 0 {
				fl = fmt.Sprintf("%s (%d of %d)", fl, d.Of, len(r.Nodes))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t(d.Node), t(d.What), t(reportClip(reportLine(d.Found), maxCell)), fl)
		}
		tw.Flush()
		fmt.Fprintln(w, "\nFIX")
		last := ""
		seen := map[string]bool{}
		for _, d := range r.Differences {
			if seen[d.Node+"\x00"+d.Fix] {
				continue
			}
			seen[d.Node+"\x00"+d.Fix] = true
			if d.Node != last {
				fmt.Fprintf(w, "  %s:\n", t(d.Node))
				last = d.Node
			}
			fmt.Fprintf(w, "    - %s\n", t(d.Fix))
			if d.Command != "" {
				fmt.Fprintf(w, "      %s\n", pasteLine(d.Command))
			}
		}
	}
	writeBandwidths(w, r)
	if len(r.FailEverywhere) > 0 {
		fmt.Fprintln(w, "\nFAIL ON EVERY NODE")
		for _, f := range r.FailEverywhere {
			fmt.Fprintf(w, "  %s: %s\n", t(f.ID), t(orDash(f.Fix)))
		}
	}
	verdict := "OK: the nodes agree"
	switch {
	case len(odd) > 0:
		verdict = "DIFFER: " + termJoin(odd)
	case len(r.Failing) > 0:
		verdict = "FAILED: the nodes agree, and fail"
	}
	fmt.Fprintf(w, "\n%s\n", verdict)
}

// pasteLine prints a command line made of quote.Shell words as it is where quote.Term
// would only double its backslashes (a single quote inside a quoted word is written with
// one), which would break the paste; a line with anything else Term escapes is shown
// escaped, as every report string.
func pasteLine(cmd string) string {
	if bare := strings.ReplaceAll(cmd, `\`, ""); quote.Term(bare) == bare {
		return cmd
	}
	return quote.Term(cmd)
}

func termJoin(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = quote.Term(n)
	}
	return strings.Join(out, ", ")
}

// writeBandwidths prints each test's bandwidths on every node that passed it, slowest
// first, beside the nodes' median.
func writeBandwidths(w io.Writer, r *fleet.Report) {
	if len(r.Bandwidths) == 0 {
		return
	}
	t := quote.Term
	fmt.Fprintf(w, "\nBANDWIDTH (GB/s; SLOW: below %.2f× the nodes' median)\n", r.SlowBelow)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TEST\tBANDWIDTH\tNODE\tGB/S\t×MEDIAN\t")
	for _, b := range r.Bandwidths {
		for _, n := range b.Nodes {
			flag := ""
			if n.Slow {
				flag = "SLOW"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%s\n", t(b.Test), t(b.Name), t(n.Node), n.GBps, n.Ratio, flag)
		}
	}
	tw.Flush()
}
