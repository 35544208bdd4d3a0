package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

func newCompatCmd(app *App) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "compat",
		Short: "Check recipes against the compatibility rules and explain them",
		Long: `The compatibility rules are what the field learned building DeepEP + NVSHMEM, as data:
each has a condition over component versions and commits, options, toolchain and host,
a severity, why it exists, a fix and its sources. Commit conditions are decided by git
ancestry; a rule that cannot be decided is reported as unknown, never passed.
docs/rules.md lists every rule; "compat explain ID" prints one.`,
	}
	cmd.AddCommand(newCompatCheckCmd(app), newCompatExplainCmd(app), newCompatListCmd(app))
	return cmd
}

func newCompatCheckCmd(app *App) *cobra.Command {
	var (
		asJSON         bool
		sf             sourceFlags
		allowUndecided bool
		prefix         string
	)
	cmd := &cobra.Command{
		Use:               "check RECIPE | --prefix DIR",
		ValidArgsFunction: app.completeRecipes(1),
		Short:             "Evaluate the rules on a resolved recipe; exit 2 on an error-level finding",
		Long: `Evaluate the compatibility rules on a recipe resolved with its --set overrides (plan stage).
Errors exit 2 with the rule id and its fix; warnings and advice are printed.

Commit conditions are decided by the embedded history, then by the repositories of the
mirror (--mirror, $EPBUILD_MIRROR) and of the cache. An error-level rule that none of
them can decide exits 2 too, naming the question, unless --allow-undecided.

With --prefix DIR instead of RECIPE, the rules of the plan and preflight stages are
evaluated on the install there: the plan and toolchain its manifest records, and the
facts its build read of the NVSHMEM headers (build_facts: nvshmem.rc-layout,
nvshmem.header-version), which decide what the version label cannot.

--set keys: ` + recipes.SetHelp,
		Args: cobra.RangeArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (prefix == "") == (len(args) == 0) || (prefix != "" && len(sf.sets) > 0) {
				return usageError{errors.New("compat check takes a RECIPE (with --set overrides) or --prefix DIR (an install), one of them")}
			}
			var (
				plan    *plan.Plan
				fs      []compat.Finding
				verdict error
				stage   = compat.StagePlan
			)
			if prefix != "" {
				mirror := sf.mirror
				if mirror == "" {
					mirror = app.Getenv("EPBUILD_MIRROR")
				}
				plan, fs, verdict = builder.CheckInstall(cmd.Context(), prefix, builder.Options{
					CacheDir: app.Getenv("EPBUILD_CACHE"), Mirror: mirror, Log: app.Log, AllowUndecided: allowUndecided})
				if plan == nil {
					return usageError{verdict}
				}
				stage = compat.StagePreflight
			} else {
				j, err := app.job(args[0], &sf, nil, allowUndecided)
				if err != nil {
					return err
				}
				plan = j.Plan
				fs, verdict = j.Findings(cmd.Context(), nil)
			}
			var re *builder.RulesError
			if verdict != nil && !errors.As(verdict, &re) {
				return verdict
			}
			if asJSON {
				out := struct {
					Recipe    string           `json:"recipe"`
					Overrides []string         `json:"overrides,omitempty"`
					Stage     compat.Stage     `json:"stage"`
					Findings  []compat.Finding `json:"findings"`
					Notes     []string         `json:"notes,omitempty"`
				}{plan.Recipe, sf.sets, stage, fs, plan.Notes}
				if out.Findings == nil {
					out.Findings = []compat.Finding{}
				}
				if err := app.printJSON(verdict, out); err != nil {
					return err
				}
			} else {
				writeFindings(app.Out, fs)
				fmt.Fprintf(app.Out, "%s: %s\n", quote.Term(plan.Recipe), summary(fs))
			}
			return verdict
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the findings as JSON")
	sf.add(cmd)
	cmd.Flags().StringVar(&prefix, "prefix", "", "check the install at DIR (its manifest's plan, toolchain and build facts) instead of a recipe")
	cmd.Flags().BoolVar(&allowUndecided, "allow-undecided", false, "exit 0 although an error-level rule cannot be decided (it stays a warning)")
	return cmd
}

func summary(fs []compat.Finding) string {
	n := map[compat.Severity]int{}
	unknown := 0
	for _, f := range fs {
		n[f.Severity]++
		if f.Unknown {
			unknown++
		}
	}
	s := fmt.Sprintf("%d errors, %d warnings, %d advice", n[compat.SeverityError], n[compat.SeverityWarn], n[compat.SeverityAdvice])
	if unknown > 0 {
		s += fmt.Sprintf(" (%d undecided)", unknown)
	}
	return s
}

func writeFindings(w io.Writer, fs []compat.Finding) {
	for _, f := range fs {
		id := f.ID
		if f.Case != "" {
			id += "/" + f.Case
		}
		fmt.Fprintf(w, "%-6s %s: %s\n", f.Severity, id, f.Title)
		fmt.Fprintf(w, "       %s\n", f.Message)
		if !f.Unknown {
			for _, b := range f.Because {
				fmt.Fprintf(w, "       because %s\n", b)
			}
		}
		writeFix(w, "       ", f.Fix)
	}
}

// logFindings says on stderr what stops a job: as text, or as one JSON log record per
// finding with --log-format json.
func (app *App) logFindings(fs []compat.Finding) {
	if app.logFormat != "json" {
		writeFindings(app.Err, fs)
		return
	}
	for _, f := range fs {
		app.Log.Error(f.Message, "rule", f.Name(), "severity", f.Severity, "title", f.Title, "unknown", f.Unknown,
			"because", f.Because, "fix", compat.FixLines(f.Fix))
	}
}

func writeFix(w io.Writer, indent string, fx *compat.Fix) {
	for _, l := range compat.FixLines(fx) {
		fmt.Fprintf(w, "%sfix: %s\n", indent, l)
	}
}

func newCompatExplainCmd(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:               "explain ID|ID/CASE...",
		ValidArgsFunction: completeRuleArg,
		Short:             "Show a rule: why it exists, when it holds, its fix and its sources",
		Long: `Print one rule: its stages and severity, why it exists, the condition it checks (as in
compat/rules.yaml), each case with its own why and fix, the fix, the sources to check it
against and the host facts it reads. docs/rules.md lists every rule the same way.
A case id as compat check prints it (R16/host-setup) prints its rule with that case
marked ">>". Several ids print their rules one after the other (--json takes one).`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if asJSON && len(args) > 1 {
				return usageError{fmt.Errorf("--json prints one rule: give one id, not %d", len(args))}
			}
			rules, err := compat.LoadRules()
			if err != nil {
				return err
			}
			facts, err := compat.LoadHostFacts()
			if err != nil {
				return err
			}
			for i, arg := range args {
				if i > 0 {
					fmt.Fprintln(app.Out)
				}
				if err := explainOne(app, rules, facts, arg, asJSON); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the rule as JSON")
	return cmd
}

// explainOne prints the rule arg names (ID or ID/CASE).
func explainOne(app *App, rules *compat.Rules, facts []compat.HostFact, arg string, asJSON bool) error {
	// a case id as compat check prints it: R16/host-setup
	id, caseName, _ := strings.Cut(arg, "/")
	r, ok := rules.Get(id)
	if !ok {
		return usageError{fmt.Errorf("no rule %s; the closest: %s (`epbuild compat list` shows them all)", quote.Term(id), strings.Join(rules.Closest(id, 3), ", "))}
	}
	if caseName != "" {
		var names []string
		for _, c := range r.Cases {
			names = append(names, c.Name)
			if strings.EqualFold(c.Name, caseName) {
				caseName = c.Name
			}
		}
		if !slices.Contains(names, caseName) {
			if len(names) == 0 {
				return usageError{fmt.Errorf("%s: the rule %s has no cases; give %s alone", quote.Term(arg), r.ID, r.ID)}
			}
			return usageError{fmt.Errorf("%s: the rule %s has no case %s; its cases: %s", quote.Term(arg), r.ID, quote.Term(caseName), strings.Join(names, ", "))}
		}
	}
	if asJSON {
		return app.printJSON(nil, r)
	}
	writeExplain(app.Out, rules.File, r, caseName, facts)
	return nil
}

// writeExplain prints rule r; the case named highlight ("" for none) is marked, as the
// one a finding of compat check named.
func writeExplain(w io.Writer, file string, r compat.Rule, highlight string, facts []compat.HostFact) {
	fmt.Fprintf(w, "%s  %s\n(%s:%d)\n", r.ID, r.Title, file, r.Line())
	if highlight != "" {
		fmt.Fprintf(w, "case %s/%s: marked >> below\n", r.ID, highlight)
	}
	fmt.Fprintf(w, "severity %s; stages %s\n\n", r.Severity, joinStages(r.Stages))
	fmt.Fprintf(w, "why: %s\n", strings.TrimSpace(r.Message))
	if r.When != nil {
		fmt.Fprintf(w, "\nwhen:\n%s", indentYAML(r.When, "  "))
	}
	for _, c := range r.Cases {
		sev, st := c.Severity, c.Stages
		if sev == "" {
			sev = r.Severity
		}
		if len(st) == 0 {
			st = r.Stages
		}
		mark := ""
		if c.Name == highlight {
			mark = ">> "
		}
		fmt.Fprintf(w, "\n%scase %s (%s; %s):\n", mark, c.Name, sev, joinStages(st))
		if c.Message != "" {
			fmt.Fprintf(w, "  why: %s\n", strings.TrimSpace(c.Message))
		}
		fmt.Fprintf(w, "  when:\n%s", indentYAML(c.When, "    "))
		writeFix(w, "  ", c.Fix)
	}
	if r.Fix != nil {
		fmt.Fprintln(w)
		writeFix(w, "", r.Fix)
	}
	fmt.Fprintf(w, "\nsources:\n")
	for _, s := range r.Sources {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	if keys := r.HostKeys(); len(keys) > 0 {
		fmt.Fprintf(w, "\nhost facts (read on a node by verify-install --host):\n")
		for _, k := range keys {
			read := "(not described)"
			for _, f := range facts {
				if f.Key == k {
					read = strings.Join(strings.Fields(f.Read), " ")
				}
			}
			fmt.Fprintf(w, "  - %s: %s\n", k, read)
		}
	}
	writeFactSources(w, "build facts (recorded by the build in the install's manifest)", r.BuildKeys(), compat.BuildFactSources())
	writeFactSources(w, "runtime keys (the recipe's runtime:)", r.RuntimeKeys(), compat.RuntimeFactSources())
}

// writeFactSources says where each of keys is read.
func writeFactSources(w io.Writer, title string, keys []string, srcs []compat.FactSource) {
	if len(keys) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s:\n", title)
	for _, k := range keys {
		read := "(not described)"
		for _, f := range srcs {
			if f.Key == k {
				read = f.Read
			}
		}
		fmt.Fprintf(w, "  - %s: %s\n", k, read)
	}
}

func joinStages(ss []compat.Stage) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, ", ")
}

// indentYAML writes a condition back as the YAML it was read from.
func indentYAML(c *compat.Cond, indent string) string {
	var sb strings.Builder
	for _, l := range strings.Split(strings.TrimRight(compat.CondYAML(c), "\n"), "\n") {
		sb.WriteString(indent + l + "\n")
	}
	return sb.String()
}

func newCompatListCmd(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the compatibility rules",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rules, err := compat.LoadRules()
			if err != nil {
				return err
			}
			type row struct {
				ID       string          `json:"id"`
				Severity compat.Severity `json:"severity"`
				Stages   []compat.Stage  `json:"stages"`
				Title    string          `json:"title"`
				Cases    []string        `json:"cases,omitempty"`
			}
			var rows []row
			for _, r := range rules.All() {
				rw := row{ID: r.ID, Severity: r.Severity, Stages: r.StagesOf(), Title: r.Title}
				for _, c := range r.Cases {
					rw.Cases = append(rw.Cases, c.Name)
				}
				rows = append(rows, rw)
			}
			if asJSON {
				return app.printJSON(nil, struct {
					Rules []row `json:"rules"`
				}{rows})
			}
			tw := tabwriter.NewWriter(app.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSEVERITY\tSTAGES\tTITLE")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.ID, r.Severity, joinStages(r.Stages), r.Title)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
