package main

import (
	"fmt"
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
		Use:               "patch NAME|FILE",
		ValidArgsFunction: app.completeRecipes(1),
		Short:             "Apply (or --check) every patch set of a recipe on fresh workspaces and report each patch",
		Long: `Apply every patch set of a recipe, in order, on fresh checkouts of its pinned sources,
and print a line per patch: applied, applied at offset N, already applied, or conflict
(with the file, hunk, line, the expected and found context, and where the hunk would fit
with which --max-offset), then the sets' effects.
--check applies in memory only; --out DIR keeps the patched trees (DIR/<component>).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := app.job(args[0], &sf, nil, false)
			if err != nil {
				return err
			}
			opts := builder.PatchOptions{Out: out, Options: patches.Options{AllowApplied: allowApplied, CheckOnly: check}}
			if cmd.Flags().Changed("max-offset") {
				opts.MaxOffset = &maxOffset
			}
			reports, firstErr := j.Patch(cmd.Context(), opts)
			if reports == nil && firstErr != nil {
				return firstErr
			}
			if asJSON {
				if err := app.printJSON(struct {
					OK         bool                  `json:"ok"`
					Components []builder.PatchReport `json:"components"`
				}{firstErr == nil, reports}); err != nil {
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
