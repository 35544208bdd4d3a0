package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/source"
)

// sourceFlags are shared by the commands that fetch: --set, --mirror.
type sourceFlags struct {
	sets   []string
	mirror string
}

func (f *sourceFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.sets, "set", nil, "override a recipe value (repeatable); keys: see `epbuild show --help`")
	cmd.Flags().StringVar(&f.mirror, "mirror", "", "serve every source from this mirror directory, never the network (default $EPBUILD_MIRROR)")
}

// job resolves a recipe into a builder job with the command's source flags and the
// policy on the compatibility rules.
func (app *App) job(name string, f *sourceFlags, ignore []string, allowUndecided bool) (*builder.Job, error) {
	mirror := f.mirror
	if mirror == "" {
		mirror = app.Getenv("EPBUILD_MIRROR")
	}
	return builder.Open(builder.Options{
		Library: app.library(), Recipe: name, Sets: f.sets, CacheDir: app.Getenv("EPBUILD_CACHE"), Mirror: mirror,
		Log: app.Log, Progress: source.ProgressAuto, IgnoreRules: ignore, AllowUndecided: allowUndecided,
	})
}

// rulesStopped prints the findings that stop a job (their fixes) before its error.
func (app *App) rulesStopped(err error) error {
	var re *builder.RulesError
	if errors.As(err, &re) {
		writeFindings(app.Err, re.Findings)
	}
	return err
}

func newRecipeCmd(app *App) *cobra.Command {
	var (
		sf             sourceFlags
		out            string
		planOnly       bool
		force          string
		allowApplied   bool
		asJSON         bool
		ignore         []string
		allowUndecided bool
		rebuildCheck   bool
	)
	cmd := &cobra.Command{
		Use:   "recipe NAME|FILE",
		Short: "Build a recipe: fetch, patch, build, check, package (the main job)",
		Long: `Build a recipe into a checked, installable artifact <recipe>-<plan>.tar.zst:
resolve the pins, check the compatibility rules (exit 2 on an error-level finding, or on
an error-level rule that cannot be decided unless --allow-undecided), check the toolchain
(exit 3 naming what is missing), fetch, apply the patch sets in order and prove their
effects, build, run the checks on the staged prefix, and pack the prefix with
manifest.json and env.sh.

Every stage's output is stored by key: a rerun with nothing changed does no work, a
failed run resumes at the stage that failed, and --force[=STAGE] reruns a stage and those
after it (patch, build, check, package).

Builds are reproducible: the same plan gives the same bytes wherever the cache is and
whichever machine of the same toolchain builds it. They run in /tmp/epbuild-<component>-<key>
(EPBUILD_BUILD_ROOT moves that root; builds meant to agree need the same one), with the
build directory mapped away for the host compilers, a seed for nvcc, SOURCE_DATE_EPOCH and
a fixed locale and time zone. --rebuild-check builds the plan a second time from nothing at
another place and fails (exit 1), printing the difference, when the two artifacts differ.
EPBUILD_REPRO=off turns the measures off, to measure what they cost; nothing else.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rebuildCheck && planOnly {
				return usageError{errors.New("--rebuild-check builds: it does not go with --plan")}
			}
			repro, err := builder.ParseRepro(app.Getenv)
			if err != nil {
				return err
			}
			j, err := app.job(args[0], &sf, ignore, allowUndecided)
			if err != nil {
				return err
			}
			opts := builder.BuildOptions{
				OutDir: out, AllowApplied: allowApplied, Version: version, SourceDateEpoch: app.Getenv("SOURCE_DATE_EPOCH"),
				Environ: os.Environ(), Getenv: app.Getenv, PlanOnly: planOnly, Repro: repro,
			}
			if force != "" {
				opts.Force = strings.Split(force, ",")
			}
			build := j.Build
			if rebuildCheck {
				build = j.BuildAndCheck
			}
			res, err := build(cmd.Context(), opts)
			var nr *builder.NotReproducibleError
			if errors.As(err, &nr) && !asJSON {
				writeStages(app.Out, res.Stages, false)
				fmt.Fprintf(app.Out, "\nartifact %s\nsha256   %s\n\nrebuild check: the second build differs\n", res.Artifact, res.SHA256)
				writeDiff(app.Out, nr.Check.Diff)
				return err
			}
			if errors.As(err, &nr) {
				if werr := writeJSON(app.Out, res); werr != nil {
					return werr
				}
				return err
			}
			if err != nil {
				return app.rulesStopped(err)
			}
			if planOnly {
				if asJSON {
					return writeJSON(app.Out, map[string]any{"plan": res.Plan, "stages": res.Stages})
				}
				writePlan(app.Out, res.Plan)
				fmt.Fprintln(app.Out)
				writeStages(app.Out, res.Stages, true)
				return nil
			}
			if asJSON {
				return writeJSON(app.Out, res)
			}
			writeStages(app.Out, res.Stages, false)
			fmt.Fprintf(app.Out, "\nartifact %s\nsha256   %s\n", res.Artifact, res.SHA256)
			if res.Rebuild != nil {
				fmt.Fprintf(app.Out, "rebuild check: a second build from nothing at another place gave the same bytes (%d entries)\n", res.Rebuild.Diff.Entries)
			}
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVarP(&out, "out", "o", "out", "directory for the artifact")
	cmd.Flags().BoolVar(&planOnly, "plan", false, "print the plan with its stage keys and what is cached; do nothing")
	cmd.Flags().StringVar(&force, "force", "", "rerun these stages and the ones after them (all, patch, build, check, package)")
	cmd.Flags().Lookup("force").NoOptDefVal = "all"
	cmd.Flags().BoolVar(&allowApplied, "allow-applied", false, "continue when a patch is already in the tree (reported), instead of failing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringArrayVar(&ignore, "ignore-rule", nil, "build despite an error-level finding of this rule id (e.g. to reproduce a known failure); recorded in the manifest")
	cmd.Flags().BoolVar(&rebuildCheck, "rebuild-check", false, "build the plan a second time from nothing at another place, compare the artifacts, and fail (exit 1) printing the difference when they differ")
	cmd.Flags().BoolVar(&allowUndecided, "allow-undecided", false, "build although an error-level rule cannot be decided (a commit no history at hand knows); recorded in the manifest")
	return cmd
}

func writeStages(w io.Writer, ev []builder.StageEvent, planned bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tCOMPONENT\tKEY\tSTATE")
	for _, e := range ev {
		state := "done"
		switch {
		case e.Cached:
			state = "cached"
		case planned:
			state = "to do"
		default:
			state = fmt.Sprintf("done in %.1fs", e.Seconds)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.Stage, orDash(e.Component), e.Key[:12], state)
	}
	tw.Flush()
}

func newFetchCmd(app *App) *cobra.Command {
	var (
		sf  sourceFlags
		out string
	)
	cmd := &cobra.Command{
		Use:   "fetch NAME|FILE",
		Short: "Fetch every pinned source of a recipe into the cache; with --out, lay out workspaces",
		Long: `Fetch every pinned source of a recipe into the cache (checked against its pin). With
--out DIR, each git source becomes a real git checkout at the pinned commit (DIR/<component>)
and each archive a plain tree.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			j, err := app.job(args[0], &sf, nil, false)
			if err != nil {
				return err
			}
			reps, err := j.Fetch(cmd.Context(), out)
			for _, r := range reps {
				switch {
				case r.Python != "":
					fmt.Fprintf(app.Out, "%s\tfrom the Python environment (%s)\n", r.Component, r.Python)
				case r.Dest != "":
					fmt.Fprintf(app.Out, "%s\t%s\t%s\n", r.Component, r.Pin, r.Dest)
				default:
					fmt.Fprintf(app.Out, "%s\t%s\tcached\n", r.Component, r.Pin)
				}
			}
			return err
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVar(&out, "out", "", "lay out a workspace per component under this directory")
	return cmd
}

func newMirrorCmd(app *App) *cobra.Command {
	var sf sourceFlags
	cmd := &cobra.Command{
		Use:   "mirror RECIPE... DIR",
		Short: "Write a mirror holding exactly what these recipes need, for an air-gapped site",
		Args:  cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var jobs []*builder.Job
			for _, name := range args[:len(args)-1] {
				j, err := app.job(name, &sf, nil, false)
				if err != nil {
					return err
				}
				jobs = append(jobs, j)
			}
			rep, err := builder.Mirror(cmd.Context(), args[len(args)-1], jobs...)
			if err != nil {
				return err
			}
			fmt.Fprintf(app.Out, "mirror %s: %d git pins, %d archives\n", rep.Dir, rep.Git, rep.Archives)
			return nil
		},
	}
	sf.add(cmd)
	return cmd
}

