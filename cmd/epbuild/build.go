package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
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

// env is what one invocation works with: the resolved plan, the cache, the fetchers.
type env struct {
	plan    *builder.Plan
	cache   *cache.Cache
	sources *builder.FetchSources
}

func (app *App) open(name string, f *sourceFlags) (*env, error) {
	res, err := builder.NewResolver(app.library())
	if err != nil {
		return nil, err
	}
	plan, err := res.Resolve(name, f.sets)
	if err != nil {
		return nil, err
	}
	dir := app.Getenv("EPBUILD_CACHE")
	if dir == "" {
		if dir, err = cache.DefaultDir(); err != nil {
			return nil, err
		}
	}
	c, err := cache.Open(dir)
	if err != nil {
		return nil, err
	}
	mirror := f.mirror
	if mirror == "" {
		mirror = app.Getenv("EPBUILD_MIRROR")
	}
	src, err := builder.NewSources(c, mirror, app.Log, source.ProgressAuto)
	if err != nil {
		return nil, classifySource(err)
	}
	return &env{plan: plan, cache: c, sources: src}, nil
}

// classifySource maps source errors to exit codes: a bad pin is bad input.
func classifySource(err error) error {
	if err == nil {
		return nil
	}
	if e := (*source.Error)(nil); errorsAs(err, &e) && e.Kind == source.KindBadPin {
		return &exitError{code: exitBadInput, msg: err.Error()}
	}
	return err
}

