package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/host/sysroot"
	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/smoke"
	"github.com/epbuild/epbuild/builder/verify"
)

func newInstallCmd(app *App) *cobra.Command {
	var (
		prefix string
		keep   bool
		asJSON bool
		python string
		wheels bool
	)
	cmd := &cobra.Command{
		Use:   "install ARTIFACT --prefix DIR",
		Short: "Install an artifact into a prefix: checked first, swapped in atomically, verified in place",
		Long: `Install an artifact <recipe>-<plan>.tar.zst into DIR.

Before DIR is touched: the artifact's sha256 is checked against ARTIFACT.sha256 (when
present; one line of at most 4 KiB, a regular file: a FIFO or a device there is refused,
exit 2) and its manifest is read. DIR must be absent, empty, or an install epbuild made
(a receipt that pins the manifest beside it) holding nothing its manifest does not list:
anything else is refused and left as it is. The free space beside DIR is checked against
the sizes the manifest declares; the artifact is extracted beside DIR (stopped as soon as
it holds more than it declares), every file's sha256 and mode is checked against the
manifest, and verify-install runs on the extracted tree. Only then does the new tree
replace DIR, in one step. The previous install is removed, or with --keep-previous kept
as DIR.prev (one copy: an older DIR.prev is replaced). DIR gets a receipt
(.epbuild-receipt.json) naming the artifact (and its absolute path), and DIR/bin with a
copy of this epbuild as DIR/bin/epbuild when it is a static executable (no ELF
interpreter; otherwise a note says why not), recorded in the receipt with its sha256:
env.sh puts DIR/bin on PATH, so ". DIR/env.sh && epbuild verify-install --host" works on
every node that sees DIR. DIR may hold any character but ':' (the separator of PATH,
PYTHONPATH and LD_LIBRARY_PATH), and no blank when the recipe preloads a library. An interrupted install leaves DIR whole; the
next install into DIR removes what it left beside it.

A component a recipe builds as a package of the Python environment (python-wheel: NCCL
from source as torch's own nvidia-nccl-cu13) works only once that wheel is installed in
the environment of the import checks (--python): before anything is written, install
refuses (exit 3, with the pip command and its undo) while the environment has another
version; --python-wheels installs it there first (pip, --no-index, from the
<recipe>-<plan>.wheels directory beside the artifact, its sha256 checked against the
manifest) and notes the command that puts back the version it replaced.

Exit codes: 0 installed; 1 the new install failed verify (DIR is as it was); 2 the
artifact is damaged, truncated, bigger than its manifest says or not an epbuild
artifact, or DIR is not an install to replace; 3 not enough space beside DIR (the space
needed is named), or the Python environment lacks a wheel the artifact needs there.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if prefix == "" {
				return usageError{errors.New("install: --prefix DIR is required")}
			}
			self, err := os.Executable()
			if err != nil {
				self = "" // nothing to copy to PREFIX/bin: said in the notes
			}
			res, err := install.Install(cmd.Context(), install.InstallOptions{
				Artifact: args[0], Prefix: prefix, KeepPrevious: keep, Version: version, Log: app.Log, Self: self,
				Verify:       verify.VerifyOptions{Python: python, Environ: verify.CleanEnviron(app.Getenv)},
				PythonWheels: wheels,
			})
			var ve *install.InstallVerifyError
			if errors.As(err, &ve) && ve.Report != nil {
				fail := &exitError{code: exitFailed, msg: strings.SplitN(ve.Error(), ":\n", 2)[0]}
				if asJSON {
					_ = app.printJSON(fail, ve.Report)
				} else {
					writeReport(app.Out, ve.Report)
				}
				return fail
			}
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(nil, res)
			}
			r := res.Receipt
			fmt.Fprintf(app.Out, "installed %s (recipe %s, plan %s)\n", r.Artifact, r.Recipe, r.PlanKey[:min(12, len(r.PlanKey))])
			fmt.Fprintf(app.Out, "prefix    %s\nsha256    %s\n", quote.Term(res.Prefix), r.SHA256)
			if res.Previous != "" {
				fmt.Fprintf(app.Out, "previous  kept at %s\n", quote.Term(res.Previous))
			}
			fmt.Fprintf(app.Out, "verify    %s\n", verifySummary(res.Report))
			for _, n := range res.Notes {
				fmt.Fprintf(app.Out, "note      %s\n", quote.Term(n))
			}
			envsh := quote.Shell(filepath.Join(res.Prefix, manifest.EnvName))
			fmt.Fprintf(app.Out, "use it:   . %s\n", envsh)
			fmt.Fprintf(app.Out, "on nodes: . %s && epbuild verify-install --host\n", envsh)
			return nil
		},
	}
	cmd.Flags().StringVar(&prefix, "prefix", "", "install into this directory (created; only an epbuild install already there is replaced)")
	cmd.Flags().BoolVar(&keep, "keep-previous", false, "keep the replaced install as DIR.prev (replacing an older DIR.prev)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result (receipt and verify report) as JSON")
	cmd.Flags().StringVar(&python, "python", "", "interpreter for the import checks (default: the build's, if here, else python3)")
	cmd.Flags().BoolVar(&wheels, "python-wheels", false, "install the wheels the artifact builds as packages of the Python environment (python-wheel) into --python's environment first")
	return cmd
}

func newVerifyInstallCmd(app *App) *cobra.Command {
	var (
		prefix     string
		asJSON     bool
		python     string
		hostOn     bool
		sysrootArg string
		hosts      string
		traffic    bool
		smokeOn    bool
		pes        int
		timeout    time.Duration
	)
	cmd := &cobra.Command{
		Use:   "verify-install [--prefix DIR] [--json] [--host [--sysroot CAPTURE.tar.zst|DIR] [--hosts FILE]] [--smoke [--smoke-pes N] [--smoke-timeout D]] [--traffic -- CMD ARGS...]",
		Short: "Check an installed prefix against its manifest, its recipe's checks and (--host) this host",
		Long: `Check an installed prefix (default $EPBUILD_PREFIX, which env.sh sets). The manifest
(install.manifest) is read first; then, by the check engine, target by target:

` + kindsHelp(check.Files, check.Env, check.Installed, check.Process) + `
With --smoke (the smoke kind above), the ranks get the install's runtime env plus the
caller's NVSHMEM_*, FI_* and CUDA_VISIBLE_DEVICES; --smoke-timeout bounds the whole run
and no process outlives it. Several PEs on one GPU skip the split (NVSHMEM refuses it
there).

With --host (--sysroot reads a capture instead of /), the node and the compatibility
rules of the host stage (rule.<id>[/case] results, with the rule's fix), and the
DEEP_EP_DEVICE_TO_HCA_MAPPING line the PCIe tree implies. The job's nodes, for the
hostname check, come from --hosts FILE (one host a line) or the Slurm allocation
(SLURM_JOB_NODELIST):

` + kindsHelp(check.Host) + `
With --traffic -- CMD ARGS..., CMD runs with the install's env while the NIC counters are
sampled (host.traffic.run, host.traffic.spread): all bytes on one NIC means the mapping
did not take.

Every check has a stable ID, a status (pass, warn, fail, skip), what it read, why it
matters and the fix. Exit codes: 0 no check failed; 1 a check failed; 2 bad input.`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case traffic && (dash != 0 || len(args) == 0):
				return usageError{errors.New("--traffic needs the command after --: verify-install --traffic -- CMD ARGS...")}
			case !traffic && len(args) > 0:
				return usageError{fmt.Errorf("unexpected arguments %q (a command to sample needs --traffic -- CMD ARGS...)", args)}
			case !smokeOn && (cmd.Flags().Changed("smoke-pes") || cmd.Flags().Changed("smoke-timeout")):
				return usageError{errors.New("--smoke-pes and --smoke-timeout need --smoke")}
			case pes < 0 || pes > maxSmokePEs:
				return usageError{fmt.Errorf("--smoke-pes %d: give 1 to %d processes (0: one per GPU)", pes, maxSmokePEs)}
			case timeout <= 0:
				return usageError{fmt.Errorf("--smoke-timeout %s: give a duration above zero, such as 2m", timeout)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if prefix == "" {
				prefix = app.Getenv("EPBUILD_PREFIX")
			}
			if prefix == "" {
				return usageError{errors.New("verify-install: give --prefix DIR, or source the install's env.sh (it sets EPBUILD_PREFIX)")}
			}
			if hosts != "" && !hostOn {
				return usageError{errors.New("--hosts names the job's nodes for the host checks: give --host too")}
			}
			sys, done, err := sysroot.Open(sysrootArg)
			if err != nil {
				return err
			}
			defer done()
			self, err := os.Executable()
			if err != nil {
				self = "" // install.epbuild then says it did not compare
			}
			opts := verify.VerifyOptions{Prefix: prefix, Python: python, Environ: verify.CleanEnviron(app.Getenv), Self: self, Version: version,
				Host: hostOn, Sysroot: sys, JobEnv: os.Environ(), HostsFile: hosts,
				Smoke: smokeOn, SmokePEs: pes, SmokeTimeout: timeout}
			if traffic {
				opts.Traffic = app.trafficCommand(prefix, args)
			}
			rep, err := verify.Verify(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				var fail error
				if rep.Failed() {
					fail = &exitError{code: exitFailed, msg: "a check failed: " + verifySummary(rep)}
				}
				if err := app.printJSON(fail, rep); err != nil {
					return err
				}
			} else {
				writeReport(app.Out, rep)
			}
			if rep.Failed() {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&prefix, "prefix", "", "the installed prefix (default $EPBUILD_PREFIX)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON: one object per check, with stable IDs")
	f.StringVar(&python, "python", "", "interpreter for the import checks (default: the build's, if here, else python3)")
	f.BoolVar(&hostOn, "host", false, "also check this host: peer memory, RDMA devices, GPU↔NIC pairing, ...")
	f.StringVar(&sysrootArg, "sysroot", "", "read /sys, /proc and /dev from a capture of epbuild host capture (OUT.tar.zst, or the directory it was unpacked into)")
	f.StringVar(&hosts, "hosts", "", "the job's nodes, one host a line (default: the Slurm allocation), for the hostname check")
	f.BoolVar(&traffic, "traffic", false, "run the command after -- and report how its NIC traffic spread")
	f.BoolVar(&smokeOn, "smoke", false, "also run the install's NVSHMEM smoke test on this node (unique-ID init, malloc, put, barrier, team split)")
	f.IntVar(&pes, "smoke-pes", 0, "smoke test processes (default: one per GPU)")
	f.DurationVar(&timeout, "smoke-timeout", smoke.DefaultTimeout, "the smoke test's deadline: every process is killed by then")
	return cmd
}

// maxSmokePEs bounds --smoke-pes: one node's processes, not a typo's thousands.
const maxSmokePEs = 256

// trafficCommand runs args with the install's runtime env on top of ours, its output
// on stderr so that stdout stays the report.
func (app *App) trafficCommand(prefix string, args []string) func(context.Context) error {
	return func(ctx context.Context) error {
		env, err := envsh.InstallEnv(prefix, os.Environ())
		if err != nil {
			return err
		}
		c := exec.CommandContext(ctx, args[0], args[1:]...)
		w := app.childOutput(args[0])
		defer w.Close()
		c.Env, c.Stdin, c.Stdout, c.Stderr = env, app.In, w, w
		if err := c.Run(); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
		}
		return nil
	}
}

func verifySummary(r *verify.VerifyReport) string {
	n := r.Counts()
	return fmt.Sprintf("%d pass, %d warn, %d fail, %d skip", n["pass"], n["warn"], n["fail"], n["skip"])
}

// maxFound keeps a table row readable; the details below and --json have the whole text.
const maxFound = 100

// writeReport prints the checks as a table, then the details of each failure and warning,
// then the mapping line the host checks computed.
func writeReport(w io.Writer, r *verify.VerifyReport) {
	fmt.Fprintf(w, "verify-install %s", r.Prefix)
	if r.Recipe != "" {
		fmt.Fprintf(w, " (recipe %s, plan %s)", r.Recipe, r.PlanKey[:min(12, len(r.PlanKey))])
	}
	fmt.Fprintln(w)
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tSTATUS\tFOUND")
	for _, c := range r.Checks {
		found := c.Found
		if found == "" {
			found = c.Read
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.ID, c.Status, reportClip(reportLine(found), maxFound))
	}
	tw.Flush()
	for _, c := range r.Checks {
		if c.Status != "fail" && c.Status != "warn" {
			continue
		}
		fmt.Fprintf(w, "\n%s %s\n", strings.ToUpper(string(c.Status)), c.ID)
		for _, kv := range [][2]string{{"read", c.Read}, {"expected", c.Expected}, {"found", c.Found}, {"why", c.Why}, {"fix", c.Fix}} {
			if kv[1] != "" {
				fmt.Fprintf(w, "  %-9s %s\n", kv[0]+":", kv[1])
			}
		}
	}
	verdict := "OK"
	if r.Failed() {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "\n%s: %s\n", verdict, verifySummary(r))
	if r.MappingLine != "" {
		fmt.Fprintf(w, "\n# the GPU↔NIC pairing of this host's PCIe tree, ready for env.sh:\n%s\n", r.MappingLine)
	}
}

func reportClip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func reportLine(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), " ")
}

func newHostCmd(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Check this host for a recipe (peer memory, RDMA, GPU↔NIC pairing), or capture what the checks read",
	}
	var (
		hf      hostFlags
		capJSON bool
	)
	capture := &cobra.Command{
		Use:   "capture OUT.tar.zst",
		Short: "Record exactly the /sys, /proc and /dev files the host checks read, for --sysroot elsewhere",
		Long: `Record exactly the files, directories and symlinks the host checks (and the NIC traffic
counters) read on this host into OUT.tar.zst. Pass it as --sysroot OUT.tar.zst (or the
directory it unpacks into with tar --zstd -xf) to host check or verify-install --host: the
same checks, the same results, without the node.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			sys, cfg, done, err := hf.config(cmd.Context(), app)
			if err != nil {
				return err
			}
			defer done()
			var buf bytes.Buffer
			if err := host.Capture(cmd.Context(), sys, cfg, &buf); err != nil {
				return err
			}
			if err := disk.WriteFileAtomic(args[0], buf.Bytes()); err != nil {
				return err
			}
			if capJSON {
				return app.printJSON(nil, struct {
					File      string `json:"file"`
					Bytes     int    `json:"bytes"`
					Recipe    string `json:"recipe,omitempty"`
					Transport string `json:"transport"`
				}{args[0], buf.Len(), cfg.Recipe, string(cfg.Transport)})
			}
			fmt.Fprintf(app.Out, "captured the host state for %s (transport %s) into %s (%s)\n", orDash(cfg.Recipe), cfg.Transport, args[0], humanBytes(int64(buf.Len())))
			return nil
		},
	}
	hf.add(capture)
	capture.Flags().BoolVar(&capJSON, "json", false, "print JSON")
	var asJSON bool
	var hcf hostFlags
	check := &cobra.Command{
		Use:   "check [--sysroot CAPTURE.tar.zst|DIR] [--recipe NAME] [--json]",
		Short: "Run the host checks alone, for a recipe or an install's plan",
		Long: `Run the host checks alone. What they ask of the host comes from --recipe NAME, else from
the install at --prefix (default $EPBUILD_PREFIX), else nothing recipe-specific (transport
ibrc when the host has RDMA devices, none otherwise), under the runtime env a job gets
here (the recipe's, overridden by this environment's). The NCCL a job loads is read from
python3 (the library torch's communicator binds to, else the nvidia-nccl-* wheel, else
NCCL_HOME). The job's nodes come from
--hosts FILE (one host a line, or Slurm's node[01-04] syntax), else SLURM_JOB_NODELIST
(expanded by scontrol show hostnames where it runs). Exit 1 when a check fails; 2 for a
recipe or host list that cannot be read.

` + kindsHelp(check.Host),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, done, err := hcf.options(app)
			if err != nil {
				return err
			}
			defer done()
			rep, err := verify.CheckHost(cmd.Context(), opts)
			if err != nil {
				return err
			}
			if asJSON {
				var fail error
				if rep.Failed() {
					fail = &exitError{code: exitFailed, msg: "a host check failed"}
				}
				err = app.printJSON(fail, rep)
			} else {
				err = host.WriteTable(app.Out, host.Report{Checks: rep.Checks, Pairs: rep.Pairs})
				if rep.MappingLine != "" && err == nil {
					fmt.Fprintf(app.Out, "\n# the GPU↔NIC pairing of this host's PCIe tree, ready for env.sh:\n%s\n", rep.MappingLine)
				}
			}
			if err != nil {
				return err
			}
			if rep.Failed() {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	hcf.add(check)
	check.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.AddCommand(capture, check)
	return cmd
}

// hostFlags pick the sysroot and what the host checks ask for.
type hostFlags struct {
	sysroot, recipe, prefix, hosts string
}

func (f *hostFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.sysroot, "sysroot", "", "read /sys, /proc and /dev from a capture (OUT.tar.zst of host capture, or a directory) instead of /")
	cmd.Flags().StringVar(&f.recipe, "recipe", "", "check for this recipe's runtime settings (transport, GID index, mapping, ...)")
	cmd.Flags().StringVar(&f.prefix, "prefix", "", "check for the plan of the install here (default $EPBUILD_PREFIX, when set)")
	cmd.Flags().StringVar(&f.hosts, "hosts", "", "the job's nodes, one host a line (default: the Slurm allocation), for the hostname check")
}

// options says what the host checks ask of this host: the recipe's runtime settings
// (--recipe), else the plan of the install at --prefix, else nothing recipe-specific.
func (f *hostFlags) options(app *App) (opts verify.HostOptions, done func(), err error) {
	sys, done, err := sysroot.Open(f.sysroot)
	if err != nil {
		return opts, done, err
	}
	defer func() {
		if err != nil {
			done()
		}
	}()
	opts = verify.HostOptions{Sysroot: sys, Env: verify.CleanEnviron(app.Getenv), JobEnv: os.Environ(), Mapped: -1, HostsFile: f.hosts}
	prefix := f.prefix
	if prefix == "" {
		prefix = app.Getenv("EPBUILD_PREFIX")
	}
	switch {
	case f.recipe != "":
		res, rerr := plan.NewResolver(app.library())
		if rerr != nil {
			return opts, done, rerr
		}
		if opts.Plan, err = res.Resolve(f.recipe, nil); err != nil {
			return opts, done, err
		}
	case prefix != "":
		m, _, merr := manifest.ReadInstalledManifest(prefix)
		if merr != nil {
			return opts, done, usageError{merr}
		}
		opts.Plan, opts.Toolchain, opts.Build = m.Plan, m.Toolchain, m.BuildFacts
		if env, err := envsh.InstallEnv(prefix, opts.Env); err == nil {
			opts.Env = env
		}
	}
	return opts, done, nil
}

// config is what the host checks ask for; done removes an unpacked capture.
func (f *hostFlags) config(ctx context.Context, app *App) (sysroot.Root, host.Config, func(), error) {
	opts, done, err := f.options(app)
	if err != nil {
		return opts.Sysroot, host.Config{}, done, err
	}
	cfg, err := verify.HostConfigFor(ctx, opts)
	if err != nil {
		done()
		return opts.Sysroot, cfg, func() {}, usageError{err}
	}
	return opts.Sysroot, cfg, done, nil
}

// kindsHelp lists the check kinds of the targets, from the engine's registry, so that the
// help says what the code checks.
func kindsHelp(targets ...check.Target) string {
	var b strings.Builder
	seen := map[string]bool{}
	for _, t := range targets {
		for _, k := range verify.Checks().Kinds() {
			if !k.Applies(t) || seen[k.Name] {
				continue
			}
			seen[k.Name] = true
			fmt.Fprintf(&b, "  %s\n", k.Name)
			for _, l := range wrapWords(k.Explain, 74) {
				fmt.Fprintf(&b, "      %s\n", l)
			}
		}
	}
	return b.String()
}

func wrapWords(s string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
