package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/invopop/jsonschema"
	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/recipes"
)

func newListCmd(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the recipes: name, cluster, description, pins",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := plan.NewResolver(app.library())
			if err != nil {
				return err
			}
			names, err := res.Library.Names()
			if err != nil {
				return err
			}
			type row struct {
				Name        string              `json:"name"`
				Cluster     string              `json:"cluster"`
				Description string              `json:"description"`
				Pins        map[string]string   `json:"pins"`
				Patches     map[string][]string `json:"patches,omitempty"`
			}
			var rows []row
			for _, n := range names {
				pl, err := res.Resolve(n, nil)
				if err != nil {
					return fmt.Errorf("recipe %s: %w", n, err)
				}
				r := row{Name: n, Cluster: pl.Cluster, Pins: map[string]string{}, Patches: map[string][]string{}}
				doc, _ := res.Library.Load(n)
				r.Description = strings.TrimSpace(doc.Recipe.Description)
				for _, c := range pl.Components {
					r.Pins[c.Name] = c.Source.Pin()
					if len(c.Patches) > 0 {
						r.Patches[c.Name] = c.Patches
					}
				}
				rows = append(rows, r)
			}
			if asJSON {
				return app.printJSON(nil, struct {
					Recipes []row `json:"recipes"`
				}{rows})
			}
			tw := newTable(app.Out)
			fmt.Fprintln(tw, "NAME\tCLUSTER\tPINS\tPATCH SETS")
			for _, r := range rows {
				var pins, sets []string
				for _, c := range slices.Sorted(maps.Keys(r.Pins)) {
					pins = append(pins, c+"@"+shortPin(r.Pins[c]))
				}
				for _, c := range slices.Sorted(maps.Keys(r.Patches)) {
					sets = append(sets, strings.Join(r.Patches[c], ","))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Name, r.Cluster, strings.Join(pins, " "), strings.Join(sets, " "))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newShowCmd(app *App) *cobra.Command {
	var (
		asJSON bool
		sets   []string
	)
	cmd := &cobra.Command{
		Use:               "show NAME|FILE",
		ValidArgsFunction: app.completeRecipes(1),
		Short:             "Print a recipe resolved: overrides applied, patch sets expanded with their pins",
		Long:              "Print a recipe resolved: overrides applied, patch sets expanded with their pins.\n\n--set keys: " + recipes.SetHelp,
		Args:              cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := plan.NewResolver(app.library())
			if err != nil {
				return err
			}
			pl, err := res.Resolve(args[0], sets)
			if err != nil {
				return err
			}
			if asJSON {
				// where each set was read from is not part of the plan (nor its key)
				return app.printJSON(nil, struct {
					*plan.Plan
					Origins map[string]string `json:"patch-set-origins,omitempty"`
				}{pl, pl.PatchSetOrigins()})
			}
			writePlan(app.Out, pl)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the resolved plan as JSON")
	cmd.Flags().StringArrayVar(&sets, "set", nil, "override a recipe value: `KEY=VALUE`, e.g. nvshmem.commit=<40-hex> (repeatable; the keys are below)")
	return cmd
}

func writePlan(w io.Writer, p *plan.Plan) {
	fmt.Fprintf(w, "recipe   %s  (%s)\ncluster  %s\nplan     %s\n", p.Recipe, p.File, p.Cluster, p.Key[:16])
	for _, o := range p.Overrides {
		fmt.Fprintf(w, "set      %s\n", o)
	}
	t := p.Toolchain
	fmt.Fprintf(w, "toolchain cuda %s, torch %s, python %s, arch %s, requires %s\n", orDash(t.CUDA), orDash(t.Torch), orDash(t.Python), orDash(strings.Join(t.Arch, ",")), orDash(strings.Join(t.Require, ",")))
	if len(t.HostArch) > 0 {
		fmt.Fprintf(w, "build host %s (uname -m; the wheels and .so files are its machine code: preflight refuses another)\n", quote.Term(strings.Join(t.HostArch, " or ")))
	}
	for _, c := range p.Components {
		fmt.Fprintf(w, "\n%s %s\n", c.Name, c.Version)
		switch {
		case c.Source.Git != nil:
			fmt.Fprintf(w, "  source  git %s @ %s", c.Source.Git.URL, c.Source.Git.Commit)
			if c.Source.Git.Ref != "" {
				fmt.Fprintf(w, " (%s)", c.Source.Git.Ref)
			}
			fmt.Fprintln(w)
		case c.Source.Archive != nil:
			fmt.Fprintf(w, "  source  archive %s sha256 %s\n", c.Source.Archive.URL, c.Source.Archive.SHA256)
		case c.Source.Python != nil:
			fmt.Fprintf(w, "  source  python package %s %s\n", c.Source.Python.Package, c.Source.Python.Version)
		}
		if len(c.Depends) > 0 {
			fmt.Fprintf(w, "  depends %s\n", strings.Join(c.Depends, ", "))
		}
		for _, s := range c.PatchSets {
			fmt.Fprintf(w, "  patches %s (%s): %s\n", s.Name, s.Origin(), strings.TrimSpace(s.Description))
			for _, pt := range s.Patches {
				switch {
				case pt.UpstreamDiff != nil:
					fmt.Fprintf(w, "    %s  diff %s %s..%s\n", pt.Name, pt.UpstreamDiff.Repo, pt.UpstreamDiff.Base, pt.UpstreamDiff.Head)
				case pt.UpstreamFile != nil:
					fmt.Fprintf(w, "    %s  file %s@%s:%s sha256 %s\n", pt.Name, pt.UpstreamFile.Repo, pt.UpstreamFile.Commit, pt.UpstreamFile.Path, pt.UpstreamFile.SHA256)
				case pt.Replace != nil:
					fmt.Fprintf(w, "    %s  replace %s with %s@%s:%s sha256 %s\n", pt.Name, pt.Replace.Target, pt.Replace.Repo, pt.Replace.Commit, pt.Replace.Path, pt.Replace.SHA256)
				default:
					fmt.Fprintf(w, "    %s  %s sha256 %s\n", pt.Name, pt.File, pt.SHA256)
				}
			}
			for _, e := range s.Effects {
				fmt.Fprintf(w, "    effect %s\n", e.String())
			}
		}
		for _, st := range c.Build {
			fmt.Fprintf(w, "  build   %s\n", st.Kind())
			var kv map[string]string
			switch {
			case st.CMake != nil:
				kv = st.CMake.Options
				for _, k := range slices.Sorted(maps.Keys(st.CMake.Env)) {
					fmt.Fprintf(w, "    env %s=%s\n", k, st.CMake.Env[k])
				}
			case st.PythonExtension != nil:
				for _, k := range slices.Sorted(maps.Keys(st.PythonExtension.Env)) {
					fmt.Fprintf(w, "    env %s=%s\n", k, st.PythonExtension.Env[k])
				}
			case st.Command != nil:
				fmt.Fprintf(w, "    run %s\n", strings.Join(st.Command.Run, " "))
			}
			for _, k := range slices.Sorted(maps.Keys(kv)) {
				fmt.Fprintf(w, "    -D%s=%s\n", k, kv[k])
			}
		}
		if pw := c.PythonWheel; pw != nil && c.Source.Python == nil {
			fmt.Fprintf(w, "  wheel   %s in place of the Python environment's (%s under %s/), from <recipe>-<plan>.wheels/: epbuild install --python-wheels installs it there (pip) and notes the undo (pip install --no-deps --force-reinstall %s==VERSION, the version it replaced)\n",
				quote.Term(pw.Package), quote.Term(strings.Join(pw.Files, ", ")), quote.Term(pw.Dir), quote.Term(pw.Package))
		}
	}
	if len(p.Env) > 0 {
		fmt.Fprintln(w, "\nruntime env")
		for _, k := range slices.Sorted(maps.Keys(p.Env)) {
			fmt.Fprintf(w, "  %s=%s\n", k, p.Env[k])
		}
	}
	if rt := p.Runtime; rt.GPUsPerNode != nil || rt.MNNVL {
		fmt.Fprintln(w, "\nruntime node")
		if rt.GPUsPerNode != nil {
			fmt.Fprintf(w, "  %d GPUs a node (verify-install --host counts them)\n", *rt.GPUsPerNode)
		}
		if rt.MNNVL {
			fmt.Fprintln(w, "  MNNVL: GPU memory shared across the nodes of one NVLink domain; every node needs an IMEX channel and GPUs registered with the NVLink fabric (verify-install --host checks both)")
		}
	}
	if n := p.Runtime.NVCC; n != nil {
		fmt.Fprintf(w, "\nruntime nvcc\n  %s compiles its kernels on the node, with the nvcc at %s (verify-install --host checks it)\n",
			quote.Term(n.Component), quote.Term(host.NVCCLookup(n)))
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

func newValidateCmd(app *App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "validate FILE|NAME...",
		Short: "Check recipe files: strict YAML, pins, names, references",
		Long: `Check recipe files (or named recipes): strict YAML, full pins, known names, references,
paths that stay in their tree. Each problem is reported as file:line:col with the fix;
exit 2 when a recipe is invalid. --json prints one object with a result per recipe.`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: app.completeRecipes(-1),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := plan.NewResolver(app.library())
			if err != nil {
				return err
			}
			type result struct {
				Recipe string           `json:"recipe"`
				OK     bool             `json:"ok"`
				Errors []*recipes.Error `json:"errors,omitempty"`
			}
			results := []result{}
			bad := 0
			for _, a := range args {
				if _, err := res.Load(a, nil); err != nil {
					bad++
					r := result{Recipe: a, Errors: recipeErrors(err)}
					results = append(results, r)
					if app.logFormat == "json" {
						for _, e := range r.Errors {
							app.Log.Error(e.Msg, "file", e.File, "line", e.Line, "col", e.Col)
						}
					} else {
						fmt.Fprintln(app.Err, err)
					}
					continue
				}
				results = append(results, result{Recipe: a, OK: true})
				if !asJSON {
					fmt.Fprintf(app.Out, "%s: ok\n", a)
				}
			}
			var fail error
			if bad > 0 {
				fail = &exitError{code: exitBadInput, msg: fmt.Sprintf("%d of %d recipes are invalid", bad, len(args))}
			}
			if asJSON {
				if err := app.printJSON(fail, struct {
					Recipes []result `json:"recipes"`
				}{results}); err != nil {
					return err
				}
			}
			return fail
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: each recipe with ok and its errors (file, line, col, message)")
	return cmd
}

// recipeErrors are the problems err names, each with its place where it has one.
func recipeErrors(err error) []*recipes.Error {
	var es recipes.Errors
	if errors.As(err, &es) {
		return es
	}
	var e *recipes.Error
	if errors.As(err, &e) {
		return []*recipes.Error{e}
	}
	return []*recipes.Error{{Msg: err.Error()}}
}

func newSchemaCmd(app *App) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Print the recipe JSON Schema (what recipes/schema.json holds)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := recipeSchema()
			if err != nil {
				return err
			}
			if out == "" {
				_, err = app.Out.Write(b)
				return err
			}
			return disk.WriteFileAtomic(out, b)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of stdout")
	return cmd
}

func recipeSchema() ([]byte, error) {
	r := &jsonschema.Reflector{RequiredFromJSONSchemaTags: false, DoNotReference: false, Mapper: twoFormSchema}
	s := r.Reflect(&recipes.Recipe{})
	s.ID = "https://github.com/epbuild/epbuild/recipes/schema.json"
	s.Title = "epbuild recipe"
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode recipe schema: %w", err)
	}
	return append(b, '\n'), nil
}

// twoFormSchema gives the recipe values written in two forms their schema: a test's
// bandwidth (recipes.BandwidthPattern: a pattern, or a label and a value) and an import
// check (recipes.ImportCheck: a module, or a module and what it imports first); nil for
// every other type, which is reflected.
func twoFormSchema(t reflect.Type) *jsonschema.Schema {
	if t == reflect.TypeFor[recipes.ImportCheck]() {
		props := jsonschema.NewProperties()
		props.Set("module", &jsonschema.Schema{Type: "string", Description: "the module python imports from the prefix"})
		props.Set("after", &jsonschema.Schema{Type: "array", Items: &jsonschema.Schema{Type: "string"}, MinItems: new(uint64(1)),
			Description: "modules imported first, in order (torch)"})
		return &jsonschema.Schema{OneOf: []*jsonschema.Schema{
			{Type: "string", Description: "the module python imports from the prefix"},
			{Type: "object", Properties: props, Required: []string{"module", "after"}, AdditionalProperties: jsonschema.FalseSchema},
		}}
	}
	if t != reflect.TypeFor[recipes.BandwidthPattern]() {
		return nil
	}
	props := jsonschema.NewProperties()
	props.Set("label", &jsonschema.Schema{Type: "string", Description: "matches the line before the number's"})
	props.Set("value", &jsonschema.Schema{Type: "string", Description: "matches the line right after the label's; captures the number as (?P<gbps>...)"})
	return &jsonschema.Schema{OneOf: []*jsonschema.Schema{
		{Type: "string", Description: "a pattern matched on each line; captures the number as (?P<gbps>...)"},
		{Type: "object", Properties: props, Required: []string{"label", "value"}, AdditionalProperties: jsonschema.FalseSchema},
	}}
}

func shortPin(p string) string {
	if s, ok := strings.CutPrefix(p, "sha256:"); ok && len(s) > 12 {
		return "sha256:" + s[:12]
	}
	if len(p) == 40 {
		return p[:12]
	}
	return p
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
