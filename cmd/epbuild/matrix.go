package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/compat"
)

func newMatrixCmd(app *App) *cobra.Command {
	var (
		axes           []string
		sets           []string
		format         string
		mirror         string
		allowUndecided bool
	)
	cmd := &cobra.Command{
		Use:               "matrix RECIPE",
		ValidArgsFunction: app.completeRecipes(1),
		Short:             "Print the CI matrix of a recipe: the combinations the rules allow, with their env",
		Long: `Print the cross product of the axes minus the combinations a rule forbids (each
exclusion with its rule ids), each allowed cell with the env that warn and advice rules
add and a ready build command. Axes come from --axis COMPONENT=V1,V2 (or a --set key
with a dot: --axis toolchain.cuda=12.9,13.0), else from the recipe's matrix: field.

A combination for which an error-level rule cannot be decided (a commit no history at
hand knows) is excluded too, as "R3 undecided", unless --allow-undecided; --mirror adds
the mirror's repositories to the history that decides.

On a component axis the value bundled keeps the component the recipe takes from the
Python environment (torch's own NCCL) where the other values build a release of the
catalogue from source: --axis nccl=bundled,2.21.5-1,2.28.3-1. A version may name the
catalogue's pin kind it takes, VERSION:git or VERSION:archive (--set C.source=KIND):
--axis nvshmem=3.4.5:git,3.3.20:archive where the recipe builds NVSHMEM (efa-aws); in a
recipe that takes it from the Python environment (single-node) a bare version pins the
wheel, and :git is refused (no build steps).

Formats: text (default), json (cells and exclusions), github (a strategy.matrix value:
{"include": [...]}), gitlab (a parallel: matrix: block).

epbuild matrix run RECIPE --axis ... builds, installs, verifies and tests each cell here.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch format {
			case "text", "json", "github", "gitlab":
			default:
				return usageError{fmt.Errorf("--format %q: use text, json, github or gitlab", format)}
			}
			var ax []compat.Axis
			for _, a := range axes {
				x, err := compat.ParseAxis(a)
				if err != nil {
					return usageError{fmt.Errorf("--axis: %w", err)}
				}
				for _, y := range ax {
					if y.Key == x.Key {
						return usageError{fmt.Errorf("--axis %s is given twice", x.Name)}
					}
				}
				ax = append(ax, x)
			}
			mirror := mirror
			if mirror == "" {
				mirror = app.Getenv("EPBUILD_MIRROR")
			}
			m, err := builder.BuildMatrix(cmd.Context(), builder.MatrixOptions{Axes: ax, Options: builder.Options{
				Library: app.library(), Recipe: args[0], Sets: sets, CacheDir: app.Getenv("EPBUILD_CACHE"), Mirror: mirror,
				Log: app.Log, AllowUndecided: allowUndecided}})
			if err != nil {
				return err
			}
			if len(m.Cells) == 0 {
				app.Log.Warn("every combination is excluded by a rule", "recipe", args[0])
			}
			switch format {
			case "json":
				return app.printJSON(nil, m)
			case "github":
				b, err := m.GitHub()
				if err != nil {
					return err
				}
				_, err = app.Out.Write(b)
				return err
			case "gitlab":
				b, err := m.GitLab()
				if err != nil {
					return err
				}
				_, err = app.Out.Write(b)
				return err
			}
			tw := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			// warn:R13? is a warning the rules could not decide at plan stage
			fmt.Fprintln(tw, "CELL\tSTATUS\tENV, WARNINGS / RULES")
			for _, c := range m.Cells {
				var env []string
				for _, k := range slices.Sorted(maps.Keys(c.Env)) {
					env = append(env, k+"="+c.Env[k])
				}
				for _, f := range c.Findings {
					if f.Severity == compat.SeverityWarn {
						w := "warn:" + f.ID
						if f.Unknown {
							w += "?"
						}
						if !slices.Contains(env, w) {
							env = append(env, w)
						}
					}
				}
				fmt.Fprintf(tw, "%s\trun\t%s\n", c.Name, strings.Join(env, " "))
			}
			for _, e := range m.Excluded {
				why := slices.Clone(e.Rules)
				for _, u := range e.Undecided {
					why = append(why, u+" undecided")
				}
				fmt.Fprintf(tw, "%s\texcluded\t%s\n", e.Name, strings.Join(why, ", "))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, c := range m.Cells {
				fmt.Fprintf(app.Out, "\n# %s\n%s\n", c.Name, c.Command)
			}
			return nil
		},
	}
	cmd.AddCommand(newMatrixRunCmd(app))
	cmd.Flags().StringArrayVar(&axes, "axis", nil, "an axis, COMPONENT=V1,V2,... (bundled: the Python environment's; VERSION:git or VERSION:archive: that pin kind; repeatable); default: the recipe's matrix: field")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "an override applied to every cell: `KEY=VALUE` (repeatable; the keys: epbuild show --help)")
	cmd.Flags().StringVar(&format, "format", "text", "output: text, json, github or gitlab")
	_ = cmd.RegisterFlagCompletionFunc("format", oneOf("text", "json", "github", "gitlab"))
	cmd.Flags().StringVar(&mirror, "mirror", "", "decide the rules' commit conditions also from the repositories of this mirror (default $EPBUILD_MIRROR)")
	cmd.Flags().BoolVar(&allowUndecided, "allow-undecided", false, "keep cells for which an error-level rule cannot be decided (excluded by default)")
	return cmd
}
