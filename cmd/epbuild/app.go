package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/charmbracelet/log"
	"github.com/mattn/go-isatty"
	"github.com/muesli/termenv"
	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/recipes"
)

// Exit codes, as the README documents them.
const (
	exitOK       = 0
	exitFailed   = 1 // the job failed: patch conflict, build error, check failed
	exitBadInput = 2 // recipe, flag or pin
	exitEnv      = 3 // the environment lacks something (toolchain, driver)
	// exitInterrupted: stopped by SIGINT or SIGTERM (128 + SIGINT, as shells report it)
	exitInterrupted = 130
)

// Streams are the command's I/O, so that tests run commands with buffers.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// App holds what every command needs: I/O, the environment, the logger and the
// global flags. It is built once per invocation; nothing is global.
type App struct {
	Streams
	Getenv func(string) string
	Log    *log.Logger

	logLevel  string
	logFormat string
	recipeDir []string
	patchDir  []string
	shadow    []string
	// command names the running command in the JSON envelope ("cache ls").
	command string
}

// exitCoder is implemented by errors that know their exit code (recipe errors are 2,
// missing toolchain 3, ...).
type exitCoder interface{ ExitCode() int }

// usageError is a bad flag or argument.
type usageError struct{ error }

func (usageError) ExitCode() int { return exitBadInput }

// exitError carries an exit code for a result that was already printed (a failed
// check, say): nothing more is said.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) ExitCode() int { return e.code }

// Main runs epbuild with args and returns the exit code. SIGINT and SIGTERM cancel the
// command's context: build steps are stopped with their process groups, temporary
// directories are removed, and the exit code is 130; a second signal ends it at once.
func Main(args []string, s Streams, getenv func(string) string) int {
	out := &countingWriter{w: s.Out, width: terminalWidth(s.Out, getenv)}
	app := &App{Streams: Streams{In: s.In, Out: out, Err: s.Err}, Getenv: getenv}
	root := NewRootCmd(app)
	root.SetArgs(args)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case sig := <-sigs:
			cancel(&interrupted{sig})
			// a second one ends epbuild at once (what it started dies with it)
			signal.Stop(sigs)
		case <-ctx.Done():
		}
	}()
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return exitOK
	}
	code := exitFailed
	var intr *interrupted
	if errors.As(context.Cause(ctx), &intr) {
		if !errors.As(err, new(*interrupted)) {
			err = fmt.Errorf("%w (%v)", intr, err)
		}
		code = exitInterrupted
	} else if ec := exitCoder(nil); errors.As(err, &ec) {
		code = ec.ExitCode()
	} else if isCobraUsage(err) {
		code = exitBadInput
	} else if environmentError(err) {
		code = exitEnv
	}
	if wantsJSON(cmd) && out.n == 0 {
		// the one JSON document of a command that failed before it printed its result
		if app.command == "" {
			app.command = commandName(cmd)
		}
		e := describeError(err, code)
		_ = app.writeEnvelope(false, &e, struct{}{})
	}
	if e := (*exitError)(nil); errors.As(err, &e) && e.msg == "" {
		return code
	}
	if app.logFormat == "json" {
		e := describeError(err, code)
		app.logger().Error(e.Message, "code", e.Code, "exit_code", e.ExitCode)
		return code
	}
	fmt.Fprintf(s.Err, "epbuild: %v\n", err)
	return code
}

// wantsJSON reports whether the command was asked for JSON on stdout.
func wantsJSON(cmd *cobra.Command) bool {
	if cmd == nil {
		return false
	}
	if f := cmd.Flags().Lookup("json"); f != nil && f.Value.String() == "true" {
		return true
	}
	f := cmd.Flags().Lookup("format")
	return f != nil && f.Value.String() == "json"
}

// isCobraUsage recognises cobra's own argument errors, which are plain errors.
func isCobraUsage(err error) bool {
	m := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand", "accepts ", "requires at least", "invalid argument", "flag needs an argument", "required flag"} {
		if strings.Contains(m, p) {
			return true
		}
	}
	return false
}

