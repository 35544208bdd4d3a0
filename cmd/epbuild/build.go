package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/builder/oci"
	"github.com/epbuild/epbuild/builder/progress"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/stage"
)

// sourceFlags are shared by the commands that fetch: --set, --mirror.
type sourceFlags struct {
	sets   []string
	mirror string
}

func (f *sourceFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.sets, "set", nil, "override a recipe value: `KEY=VALUE` (repeatable; the keys: epbuild show --help)")
	cmd.Flags().StringVar(&f.mirror, "mirror", "", "serve every source from this mirror directory, never the network (default $EPBUILD_MIRROR)")
}

// job resolves a recipe into a builder job with the command's source flags and the
// policy on the compatibility rules.
func (app *App) job(name string, f *sourceFlags, ignore []string, allowUndecided bool) (*builder.Job, error) {
	mirror := f.mirror
	if mirror == "" {
		mirror = app.Getenv("EPBUILD_MIRROR")
	}
	j, err := builder.Open(builder.Options{
		Library: app.library(), Recipe: name, Sets: f.sets, CacheDir: app.Getenv("EPBUILD_CACHE"), Mirror: mirror,
		Log: app.Log, Progress: app.fetchProgress(), IgnoreRules: ignore, AllowUndecided: allowUndecided,
	})
	if err != nil {
		return nil, err
	}
	app.warnSets(j)
	return j, nil
}

// fetchProgress: bars on a terminal, log lines elsewhere and always with JSON logs (a
// bar is not a JSON line).
func (app *App) fetchProgress() source.ProgressMode {
	if app.logFormat == "json" {
		return source.ProgressLines
	}
	return source.ProgressAuto
}

// watchSteps shows the build steps while they run: a live line per step on a terminal
// (stderr, CI unset), else a heartbeat log line per step every interval. The returned
// function ends the display.
func (app *App) watchSteps(every time.Duration) (stage.Watcher, func()) {
	mode := progress.Detect(app.Err, app.Getenv)
	if app.logFormat == "json" {
		mode = progress.Lines
	}
	d := progress.New(progress.Options{Mode: mode, Out: app.Err, Log: app.Log, Every: every})
	if mode != progress.Live {
		return d, d.Close
	}
	// log lines go above the live lines
	app.Log.SetOutput(struct{ io.Writer }{d.Writer()})
	return d, func() {
		d.Close()
		app.Log.SetOutput(struct{ io.Writer }{app.Err})
	}
}

