package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/drift"
	"github.com/epbuild/epbuild/builder/quote"
)

func newDriftCmd(app *App) *cobra.Command {
	var (
		sf      sourceFlags
		opts    drift.Options
		repos   []string
		asJSON  bool
		changes bool
	)
	cmd := &cobra.Command{
		Use:               "drift NAME|FILE",
		ValidArgsFunction: app.completeRecipes(1),
		Short:             "Try every patch set of a recipe on each upstream commit of a range: from which commit does it break, and where",
		Long: `Try every patch set of a recipe on each commit of its component's upstream history and
print a table: commit, date, and per set clean, offset N (applies only with --max-offset N),
already applied, conflict FILE:LINE, or file gone FILE (with files of the same name
elsewhere, where it may have moved), then the commits where each set stops applying.

History is read from the mirror (--mirror DIR or EPBUILD_MIRROR; the cache holds only
pinned commits), in process: only the files a patch names are read, nothing is checked out;
one larger than 64 MiB is not read (its cell: failed: file too large FILE (N bytes)).
The range defaults to the pinned commit up to the repository's HEAD; --commits A..B takes A
and every commit after it up to B (A.., ..B and B as git reads them; A and B are commits,
tags, branches or HEAD; a commit id may be cut to 7 hex digits or more where it is the only
one of the mirror's history to start so). A must be an ancestor of B (the pin of HEAD) with
the whole history between them in the mirror: a HEAD that does not descend from the pin
exits 2, a history cut between them (a shallow clone, a missing parent) exits 3, "cannot
tell". A component from an archive drifts over a git repository given with
--repo COMPONENT=URL.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if opts.Every < 0 {
				return usageError{fmt.Errorf("--every %d: give a positive number", opts.Every)}
			}
			opts.Repos = map[string]string{}
			for _, r := range repos {
				comp, url, ok := strings.Cut(r, "=")
				if !ok || comp == "" || url == "" {
					return usageError{fmt.Errorf("--repo %q: give COMPONENT=URL", r)}
				}
				opts.Repos[comp] = url
			}
			// drift reads history and applies nothing to a build: the rules do not stop it
			j, err := app.job(args[0], &sf, nil, true)
			if err != nil {
				return err
			}
			src, err := j.Sources()
			if err != nil {
				return err
			}
			rep, err := drift.Run(cmd.Context(), j.Plan, src, opts)
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(nil, rep)
			}
			writeDrift(app.Out, rep, changes)
			return nil
		},
	}
	sf.add(cmd)
	f := cmd.Flags()
	f.StringVar(&opts.Commits, "commits", "", "the range: A..B, A.., ..B or B (default: the pinned commit up to HEAD)")
	f.BoolVar(&opts.Tags, "tags", false, "only tagged commits (every tag when --commits is not given)")
	f.IntVar(&opts.Every, "every", 0, "only every Nth commit of the range, and its first and last")
	f.StringVar(&opts.Component, "component", "", "only this component")
	f.StringArrayVar(&repos, "repo", nil, "drift COMPONENT over this git repository instead of its source (COMPONENT=URL, repeatable)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.BoolVar(&changes, "changes", false, "print only the commits where a set's state differs from the commit before")
	return cmd
}

func writeDrift(w io.Writer, rep *drift.Report, changes bool) {
	if len(rep.Tables) == 0 && len(rep.Skipped) == 0 {
		// a recipe of pins alone (nccl-ep, hybrid-ep) has nothing to drift: say so, not nothing
		fmt.Fprintf(w, "%s: no component carries a patch set: nothing to try on upstream commits (its pins move only by an edit of the recipe)\n",
			quote.Term(rep.Recipe))
		return
	}
	for i, t := range rep.Tables {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s  %s", quote.Term(t.Component), quote.Term(t.Repo))
		if t.Pinned != "" {
			fmt.Fprintf(w, "  pinned %.12s", t.Pinned)
		}
		if len(t.Rows) == 1 {
			fmt.Fprintln(w, "  1 commit")
		} else {
			fmt.Fprintf(w, "  %d commits\n", len(t.Rows))
		}
		for _, s := range t.Sets {
			fmt.Fprintf(w, "  set %s (max-offset %d, %s)\n", quote.Term(s.Name), s.MaxOffset, quote.Term(s.Origin))
		}
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprint(tw, "COMMIT\tDATE")
		for _, s := range t.Sets {
			fmt.Fprintf(tw, "\t%s", quote.Term(s.Name))
		}
		fmt.Fprintln(tw, "\tSUBJECT")
		for j, r := range t.Rows {
			if changes && j > 0 && sameCells(t.Rows[j-1].Cells, r.Cells) && j != len(t.Rows)-1 {
				continue
			}
			label := quote.Term(r.Commit[:min(12, len(r.Commit))])
			if r.Commit == t.Pinned {
				label += " (pinned)"
			}
			if len(r.Tags) > 0 {
				label += " " + quote.Term(strings.Join(r.Tags, ","))
			}
			fmt.Fprintf(tw, "%s\t%s", label, r.Date.Format("2006-01-02"))
			for _, c := range r.Cells {
				fmt.Fprintf(tw, "\t%s", quote.Term(c.String()))
			}
			fmt.Fprintf(tw, "\t%s\n", quote.Term(clip(r.Subject, 60)))
		}
		tw.Flush()
		for _, b := range t.Breaks {
			fmt.Fprintf(w, "%s breaks at %.12s (%s, after %.12s): %s\n", quote.Term(b.Set), b.At, b.Date.Format("2006-01-02"), b.After, quote.Term(b.Cell.String()))
		}
	}
	for _, s := range rep.Skipped {
		fmt.Fprintf(w, "\n%s skipped: %s\n", quote.Term(s.Component), quote.Term(s.Why))
	}
}

func sameCells(a, b []drift.Cell) bool {
	for i := range a {
		if a[i].String() != b[i].String() {
			return false
		}
	}
	return true
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
