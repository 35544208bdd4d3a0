package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/diff"
	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/quote"
)

func newDiffCmd(app *App) *cobra.Command {
	var (
		asJSON     bool
		maxExtract string
	)
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Say why two builds differ: two artifacts or two installed prefixes, entry by entry",
		Long: `Compare two artifacts (.tar.zst) or two installed prefixes (or one of each) and print the
entries that differ: added (in B only), removed (in A only), content, mode (the exec bit),
link target, type. For a file whose bytes differ it says what differs inside: for an ELF
file the sections, and for any file the first printable strings that one side holds and
the other lacks (a build path, a timestamp).

In an installed prefix, the install receipt and Python's __pycache__ directories are left
out: install and Python add them, no build does.

Contents are compared by sha256, read as a stream: a file of any size costs no memory.
Only a differing file of at most 256 MiB is read whole to name its sections and strings;
a larger one is reported as "differs (too large to compare sections)". An artifact is
unpacked into a temporary directory ($TMPDIR) that is removed when diff ends, interrupted
or not, and only up to --max-extract bytes of files: one whose manifest declares more is
refused before it fills the disk.

Two equal builds print nothing (as diff(1)); --json prints the comparison either way.

Exit codes: 0 the two are equal; 1 they differ; 2 an argument does not exist, is neither
an artifact nor a directory, cannot be read, or is an artifact that is damaged or larger
than --max-extract; 3 the machine lacks something (no room to unpack an artifact).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			limit, err := parseSize(maxExtract)
			if err != nil {
				return usageError{fmt.Errorf("--max-extract %s: %w", quote.Term(maxExtract), err)}
			}
			rep, err := pack.Diff(cmd.Context(), args[0], args[1], limit)
			if err != nil {
				return err
			}
			if asJSON {
				var fail error
				if !rep.Equal {
					fail = &exitError{code: exitFailed, msg: "the two differ"}
				}
				if err := app.printJSON(fail, rep); err != nil {
					return err
				}
			} else {
				writeDiff(app.Out, rep)
			}
			if !rep.Equal {
				return &exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the comparison as JSON")
	cmd.Flags().StringVar(&maxExtract, "max-extract", "8G", "the most bytes of files unpacked from each artifact (suffix K, M, G, T: powers of 1024)")
	return cmd
}

// parseSize reads a byte count: digits, optionally followed by K, M, G or T (powers of
// 1024).
func parseSize(s string) (int64, error) {
	shift := 0
	if s != "" {
		if i := strings.Index("KMGT", strings.ToUpper(s[len(s)-1:])); i >= 0 {
			shift, s = 10*(i+1), s[:len(s)-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64>>shift {
		return 0, errors.New("give a positive number of bytes, e.g. 8G or 500M")
	}
	return n << shift, nil
}

// writeDiff prints a comparison: nothing when the two are equal (scripts test the exit
// code, people read silence as diff(1) taught them); else one line per entry that
// differs, with what differs inside it below.
func writeDiff(w io.Writer, rep *diff.Report) {
	if rep.Equal {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHANGE\tPATH\tA\tB")
	for _, c := range rep.Changes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", strings.Join(c.What, ","), quote.Term(c.Path), side(c.A), side(c.B))
	}
	tw.Flush()
	for _, c := range rep.Changes {
		if len(c.Sections) == 0 && len(c.OnlyA) == 0 && len(c.OnlyB) == 0 && c.Note == "" {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", quote.Term(c.Path))
		if len(c.Sections) > 0 {
			var s []string
			for _, sc := range c.Sections {
				s = append(s, fmt.Sprintf("%s (%s)", quote.Term(sc.Name), sc.What))
			}
			fmt.Fprintf(w, "  ELF sections: %s\n", strings.Join(s, ", "))
		}
		if c.Note != "" {
			fmt.Fprintf(w, "  %s\n", quote.Term(c.Note))
		}
		for _, s := range c.OnlyA {
			fmt.Fprintf(w, "  only in A: %q\n", s)
		}
		for _, s := range c.OnlyB {
			fmt.Fprintf(w, "  only in B: %q\n", s)
		}
	}
	fmt.Fprintf(w, "\n%d of %d entries differ (%d equal)", len(rep.Changes), rep.Entries, rep.Same)
	if rep.Ignored > 0 {
		fmt.Fprintf(w, "; %d install receipt and bytecode entries left out", rep.Ignored)
	}
	fmt.Fprintf(w, "\nA: %s\nB: %s\n", quote.Term(rep.A), quote.Term(rep.B))
}

// side is one side of a change in a table cell: size and short hash, link target, or
// type and mode.
func side(e *archive.Entry) string {
	switch {
	case e == nil:
		return "-"
	case e.Type == archive.TypeSymlink:
		return "-> " + quote.Term(e.Target)
	case e.Type == archive.TypeDir:
		return "dir"
	}
	return fmt.Sprintf("%s %s %s", e.Mode, humanBytes(e.Size), quote.Term(e.SHA256[:min(12, len(e.SHA256))]))
}
