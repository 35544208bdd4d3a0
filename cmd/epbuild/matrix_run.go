package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/builder/matrix"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/compat"
)

func newMatrixRunCmd(app *App) *cobra.Command {
	var (
		axes           []string
		sets           []string
		mirror         string
		out            string
		test           string
		metrics        []string
		testTimeout    time.Duration
		ignore         []string
		allowUndecided bool
		asJSON         bool
	)
	cmd := &cobra.Command{
		Use:   "run RECIPE",
		Short: "Run the matrix's allowed cells here: build, install, verify and test each, then print one table",
		Long: `Run every cell the rules allow, here, one after another: build it (stages the cells
share come from the stage store, so a cell rebuilds only what its values change),
install it into DIR/<cell>/prefix (install verifies the tree first), run the --test
command with the install's env.sh and the cell's env from the rules (NCCL_RUNTIME_CONNECT=0
from NCCL 2.22 on, R18), and read numbers from its output with --metric. A cell that
fails does not stop the others. Then one table: cell, build, verify, test, metrics,
build seconds and the stages reused; --json for machines, with each cell's nccl: the
library torch's communicator binds to under the install's env (version, path and how it
was read), not torch.cuda.nccl.version(), which names the header torch was compiled
with, and its nvshmem: the file and release DeepEP's NVSHMEM calls bind to, as the
install's verify read it (process.single-nvshmem). Exit 1 when a cell that ran failed;
cells a rule excludes or refuses on this host are shown with the rule ids.

The test runs under sh -c in DIR/<cell>/test with EPBUILD_PREFIX and EPBUILD_CELL set;
it may name {{prefix}} (the cell's install), {{COMPONENT.prefix}} and {{COMPONENT.src}}
(the component's patched source tree: DeepEP's tests live there, not in the install):

  epbuild matrix run single-node --axis nccl=bundled,2.28.3-1 \
    --test 'python3 {{deepep.src}}/tests/test_low_latency.py --num-processes 2' \
    --metric 'Dispatch \+ combine bandwidth: ([0-9.]+)'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ax []compat.Axis
			for _, a := range axes {
				x, err := compat.ParseAxis(a)
				if err != nil {
					return usageError{fmt.Errorf("--axis: %w", err)}
				}
				ax = append(ax, x)
			}
			if mirror == "" {
				mirror = app.Getenv("EPBUILD_MIRROR")
			}
			if out == "" {
				out = filepath.Join("out", "matrix", strings.TrimSuffix(filepath.Base(args[0]), ".yaml"))
			}
			var testOut io.Writer
			if !asJSON {
				testOut = app.Err // the test's output is a log: results stay on stdout
			}
			repro, err := stage.ParseRepro(app.Getenv)
			if err != nil {
				return err
			}
			run, err := builder.RunMatrix(cmd.Context(), builder.MatrixRunOptions{
				MatrixOptions: builder.MatrixOptions{Axes: ax, Options: builder.Options{
					Library: app.library(), Recipe: args[0], Sets: sets, CacheDir: app.Getenv("EPBUILD_CACHE"), Mirror: mirror,
					Log: app.Log, Progress: source.ProgressAuto, IgnoreRules: ignore, AllowUndecided: allowUndecided}},
				Run: matrix.Options{Out: out, Test: test, Metrics: metrics, TestTimeout: testTimeout, TestOutput: testOut,
					Version: version, Environ: os.Environ(), Getenv: app.Getenv},
				SourceDateEpoch: app.Getenv("SOURCE_DATE_EPOCH"), Repro: repro,
			})
			if run == nil {
				return err
			}
			if asJSON {
				fail := err
				if fail == nil && run.Failed() {
					fail = &exitError{code: exitFailed, msg: "a cell failed"}
				}
				if jerr := app.printJSON(fail, run); jerr != nil {
					return jerr
				}
			} else {
				writeMatrixRun(app.Out, run)
			}
			if err != nil {
				return err
			}
			if run.Failed() {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&axes, "axis", nil, "an axis, COMPONENT=V1,V2,... (bundled: the Python environment's, e.g. nccl=bundled,2.28.3-1; repeatable); default: the recipe's matrix: field")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override applied to every cell (repeatable)")
	cmd.Flags().StringVar(&mirror, "mirror", "", "serve every source from this mirror directory, never the network (default $EPBUILD_MIRROR)")
	cmd.Flags().StringVarP(&out, "out", "o", "", "a directory per cell: artifact, prefix/, test/, test.log (default out/matrix/RECIPE)")
	cmd.Flags().StringVar(&test, "test", "", "shell command run in each installed cell; may use {{prefix}}, {{COMPONENT.prefix}}, {{COMPONENT.src}}")
	cmd.Flags().StringArrayVar(&metrics, "metric", nil, "regular expression read from the test's output: its first group is a number, a named group names it (repeatable)")
	cmd.Flags().DurationVar(&testTimeout, "test-timeout", 0, "stop a test that runs longer, e.g. 10m (default: no limit)")
	cmd.Flags().StringArrayVar(&ignore, "ignore-rule", nil, "build a cell despite an error-level finding of this rule id (to prove the rule: the build then fails as the rule says)")
	cmd.Flags().BoolVar(&allowUndecided, "allow-undecided", false, "keep and build cells for which an error-level rule cannot be decided at plan time (the build host decides it at preflight)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON (the test's output then goes only to its log)")
	return cmd
}

// writeMatrixRun prints the results table, then each failed cell's error.
func writeMatrixRun(w io.Writer, run *matrix.Report) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CELL\tBUILD\tVERIFY\tTEST\tMETRICS\tBUILD s\tREUSED")
	for _, c := range run.Cells {
		build := c.Build
		if len(c.Rules) > 0 {
			build += " " + strings.Join(c.Rules, ",")
		}
		verify := c.Verify
		if c.Counts != nil {
			verify += fmt.Sprintf(" %d/%d", c.Counts["pass"], c.Counts["pass"]+c.Counts["fail"]+c.Counts["warn"]+c.Counts["skip"])
		}
		test := c.Test
		if c.Test == matrix.StepFail && c.TestExit != 0 {
			test += " (" + strconv.Itoa(c.TestExit) + ")"
		}
		var ms []string
		for _, m := range c.Metrics {
			var vs []string
			for _, v := range m.Values {
				vs = append(vs, strconv.FormatFloat(v, 'f', -1, 64))
			}
			if len(vs) == 0 {
				vs = []string{"-"}
			}
			ms = append(ms, m.Name+"="+strings.Join(vs, ","))
		}
		secs, reused := "-", "-"
		if c.Build != matrix.StepExcluded {
			secs = fmt.Sprintf("%.1f", c.BuildSeconds)
			reused = fmt.Sprintf("%d/%d", len(c.Reused), len(c.Reused)+len(c.Built))
			if len(c.Reused) > 0 {
				reused += " (" + strings.Join(c.Reused, ", ") + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, build, verify, test, orDash(strings.Join(ms, " ")), secs, reused)
	}
	_ = tw.Flush()
	var notes []string
	for _, c := range run.Cells {
		if len(c.Env) > 0 {
			var env []string
			for _, k := range slices.Sorted(maps.Keys(c.Env)) {
				env = append(env, k+"="+c.Env[k])
			}
			notes = append(notes, fmt.Sprintf("# %s: env %s", c.Name, strings.Join(env, " ")))
		}
		if c.Error != "" && !c.OK() {
			n := fmt.Sprintf("# %s: %s", c.Name, c.Error)
			if len(c.Failed) > 0 {
				n += " (failed: " + strings.Join(c.Failed, ", ") + ")"
			}
			notes = append(notes, n)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.Join(notes, "\n"))
	}
}
