package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/cachegc"
	"github.com/epbuild/epbuild/builder/quote"
)

func newCacheCmd(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cache",
		Short: "Look at and clean the cache ($EPBUILD_CACHE): sources, stage outputs, temporary directories, logs",
		Long: `The cache ($EPBUILD_CACHE, else $XDG_CACHE_HOME/epbuild, else ~/.cache/epbuild, else
with no home directory epbuild-cache-<uid> in the temporary directory, mode 0700 and
refused if another user owns it) holds the fetched sources (git/, archives/, embedded/),
every stage's outputs by key (stages/), the temporary directories of stages being made
(tmp/), the whole logs of failed build steps (logs/), and small records (rule findings,
toolchain probes, locks, runs in progress). Runs share it: cache gc never removes what a
run in progress uses.

A cache is marked by its EPBUILD-CACHE file, written when epbuild makes it. Every command
refuses (exit 2) a directory that is neither empty nor marked, so that EPBUILD_CACHE set
to the wrong place (your home, a project) is neither written to nor cleaned; a cache of
an older epbuild (only epbuild's names at its top: stages/, git/, locks/, tmp/, ...) is
adopted and marked. gc removes only what epbuild names (stage outputs by their 64-hex
keys, its temporary and log directories, its records) and lists anything else there as
"not epbuild's: left alone".

A cache this user may not write (a shared cache mounted read-only) serves the stage
outputs it holds; use times and run records are skipped, a stage it lacks fails with
exit 3, and gc on it exits 3. Lock files that are not regular files of this user's (or
root's), a FIFO say, are refused at once with their path and owner.`,
	}
	cmd.AddCommand(newCacheLsCmd(app), newCacheDuCmd(app), newCacheGCCmd(app))
	return cmd
}

// cacheDir is $EPBUILD_CACHE, else the default.
func (app *App) cacheDir() (string, error) {
	if d := app.Getenv("EPBUILD_CACHE"); d != "" {
		return d, nil
	}
	return cache.DefaultDir()
}

func newCacheLsCmd(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "ls", Short: "List the cached sources, stage outputs and kept logs", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := app.cacheDir()
			if err != nil {
				return err
			}
			ents, err := cachegc.CacheList(dir)
			if err != nil {
				return err
			}
			if asJSON {
				if ents == nil {
					ents = []cachegc.CacheEntry{}
				}
				return app.printJSON(nil, struct {
					Dir     string               `json:"dir"`
					Entries []cachegc.CacheEntry `json:"entries"`
				}{dir, ents})
			}
			tw := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KIND\tKEY\tSIZE\tLAST USED\tURL")
			for _, e := range ents {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Kind, quote.Term(e.Key), humanBytes(e.Bytes), e.LastUsed.Format("2006-01-02 15:04"), orDash(quote.Term(e.URL)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newCacheDuCmd(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "du",
		Short: "Print what the cache takes, by kind: sources, stages, temporary, logs, metadata",
		Long: `Print what everything under the cache takes, by kind: its files' size, what it takes on
disk (allocated blocks, each file once: what du -s counts) and its entries (repositories
and archives, stage outputs, temporary directories, log directories).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := app.cacheDir()
			if err != nil {
				return err
			}
			u, err := cachegc.CacheDU(dir)
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(nil, u)
			}
			tw := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintln(tw, "KIND\tSIZE\tON DISK\tENTRIES\tFILES\t")
			for _, k := range append(u.Kinds, u.Total) {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t\n", k.Kind, humanBytes(k.Bytes), humanBytes(k.Disk), k.Entries, k.Files)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			fmt.Fprintf(app.Out, "in %s\n", u.Dir)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newCacheGCCmd(app *App) *cobra.Command {
	var (
		older  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "gc [--older-than D]",
		Short: "Remove what no run used for a while, and what interrupted runs left (never what a run in progress uses)",
		Long: `Remove from the cache:

  - sources and stage outputs not used for --older-than (a run that finds a stage output
    cached counts as a use);
  - the whole logs of failed build steps older than --older-than;
  - rule findings, toolchain probes and embedded repositories of other epbuild versions
    older than --older-than;
  - the temporary directories of runs that ended without removing them (killed),
    whatever their age (each run, when it starts, also removes those whose owner's
    lock is free).

Never what a run in progress uses: each run records the stage outputs it uses and holds
the locks of what it makes or fetches, and gc keeps those (listed as kept).
--older-than 0s removes everything else.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseDuration(older)
			if err != nil {
				return usageError{err}
			}
			dir, err := app.cacheDir()
			if err != nil {
				return err
			}
			rep, err := cachegc.CacheGC(cmd.Context(), dir, cachegc.GCOptions{OlderThan: d, Now: timeNow()})
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(nil, rep)
			}
			// names under the cache may be anyone's (what gc leaves alone): shown safely
			for _, it := range rep.Removed {
				fmt.Fprintf(app.Out, "removed %s %s (%s)\n", it.Kind, quote.Term(it.Name), humanBytes(it.Bytes))
			}
			for _, it := range rep.Kept {
				fmt.Fprintf(app.Out, "kept    %s %s (%s): %s\n", it.Kind, quote.Term(it.Name), humanBytes(it.Bytes), it.Why)
			}
			fmt.Fprintf(app.Out, "freed %s in %s\n", humanBytes(rep.Freed), rep.Dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&older, "older-than", "720h", "remove what was not used for this long (a Go duration: 720h, 30m, 0s)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