// NewRootCmd builds the command tree for one invocation.
func NewRootCmd(app *App) *cobra.Command {
	root := &cobra.Command{
		Use:   "epbuild",
		Short: "Build, check and verify DeepEP + NVSHMEM from pinned recipes",
		Long: `epbuild turns a declarative recipe into an installed, verified DeepEP + NVSHMEM stack
for one kind of cluster: sources pinned by commit or sha256, patch sets applied in a fixed
order and proven by their effects, a checked build, a reproducible artifact, and a
verify-install that checks the installed copy and the host.

Exit codes: 0 done; 1 the job failed (patch conflict, build error, check failed);
2 bad input (recipe, flag, pin); 3 the environment lacks something (toolchain, driver,
disk space).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			app.command = commandName(cmd)
			return app.setupLog()
		},
	}
	root.SetIn(app.In)
	root.SetOut(app.Out)
	root.SetErr(app.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&app.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&app.logFormat, "log-format", "text", "log format on stderr: text, or json (one JSON object a line, RFC 3339 times; the final error too)")
	pf.StringArrayVar(&app.recipeDir, "recipe-dir", nil, "also look for NAME.yaml recipes in this directory (before the embedded ones)")
	pf.StringArrayVar(&app.patchDir, "patch-dir", nil, "also look for patch sets (NAME/set.yaml) in this directory, before the patches/ directory beside the recipe and the shipped sets (repeatable)")
	pf.StringArrayVar(&app.shadow, "shadow", nil, "let the local patch set NAME take the place of the shipped set of that name (repeatable)")

	root.AddCommand(
		newListCmd(app),
		newShowCmd(app),
		newValidateCmd(app),
		newSchemaCmd(app),
		newVersionCmd(app),
		newRecipeCmd(app),
		newFetchCmd(app),
		newPatchCmd(app),
		newDriftCmd(app),
		newMirrorCmd(app),
		newCacheCmd(app),
		newCompatCmd(app),
		newMatrixCmd(app),
		newInstallCmd(app),
		newVerifyInstallCmd(app),
		newHostCmd(app),
		newPushCmd(app),
		newPullCmd(app),
		newKeyCmd(app),
		newFleetCmd(app),
		newTestCmd(app),
		newBenchCmd(app),
		newSBOMCmd(app),
		newModuleCmd(app),
		newDiffCmd(app),
	)
	app.addCompletions(root)
	return root
}

// setupLog builds the logger on stderr. charmbracelet/log queries the terminal for
// colours when its writer has an Fd, even with NO_COLOR: it gets a writer without one,
// and the colour profile is decided here. JSON logs are one object a line, with RFC 3339
// times.
func (app *App) setupLog() error {
	lvl, err := log.ParseLevel(app.logLevel)
	if err != nil {
		return usageError{fmt.Errorf("--log-level %q: use %s", app.logLevel, strings.Join(logLevels, ", "))}
	}
	opts := log.Options{Level: lvl, ReportTimestamp: true}
	switch app.logFormat {
	case "text":
	case "json":
		opts.Formatter, opts.TimeFormat = log.JSONFormatter, rfc3339Milli
	default:
		return usageError{fmt.Errorf("--log-format %q: use %s", app.logFormat, strings.Join(logFormats, " or "))}
	}
	l := log.NewWithOptions(struct{ io.Writer }{app.Err}, opts)
	if app.colour() {
		l.SetColorProfile(termenv.ANSI256)
	} else {
		l.SetColorProfile(termenv.Ascii)
	}
	app.Log = l
	return nil
}

// rfc3339Milli is RFC 3339 with milliseconds, so that JSON log lines sort in order.
const rfc3339Milli = "2006-01-02T15:04:05.000Z07:00"

// The values of --log-level and --log-format.
var (
	logLevels  = []string{"debug", "info", "warn", "error"}
	logFormats = []string{"text", "json"}
)

// logger is the command's logger, or (when the flags never got as far as making one)
// one made from what the flags say, falling back to text at info.
func (app *App) logger() *log.Logger {
	if app.Log != nil {
		return app.Log
	}
	if app.setupLog() != nil {
		lvl, format := app.logLevel, app.logFormat
		if !slices.Contains(logFormats, format) {
			app.logFormat = "text"
		}
		if !slices.Contains(logLevels, lvl) {
			app.logLevel = "info"
		}
		_ = app.setupLog()
		app.logLevel, app.logFormat = lvl, format
	}
	return app.Log
}

func (app *App) colour() bool {
	if app.Getenv("NO_COLOR") != "" || app.Getenv("TERM") == "dumb" {
		return false
	}
	f, ok := app.Err.(*os.File)
	return ok && isatty.IsTerminal(f.Fd())
}

func (app *App) library() *recipes.Library {
	lib := recipes.NewLibrary(app.recipeDir...)
	lib.PatchDirs, lib.Shadow = app.patchDir, app.shadow
	return lib
}
