package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/fleet"
)

func newFleetCmd(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fleet",
		Short: "Compare many nodes' verify-install reports",
	}
	var asJSON bool
	report := &cobra.Command{
		Use:   "report FILE...|DIR... [--json]",
		Short: "One table of what differs between nodes, each with its fix",
		Long: `Read many nodes' ` + "`epbuild verify-install --host --json`" + ` reports (files, or the *.json files
of directories) and print one table: each node that differs from the majority in its
install (recipe, plan, manifest), the NVSHMEM its processes load, its NCCL, its GPU↔NIC
mapping or its epbuild, and each check whose status differs between nodes, with the fix.
A node is named by its report's hostname, else by the file name without .json. Checks
that fail on every node are listed after the table. See docs/fleet.md for collecting the
reports with Slurm or Kubernetes.

Exit codes: 0 the nodes agree and none failed a check; 1 a node differs or failed; 2 a
report cannot be read (named, with line:column for broken JSON).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			nodes, err := fleet.Load(args)
			if err != nil {
				return err
			}
			rep := fleet.Compare(nodes)
			if asJSON {
				if err := app.printJSON(struct {
					OK  bool     `json:"ok"`
					Odd []string `json:"odd"`
					*fleet.Report
				}{rep.OK(), rep.Odd(), rep}); err != nil {
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
	cmd.AddCommand(report)
	return cmd
}

// maxCell keeps the table readable; --json has every value whole.
const maxCell = 60

func writeFleet(w io.Writer, r *fleet.Report) {
	odd := r.Odd()
	verb := "differ"
	if len(odd) == 1 {
		verb = "differs"
	}
	fmt.Fprintf(w, "fleet: %d nodes, %d %s from the rest", len(r.Nodes), len(odd), verb)
	if len(odd) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(odd, ", "))
	}
	fmt.Fprintf(w, ", %d failed a check\n\n", len(r.Failing))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tRECIPE\tPLAN\tPASS\tWARN\tFAIL\tSKIP\tREPORT")
	for _, n := range r.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", n.Name, orDash(n.Recipe), orDash(n.PlanKey[:min(12, len(n.PlanKey))]),
			n.Counts["pass"], n.Counts["warn"], n.Counts["fail"], n.Counts["skip"], n.File)
	}
	tw.Flush()
	if len(r.Differences) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tDIFFERS IN\tFOUND\tFLEET")
		for _, d := range r.Differences {
			fl := d.Fleet
			if d.Of > 0 {
				fl = fmt.Sprintf("%s (%d of %d)", reportClip(d.Fleet, maxCell), d.Of, len(r.Nodes))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", d.Node, d.What, reportClip(reportLine(d.Found), maxCell), fl)
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
				fmt.Fprintf(w, "  %s:\n", d.Node)
				last = d.Node
			}
			fmt.Fprintf(w, "    - %s\n", d.Fix)
		}
	}
	if len(r.FailEverywhere) > 0 {
		fmt.Fprintln(w, "\nFAIL ON EVERY NODE")
		for _, f := range r.FailEverywhere {
			fmt.Fprintf(w, "  %s: %s\n", f.ID, orDash(f.Fix))
		}
	}
	verdict := "OK: the nodes agree"
	switch {
	case len(odd) > 0:
		verdict = "DIFFER: " + strings.Join(odd, ", ")
	case len(r.Failing) > 0:
		verdict = "FAILED: the nodes agree, and fail"
	}
	fmt.Fprintf(w, "\n%s\n", verdict)
}