// rulesStopped prints the findings that stop a job (their fixes) before its error.
func (app *App) rulesStopped(err error) error {
	var re *builder.RulesError
	if errors.As(err, &re) {
		app.logFindings(re.Findings)
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
		heartbeat      time.Duration
		cacheFrom      string
		cacheTo        string
		registry       registryFlags
		keepFailed     bool
	)
	cmd := &cobra.Command{
		Use:               "recipe NAME|FILE",
		ValidArgsFunction: app.completeRecipes(1),
		Short:             "Build a recipe: fetch, patch, build, check, package (the main job)",
		Long: `Build a recipe into a checked, installable artifact <recipe>-<plan>.tar.zst:
resolve the pins, check the compatibility rules (exit 2 on an error-level finding, or on
an error-level rule that cannot be decided unless --allow-undecided), check the toolchain
(exit 3 naming what is missing), fetch, apply the patch sets in order and prove their
effects, build, run the checks on the staged prefix, and pack the prefix with
manifest.json and env.sh. Beside the artifact: its .sha256, its CycloneDX SBOM
(ARTIFACT.cdx.json, see epbuild sbom) and, for a python-extension step with wheel: true,
a reproducible wheel in <recipe>-<plan>.wheels/ (pip install it; see
docs/python-lmod-sbom.md).

Every stage's output is stored by key: a rerun with nothing changed does no work, a
failed run resumes at the stage that failed, and --force[=STAGE] reruns a stage and those
after it (patch, build, check, package).

The patch stages run while the toolchain is probed (nothing is built before preflight
passes); builds that do not depend on each other run at the same time, the builds that
start together splitting the cores ({{jobs}}, MAX_JOBS) by their C, C++ and CUDA files;
the checks run beside the package stage. The first failure stops the builds beside it
(their logs are kept). The stage table and the artifact do not depend on what finished
first.

While a build step runs, a terminal shows a line per running step with its elapsed time
and the last line of its log; elsewhere (CI set, stderr not a terminal, --log-format
json) a log line per running step every --heartbeat. Each step's whole log is kept under
the cache, <cache>/logs/build-<key>/<step>.log while it runs and after it failed (the
path is printed; cache gc removes it), and in the build's stored output once it succeeded.
A failed build's directory is removed unless --keep-failed keeps it (its path is printed;
the next build of that component removes it).
Ctrl-C (SIGINT) or SIGTERM stops the running step and everything it started, removes the
stage's temporary directories, and exits 130; finished stages are kept.

Builds are reproducible: the same plan gives the same bytes wherever the cache and the
build root are and whichever machine of the same toolchain builds it. The sources compile
from /tmp/epbuild-<component>-<key> (nvcc writes their real path into its symbols); the
build trees go to the same directory or, with EPBUILD_BUILD_ROOT=DIR, to DIR (no part of
any key or byte). Both directories are mapped away for the host compilers, nvcc gets a
seed, and steps get SOURCE_DATE_EPOCH and a fixed locale and time zone. --rebuild-check
builds the plan a second time from nothing, under another build root, cache, job count,
time zone and umask, and fails (exit 1), printing the difference, when the two artifacts
differ.
EPBUILD_REPRO=off turns the measures off, to measure what they cost; nothing else.

A shared build cache (docs/fleet.md): --cache-from oci://REGISTRY/REPO looks the plan key
up there first, after the rules on the plan. When the registry has it, the artifact is
pulled and checked as install checks it and written to --out as a build writes it (the
artifact, its .sha256, its SBOM and its wheels): no stage runs here and the toolchain is
not probed, so a node without compilers can take it. --force builds here. A registry that
cannot be reached, refuses the credentials or holds an artifact that fails a check is a
warning, and the build runs here. --cache-to oci://REGISTRY/REPO pushes the artifact after
a successful build, tagged with its plan key (as epbuild push does); a push that fails is a
warning with the reason, not a failed build: the exit code is the build's. Credentials
come from the Docker config and its credential helpers, as for push and pull.
--cache-from takes only an artifact signed by a trusted key (--trust-key FILE.pub, or
$EPBUILD_CACHE/trusted-keys/*.pub); an unsigned one is a warning and a build here unless
--allow-unsigned; --sign-key FILE signs what --cache-to pushes (docs/signing.md). A
registry that does not answer within --registry-timeout, or stalls for --registry-stall,
is a warning too, and the build starts.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if rebuildCheck && planOnly {
				return usageError{errors.New("--rebuild-check builds: it does not go with --plan")}
			}
			if rebuildCheck && cacheFrom != "" {
				return usageError{errors.New("--rebuild-check builds the plan twice here: it does not go with --cache-from")}
			}
			repro, err := stage.ParseRepro(app.Getenv)
			if err != nil {
				return err
			}
			j, err := app.job(args[0], &sf, ignore, allowUndecided)
			if err != nil {
				return err
			}
			opts := builder.BuildOptions{
				OutDir: out, AllowApplied: allowApplied, KeepFailed: keepFailed, Version: version, SourceDateEpoch: app.Getenv("SOURCE_DATE_EPOCH"),
				Environ: os.Environ(), Getenv: app.Getenv, PlanOnly: planOnly, Repro: repro,
			}
			if force != "" {
				opts.Force = strings.Split(force, ",")
			}
			if opts.CacheFrom, opts.CacheTo, err = app.buildCaches(cacheFrom, cacheTo, &registry); err != nil {
				return err
			}
			if heartbeat <= 0 {
				return usageError{fmt.Errorf("--heartbeat %s: give a positive duration, e.g. 30s", heartbeat)}
			}
			if !planOnly {
				var stop func()
				opts.Watch, stop = app.watchSteps(heartbeat)
				defer stop()
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
				if werr := app.printJSON(err, res); werr != nil {
					return werr
				}
				return err
			}
			if err != nil {
				return app.rulesStopped(err)
			}
			if planOnly {
				if asJSON {
					return app.printJSON(nil, map[string]any{"plan": res.Plan, "stages": res.Stages})
				}
				writePlan(app.Out, res.Plan)
				fmt.Fprintln(app.Out)
				writeStages(app.Out, res.Stages, true)
				return nil
			}
			if asJSON {
				return app.printJSON(nil, res)
			}
			writeStages(app.Out, res.Stages, false)
			fmt.Fprintf(app.Out, "\nartifact %s\nsha256   %s\n", res.Artifact, res.SHA256)
			if c := res.Cache; c != nil && c.Hit {
				fmt.Fprintf(app.Out, "from     %s\n", c.Fetched)
			}
			if c := res.Cache; c != nil && c.Stored != "" {
				fmt.Fprintf(app.Out, "pushed   %s\n", c.Stored)
			}
			if res.Rebuild != nil {
				fmt.Fprintf(app.Out, "rebuild check: a second build from nothing gave the same bytes (%d entries), varying: %s\n", res.Rebuild.Diff.Entries, strings.Join(res.Rebuild.Varied, ", "))
			}
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().StringVarP(&out, "out", "o", "out", "directory for the artifact")
	cmd.Flags().BoolVar(&planOnly, "plan", false, "print the plan with its stage keys and what is cached; do nothing")
	cmd.Flags().StringVar(&force, "force", "", "rerun `STAGE` (all, patch, build, check, package; a comma-separated list) and the ones after it")
	cmd.Flags().Lookup("force").NoOptDefVal = "all"
	cmd.Flags().BoolVar(&keepFailed, "keep-failed", false, "keep a failed build step's build directory (its path is printed) to read what its logs point to, such as CMakeError.log; the next build of that component removes it")
	cmd.Flags().BoolVar(&allowApplied, "allow-applied", false, "continue when a patch is already in the tree (reported), instead of failing")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().StringArrayVar(&ignore, "ignore-rule", nil, "build despite an error-level finding of this rule id (e.g. to reproduce a known failure); recorded in the manifest")
	cmd.Flags().BoolVar(&rebuildCheck, "rebuild-check", false, "build the plan a second time from nothing under another build root, cache, job count, time zone and umask, compare the artifacts, and fail (exit 1) printing the difference when they differ")
	cmd.Flags().BoolVar(&allowUndecided, "allow-undecided", false, "build although an error-level rule cannot be decided (a commit no history at hand knows); recorded in the manifest")
	cmd.Flags().DurationVar(&heartbeat, "heartbeat", progress.DefaultEvery, "without a terminal (CI), log a line per running build step this often")
	cmd.Flags().StringVar(&cacheFrom, "cache-from", "", "take the artifact from the shared build cache `REPO` (oci://REGISTRY/REPO) when it has the plan; a registry that fails: a warning, and a build here")
	cmd.Flags().StringVar(&cacheTo, "cache-to", "", "push the artifact to the shared build cache `REPO` (oci://REGISTRY/REPO) after a successful build; a push that fails is a warning, not a failed build")
	registry.add(cmd, "speak HTTP to the build cache registries: only for a registry on this machine")
	registry.addTrust(cmd)
	registry.addSign(cmd, "what --cache-to pushes")
	return cmd
}

// buildCaches opens the shared build caches of --cache-from and --cache-to (nil when not
// given), with the credentials push and pull use. A bad reference is bad input.
func (app *App) buildCaches(from, to string, reg *registryFlags) (builder.ArtifactCache, builder.ArtifactCache, error) {
	if from == "" && to == "" {
		return nil, nil, nil
	}
	c, err := reg.client(app)
	if err != nil {
		return nil, nil, err
	}
	signer, err := reg.signer()
	if err != nil {
		return nil, nil, err
	}
	var caches [2]builder.ArtifactCache
	for i, ref := range []string{from, to} {
		if ref == "" {
			continue
		}
		bc, err := oci.NewBuildCache(c, ref)
		if err != nil {
			return nil, nil, err
		}
		bc.Signer = signer
		caches[i] = bc
	}
	return caches[0], caches[1], nil
}

func writeStages(w io.Writer, ev []stage.StageEvent, planned bool) {
	tw := newTable(w)
	fmt.Fprintln(tw, "STAGE\tCOMPONENT\tKEY\tSTATE")
	for _, e := range ev {
		state := "done"
		switch {
		case e.From != "":
			state = "from " + e.From
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
		sf     sourceFlags
		out    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:               "fetch NAME|FILE",
		ValidArgsFunction: app.completeRecipes(1),
		Short:             "Fetch every pinned source of a recipe into the cache; with --out, lay out workspaces",
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
			if asJSON {
				if reps == nil {
					reps = []builder.FetchReport{}
				}
				doc := struct {
					Recipe     string                `json:"recipe"`
					Components []builder.FetchReport `json:"components"`
				}{Recipe: j.Plan.Recipe, Components: reps}
				if werr := app.printJSON(err, doc); werr != nil {
					return werr
				}
				return err
			}
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
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: each component with its pin and where it went")
	return cmd
}

func newMirrorCmd(app *App) *cobra.Command {
	var (
		sf     sourceFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use: "mirror RECIPE... DIR",
		// recipes, then the directory: a word that is a path completes file names
		ValidArgsFunction: app.completeRecipes(-1),
		Short:             "Write a mirror holding exactly what these recipes need, for an air-gapped site",
		Long: `Write into DIR exactly what these recipes need: every pinned git commit and archive,
and every upstream commit their patch sets read, laid out by URL (DIR/github.com/OWNER/
REPO.git, DIR/HOST/PATH), for epbuild recipe --mirror DIR where there is no network.

The Python packages a recipe takes from the build host's environment (python: sources,
such as the nvidia-nvshmem-cu12 wheel) are named, not downloaded (epbuild reads no package
index): DIR/python/requirements.txt lists them, and the output gives the pip download
command for a host with an index and the pip install command for the build host.

A mirror is whole or not there: a new DIR is written beside its place and renamed into
it when complete; a run into an existing DIR that fails takes back every entry it
created. DIR/epbuild-mirror.json lists the recipes DIR holds completely.`,
		Args: cobra.MinimumNArgs(2),
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
			if asJSON {
				return app.printJSON(nil, rep)
			}
			fmt.Fprintf(app.Out, "mirror %s: %d git pins, %d archives\n", rep.Dir, rep.Git, rep.Archives)
			if len(rep.Python) > 0 {
				fmt.Fprintf(app.Out, "\nPython packages these recipes take from the build host's environment (not downloaded: epbuild reads no package index), listed in %s:\n", rep.Requirements)
				for _, p := range rep.Python {
					line := fmt.Sprintf("  %s\t(%s/%s)", p.Requirement, p.Recipe, p.Component)
					if p.Note != "" {
						line += "; " + p.Note
					}
					fmt.Fprintln(app.Out, line)
				}
				fmt.Fprintf(app.Out, "where there is an index (with the build host's Python version and platform):\n  %s\non the build host:\n  %s\n", rep.PipDownload, rep.PipInstall)
			}
			return nil
		},
	}
	sf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