func newCacheCmd(app *App) *cobra.Command {
	open := func() (*cache.Cache, error) {
		dir := app.Getenv("EPBUILD_CACHE")
		if dir == "" {
			var err error
			if dir, err = cache.DefaultDir(); err != nil {
				return nil, err
			}
		}
		return cache.Open(dir)
	}
	cmd := &cobra.Command{Use: "cache", Short: "Look at and clean the source cache ($EPBUILD_CACHE)"}
	cmd.AddCommand(&cobra.Command{
		Use: "ls", Short: "List cached sources", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := open()
			if err != nil {
				return err
			}
			ents, err := c.List()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tKEY\tSIZE\tLAST USED\tURL")
			for _, e := range ents {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Kind, e.Key, humanBytes(e.Size), e.LastUsed.Format("2006-01-02 15:04"), e.URL)
			}
			return tw.Flush()
		},
	}, &cobra.Command{
		Use: "du", Short: "Print the cache's size", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := open()
			if err != nil {
				return err
			}
			n, err := c.Usage()
			if err != nil {
				return err
			}
			fmt.Fprintf(app.Out, "%s\t%s\n", humanBytes(n), c.Dir())
			return nil
		},
	})
	var older string
	gc := &cobra.Command{
		Use: "gc", Short: "Remove cached sources unused for a while (--older-than, default 720h)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := open()
			if err != nil {
				return err
			}
			d, err := parseDuration(older)
			if err != nil {
				return usageError{err}
			}
			gone, err := c.GC(cmd.Context(), cache.UnusedFor(d, timeNow()))
			if err != nil {
				return err
			}
			for _, e := range gone {
				fmt.Fprintf(app.Out, "removed %s %s (%s)\n", e.Kind, e.Key, humanBytes(e.Size))
			}
			return nil
		},
	}
	gc.Flags().StringVar(&older, "older-than", "720h", "remove entries not used for this long (Go duration)")
	cmd.AddCommand(gc)
	return cmd
}
