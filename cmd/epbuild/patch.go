package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/builder/quote"
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
				if err := app.printJSON(firstErr, struct {
					Components []builder.PatchReport `json:"components"`
				}{reports}); err != nil {
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
	cmd.AddCommand(newPatchNewCmd(app))
	return cmd
}

func newPatchNewCmd(app *App) *cobra.Command {
	var (
		from      []string
		component string
		desc      string
		repo      string
	)
	cmd := &cobra.Command{
		Use:   "new DIR --component NAME --from BASE..HEAD | --from FILE...",
		Short: "Write a new local patch set: set.yaml, its pinned patch files and suggested effects",
		Long: `Write a new patch set into the directory DIR, which must not exist (its last element
is the set's name). --from BASE..HEAD makes one patch per commit of that range of the git
work tree --repo (git format-patch); --from FILE... takes existing diff files. set.yaml pins
each patch file by its sha256 and states the effects derived from what the patches add
(a Python method added and called, an environment variable read, an #include, else a line
added); from commits, only effects that hold on HEAD are kept. Review them: they are what
epbuild checks on the patched tree. docs/patch-sets.md describes every field.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// --from a.patch b.patch: the shell gives the second file as an argument
			from = append(from, args[1:]...)
			o := patches.NewOptions{Dir: args[0], Component: patches.Component(component), Description: desc, Repo: repo}
			switch {
			case len(from) == 0:
				return usageError{fmt.Errorf("give --from BASE..HEAD or --from FILE...")}
			case len(from) == 1 && isRange(from[0]):
				o.Range = from[0]
			default:
				o.Files = from
			}
			ns, err := patches.New(cmd.Context(), o)
			if err != nil {
				return err
			}
			fmt.Fprintf(app.Out, "wrote %s: %d patch files, %d suggested effects\n", quote.Term(args[0]), len(ns.Patches), len(ns.Effects))
			for _, p := range ns.Patches {
				fmt.Fprintf(app.Out, "  patch  %s\n", quote.Term(p.Name))
			}
			for _, e := range ns.Effects {
				fmt.Fprintf(app.Out, "  effect %s\n", quote.Term(e.String()))
			}
			if len(ns.Effects) == 0 {
				fmt.Fprintf(app.Out, "no effect could be derived: state what the set does under effects: in %s (docs/patch-sets.md)\n", quote.Term(filepath.Join(args[0], "set.yaml")))
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&from, "from", nil, "a commit range BASE..HEAD, or diff files")
	cmd.Flags().StringVar(&component, "component", "", "the recipe component the set patches (deepep, nvshmem, ...)")
	cmd.Flags().StringVar(&desc, "description", "", "what the set fixes (default: the first commit's subject)")
	cmd.Flags().StringVar(&repo, "repo", ".", "the git work tree of --from BASE..HEAD")
	_ = cmd.MarkFlagRequired("component")
	return cmd
}

// isRange says whether a --from value is a commit range rather than a file.
func isRange(s string) bool {
	if _, err := os.Lstat(s); err == nil {
		return false
	}
	a, b, ok := strings.Cut(s, "..")
	return ok && a != "" && b != ""
}

// warnSets logs what loading the recipe's patch sets found questionable.
func (app *App) warnSets(j *builder.Job) {
	for _, c := range j.Plan.Components {
		for _, s := range c.PatchSets {
			if s == nil {
				continue
			}
			for _, w := range s.Warnings() {
				app.logger().Warn(quote.Term(w), "set", quote.Term(s.Name))
			}
		}
	}
}

func exitCodeOf(err error) int {
	var ec exitCoder
	if errorsAs(err, &ec) {
		return ec.ExitCode()
	}
	return exitFailed
}
