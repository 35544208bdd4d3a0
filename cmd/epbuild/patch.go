package main

import (
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/patches"
)

func newPatchCmd(app *App) *cobra.Command {
	var (
		sf           sourceFlags
		check        bool
		out          string
		asJSON       bool
		allowApplied bool
		maxOffset    int
	)
	cmd := &cobra.Command{
		Use:   "patch NAME|FILE",
		Short: "Apply (or --check) every patch set of a recipe on fresh workspaces and report each patch",
		Long: `Apply every patch set of a recipe, in order, on fresh checkouts of its pinned sources,
and print a line per patch: applied, applied at offset N, already applied, or conflict
(with the file, hunk, line, the expected and found context, and where the hunk would fit
with which --max-offset), then the sets' effects.
--check applies in memory only; --out DIR keeps the patched trees (DIR/<component>).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := app.open(args[0], &sf)
			if err != nil {
				return err
			}
			root := out
			if root == "" {
				if root, err = os.MkdirTemp("", "epbuild-patch-"); err != nil {
					return err
				}
				defer os.RemoveAll(root)
			}
			opts := patches.Options{AllowApplied: allowApplied, CheckOnly: check}
			if cmd.Flags().Changed("max-offset") {
				opts.MaxOffset = &maxOffset
			}
			type compReport struct {
				Component string                `json:"component"`
				Tree      string                `json:"tree,omitempty"`
				Sets      []*patches.SetResult  `json:"sets"`
				Effects   []builder.CheckResult `json:"effects,omitempty"`
				Error     string                `json:"error,omitempty"`
			}
			var reports []compReport
			var firstErr error
			for _, c := range e.plan.Components {
				c := c
				if len(c.PatchSets) == 0 {
					continue
				}
				tree := filepath.Join(root, c.Name)
				if err := builder.Materialize(cmd.Context(), e.sources, &c, tree); err != nil {
					return classifySource(err)
				}
				sets, effects, err := builder.ApplySets(cmd.Context(), e.sources, &c, tree, opts)
				rep := compReport{Component: c.Name, Sets: sets, Effects: effects}
				if out != "" {
					rep.Tree = tree
				}
				if err != nil {
					rep.Error = err.Error()
					if firstErr == nil {
						firstErr = err
					}
				}
				for _, ef := range effects {
					if !ef.OK() && firstErr == nil {
						firstErr = &builder.ChecksFailed{Where: "the patched tree of " + c.Name, Results: effects}
					}
				}
				reports = append(reports, rep)
			}
			if asJSON {
				if err := writeJSON(app.Out, reports); err != nil {
					return err
				}
				if firstErr != nil {
					return &exitError{code: exitCodeOf(firstErr)}
				}
				return nil
			}
			tw := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "COMPONENT\tSET\tPATCH\tSTATUS\tFILES")
			for _, r := range reports {
				for _, s := range r.Sets {
					for _, p := range s.Patches {
						status := string(p.Status)
						if p.Moved() {
							for _, f := range p.Files {
								for _, h := range f.Hunks {
									if h.Offset != 0 {
										status += fmt.Sprintf(" (%s hunk %d at offset %+d)", f.Path, h.Index, h.Offset)
									}
								}
							}
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", r.Component, s.Set, p.Name, status, len(p.Files))
					}
				}
				for _, ef := range r.Effects {
					fmt.Fprintf(tw, "%s\t\teffect\t%s\t%s\n", r.Component, ef.Status, ef.Expected)
				}
				if r.Tree != "" {
					fmt.Fprintf(tw, "%s\t\ttree\t%s\t\n", r.Component, r.Tree)
				}
			}
			tw.Flush()
			return firstErr
		},
	}
	sf.add(cmd)
	cmd.Flags().BoolVar(&check, "check", false, "check that every patch applies; write nothing")
	cmd.Flags().StringVar(&out, "out", "", "keep the patched trees under this directory")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().BoolVar(&allowApplied, "allow-applied", false, "continue past a patch already in the tree (reported)")
	cmd.Flags().IntVar(&maxOffset, "max-offset", 0, "allow hunks this many lines away from where the patch says (reported per hunk)")
	return cmd
}

func exitCodeOf(err error) int {
	var ec exitCoder
	if errorsAs(err, &ec) {
		return ec.ExitCode()
	}
	return exitFailed
}