func newRecipeCmd(app *App) *cobra.Command {
	var (
		sf           sourceFlags
		out          string
		planOnly     bool
		force        string
		allowApplied bool
		asJSON       bool
		ignore       []string
	)
	cmd := &cobra.Command{
		Use:   "recipe NAME|FILE",
		Short: "Build a recipe: fetch, patch, build, check, package (the main job)",
		Long: `Build a recipe into a checked, installable artifact <recipe>-<plan>.tar.zst:
resolve the pins, check the toolchain (exit 3 naming what is missing), fetch, apply the
patch sets in order and prove their effects, build, run the checks on the staged prefix,
and pack the prefix with manifest.json and env.sh.

Every stage's output is stored by key: a rerun with nothing changed does no work, a
failed run resumes at the stage that failed, and --force[=STAGE] reruns a stage and those
after it (patch, build, check, package).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			e, err := app.open(args[0], &sf)
			if err != nil {
				return err
			}
			p := e.plan
			var pkgs []string
			for _, c := range p.Components {
				if c.Source.Python != nil {
					pkgs = append(pkgs, c.Source.Python.Package)
				}
			}
			// the rules first: a plan a rule forbids is bad input, before any work
			findings, err := app.compatFindings(cmd.Context(), p, nil, ignore, e.cache.Dir())
			if err != nil {
				return err
			}
			prober := &builder.Prober{Getenv: app.Getenv, Packages: pkgs, Torch: p.Toolchain.Torch != "",
				CMakePackages: builder.NeedsCMakePackages(p), Prefixes: builder.CMakePrefixPath(p)}
			tc := prober.ProbeCached(cmd.Context(), filepath.Join(e.cache.Dir(), "toolchain"))

			store, err := builder.OpenStore(e.cache.Dir())
			if err != nil {
				return err
			}
			r := &builder.Runner{
				Store: store, Sources: e.sources, Log: app.Log, Toolchain: tc, Environ: os.Environ(),
				OutDir: out, AllowApplied: allowApplied, Version: version, SourceDateEpoch: app.Getenv("SOURCE_DATE_EPOCH"),
				Findings: findings,
			}
			if sde := app.Getenv("SOURCE_DATE_EPOCH"); sde != "" {
				if n, err := strconv.ParseInt(sde, 10, 64); err != nil || n < 0 {
					return usageError{fmt.Errorf("SOURCE_DATE_EPOCH=%q: give whole seconds since 1970 (e.g. $(git log -1 --format=%%ct)), or unset it to use the newest pinned commit's time", sde)}
				}
			}
			if force != "" {
				r.Force = strings.Split(force, ",")
				for _, f := range r.Force {
					if f != "all" && f != "patch" && f != "build" && f != "check" && f != "package" {
						return usageError{fmt.Errorf("--force=%s: use all, patch, build, check or package", f)}
					}
				}
			}
			if planOnly {
				ev := r.Keys(p)
				if asJSON {
					return writeJSON(app.Out, map[string]any{"plan": p, "stages": ev})
				}
				writePlan(app.Out, p)
				fmt.Fprintln(app.Out)
				writeStages(app.Out, ev, true)
				return nil
			}
			// everything missing at once (exit 3), then what the rules say of this toolchain
			if err := builder.Preflight(p, tc); err != nil {
				return err
			}
			pre, err := app.compatFindings(cmd.Context(), p, tc, ignore, e.cache.Dir())
			if err != nil {
				return err
			}
			r.Findings = append(r.Findings, pre...)
			res, err := r.Run(cmd.Context(), p)
			if err != nil {
				return classifySource(err)
			}
			if asJSON {
				return writeJSON(app.Out, res)
			}
			writeStages(app.Out, res.Stages, false)
			fmt.Fprintf(app.Out, "\nartifact %s\nsha256   %s\n", res.Artifact, res.SHA256)
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
			e, err := app.open(args[0], &sf)
			if err != nil {
				return err
			}
			for _, c := range e.plan.Components {
				c := c
				switch {
				case c.Source.Git != nil:
					g := c.Source.Git
					if err := e.sources.For(g.URL).FetchGit(cmd.Context(), source.Git{URL: g.URL, Commit: g.Commit, Ref: g.Ref}); err != nil {
						return classifySource(err)
					}
				case c.Source.Archive != nil:
					a := c.Source.Archive
					if _, err := e.sources.For(a.URL).FetchArchive(cmd.Context(), source.Archive{URL: a.URL, SHA256: a.SHA256, Strip: a.Strip}); err != nil {
						return classifySource(err)
					}
				default:
					fmt.Fprintf(app.Out, "%s\tfrom the Python environment (%s)\n", c.Name, c.Source.Python.Package)
					continue
				}
				if out != "" {
					dest := filepath.Join(out, c.Name)
					if err := builder.Materialize(cmd.Context(), e.sources, &c, dest); err != nil {
						return classifySource(err)
					}
					fmt.Fprintf(app.Out, "%s\t%s\t%s\n", c.Name, c.Source.Pin(), dest)
					continue
				}
				fmt.Fprintf(app.Out, "%s\t%s\tcached\n", c.Name, c.Source.Pin())
			}
			return nil
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
			dir := args[len(args)-1]
			var gits []source.Git
			var archives []source.Archive
			var main *source.Fetcher
			for _, name := range args[:len(args)-1] {
				e, err := app.open(name, &sf)
				if err != nil {
					return err
				}
				main = e.sources.Main
				for _, c := range e.plan.Components {
					switch {
					case c.Source.Git != nil && !strings.Contains(c.Source.Git.URL, builder.EmbeddedHost):
						g := source.Git{URL: c.Source.Git.URL, Commit: c.Source.Git.Commit, Ref: c.Source.Git.Ref}
						gits = append(gits, g)
					case c.Source.Archive != nil:
						a := c.Source.Archive
						archives = append(archives, source.Archive{URL: a.URL, SHA256: a.SHA256, Strip: a.Strip})
					}
					for _, s := range c.PatchSets {
						for _, pt := range s.Patches {
							switch {
							case pt.UpstreamDiff != nil:
								d := pt.UpstreamDiff
								g := source.Git{URL: d.Repo, Commit: d.Head}
								if d.Ref != "" {
									g.Ref = d.Ref
								}
								gits = append(gits, g, source.Git{URL: d.Repo, Commit: d.Base})
							case pt.UpstreamFile != nil:
								gits = append(gits, source.Git{URL: pt.UpstreamFile.Repo, Commit: pt.UpstreamFile.Commit})
							case pt.Replace != nil:
								gits = append(gits, source.Git{URL: pt.Replace.Repo, Commit: pt.Replace.Commit})
							}
						}
					}
				}
			}
			if err := main.WriteMirror(cmd.Context(), dir, gits, archives); err != nil {
				return classifySource(err)
			}
			fmt.Fprintf(app.Out, "mirror %s: %d git pins, %d archives\n", dir, len(gits), len(archives))
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

// keep recipes imported for SetHelp in flag docs.
var _ = recipes.SetHelp

// compatFindings evaluates the rules on the plan (tc nil) or at preflight (the probed
// toolchain). Warnings and advice are logged and returned for the manifest; an error
// is returned as bad input (plan) or a lacking environment (preflight).
func (app *App) compatFindings(ctx context.Context, p *builder.Plan, tc *builder.Toolchain, ignore []string, cacheDir string) ([]compat.Finding, error) {
	facts, stage, code := builder.FactsFromPlan(p), compat.StagePlan, exitBadInput
	if tc != nil {
		facts, stage, code = builder.PreflightFacts(facts, p, tc), compat.StagePreflight, exitEnv
	}
	// the same facts under the same rules give the same findings: a rerun reads them
	// back instead of parsing the rules again
	keep := filepath.Join(cacheDir, "compat", builder.Key("compat/1", compat.DataDigest(), facts, stage)+".json")
	var fs []compat.Finding
	if b, err := os.ReadFile(keep); err != nil || json.Unmarshal(b, &fs) != nil {
		rules, anc, err := app.ruleSet()
		if err != nil {
			return nil, err
		}
		if fs, err = compat.Evaluate(ctx, rules, facts, stage, anc); err != nil {
			return nil, fmt.Errorf("check %s against the compatibility rules: %w", p.Recipe, err)
		}
		if b, err := json.Marshal(fs); err == nil && os.MkdirAll(filepath.Dir(keep), 0o755) == nil {
			_ = os.WriteFile(keep+".tmp", b, 0o644)
			_ = os.Rename(keep+".tmp", keep)
		}
	}
	var errs []string
	for _, f := range fs {
		switch {
		case f.Severity == compat.SeverityError && slices.Contains(ignore, f.ID):
			// asked for: the finding is kept (the manifest records it) but does not stop the run
			app.Log.Warn("ignored by --ignore-rule: "+f.Message, "rule", f.ID, "stage", stage)
		case f.Severity == compat.SeverityError:
			errs = append(errs, fmt.Sprintf("%s: %s", f.ID, f.Message))
			writeFindings(app.Err, []compat.Finding{f})
		default:
			app.Log.Warn(f.Message, "rule", f.ID, "stage", stage)
		}
	}
	if len(errs) > 0 {
		return fs, &exitError{code: code, msg: fmt.Sprintf("%s breaks %s (fixes above; `epbuild compat explain ID`)", p.Recipe, strings.Join(errs, "; "))}
	}
	return fs, nil
}
