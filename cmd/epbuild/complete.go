package main

import (
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/compat"
	"github.com/epbuild/epbuild/recipes"
)

// Shell completion (epbuild completion bash|zsh|fish) asks these through cobra's hidden
// __complete command, with the flags already given parsed (--recipe-dir counts).

// completeFunc is what cobra calls for an argument or a flag value.
type completeFunc = func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective)

// looksLikePath: NAME|FILE arguments complete file names once the word is a path.
func looksLikePath(s string) bool {
	return strings.ContainsRune(s, '/') || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "~") || strings.HasSuffix(s, ".yaml")
}

// completeRecipes completes recipe names (with their cluster) for the first n
// arguments (every argument when n < 0), and file names for a word that is a path.
func (app *App) completeRecipes(n int) completeFunc {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if n >= 0 && len(args) >= n {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if looksLikePath(toComplete) {
			return nil, cobra.ShellCompDirectiveDefault
		}
		out := app.recipeNames(toComplete)
		if len(out) == 0 {
			return nil, cobra.ShellCompDirectiveDefault // a FILE in this directory, then
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func (app *App) recipeNames(prefix string) []string {
	lib := app.library()
	names, err := lib.Names()
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range names {
		if !strings.HasPrefix(n, prefix) {
			continue
		}
		if doc, err := lib.Load(n); err == nil && doc.Recipe.Cluster != "" {
			out = append(out, cobra.CompletionWithDesc(n, doc.Recipe.Cluster))
			continue
		}
		out = append(out, n)
	}
	return out
}

// completeRecipeFlag completes a flag whose value is a recipe name.
func (app *App) completeRecipeFlag(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	return app.recipeNames(toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeRuleIDs completes compatibility rule ids, with their titles.
func completeRuleIDs(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	rules, err := compat.LoadRules()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, r := range rules.All() {
		if strings.HasPrefix(r.ID, toComplete) {
			out = append(out, cobra.CompletionWithDesc(r.ID, r.Title))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeRuleArg completes the one rule id of compat explain.
func completeRuleArg(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeRuleIDs(cmd, args, toComplete)
}

// The --set keys a component takes (recipes.SetHelp says what each does), and those of
// the toolchain. A test checks that recipes.Doc.Apply takes each.
var (
	componentSetKeys = []string{"version", "source", "commit", "ref", "url", "sha256", "strip", "package", "patches"}
	toolchainSetKeys = []string{"cuda", "torch", "python", "gcc", "cmake", "arch", "host-arch"}
	setValues        = map[string][]string{"source": {"git", "archive"}}
)

// completeSet completes --set KEY=VALUE for the recipe given as the first argument:
// its component names, each component's keys (with the cmake options and build env
// names its steps already set), env.NAME of its runtime env and toolchain keys; after
// the =, the values of the keys that have a fixed set.
func (app *App) completeSet(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	const more = cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
	if key, val, ok := strings.Cut(toComplete, "="); ok {
		_, field, _ := strings.Cut(key, ".")
		var out []string
		for _, v := range setValues[field] {
			if strings.HasPrefix(v, val) {
				out = append(out, key+"="+v)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
	var doc *recipes.Doc
	if len(args) > 0 {
		doc, _ = app.library().Load(args[0])
	}
	var cands []string
	add := func(s ...string) {
		for _, c := range s {
			if strings.HasPrefix(c, toComplete) && !slices.Contains(cands, c) {
				cands = append(cands, c)
			}
		}
	}
	head, rest, dotted := strings.Cut(toComplete, ".")
	switch {
	case !dotted:
		if doc != nil {
			for _, c := range doc.Recipe.Components {
				add(c.Name + ".")
			}
		}
		add("env.", "toolchain.")
	case head == "toolchain":
		for _, k := range toolchainSetKeys {
			add("toolchain." + k + "=")
		}
	case head == "env":
		if doc != nil {
			for _, k := range slices.Sorted(maps.Keys(doc.Recipe.Env)) {
				add("env." + k + "=")
			}
		}
	case doc != nil:
		i := slices.IndexFunc(doc.Recipe.Components, func(c recipes.Component) bool { return c.Name == head })
		if i < 0 {
			break
		}
		c := doc.Recipe.Components[i]
		for _, k := range componentSetKeys {
			add(head + "." + k + "=")
		}
		if !strings.Contains(rest, ".") {
			add(head+".options.", head+".env.")
		}
		if strings.HasPrefix(rest, "options.") || strings.HasPrefix(rest, "env.") {
			for _, st := range c.Build {
				var opts, env map[string]string
				switch {
				case st.CMake != nil:
					opts, env = st.CMake.Options, st.CMake.Env
				case st.PythonExtension != nil:
					env = st.PythonExtension.Env
				case st.Command != nil:
					env = st.Command.Env
				}
				for _, k := range slices.Sorted(maps.Keys(opts)) {
					add(head + ".options." + k + "=")
				}
				for _, k := range slices.Sorted(maps.Keys(env)) {
					add(head + ".env." + k + "=")
				}
			}
		}
	}
	return cands, more
}

// completeStages completes --force values.
func completeStages(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, s := range append([]string{"all"}, stage.Stages()...) {
		if strings.HasPrefix(s, toComplete) {
			out = append(out, s)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeComponents completes the component names of the recipe in the first argument.
func (app *App) completeComponents(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	doc, err := app.library().Load(args[0])
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, c := range doc.Recipe.Components {
		if strings.HasPrefix(c.Name, toComplete) {
			out = append(out, c.Name)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// oneOf completes a flag that takes one of values.
func oneOf(values ...string) completeFunc {
	return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
}

// registerCompletion adds the completions of flags by name, where cmd has them.
func registerCompletion(cmd *cobra.Command, fns map[string]completeFunc) {
	for name, fn := range fns {
		if cmd.Flags().Lookup(name) != nil || cmd.PersistentFlags().Lookup(name) != nil {
			_ = cmd.RegisterFlagCompletionFunc(name, fn)
		}
	}
}

// addCompletions walks the command tree and completes the flags every command shares:
// --set (keys of the recipe in the first argument), --ignore-rule (rule ids), --force
// (stages), --recipe (names), --component (of the recipe in the first argument).
func (app *App) addCompletions(root *cobra.Command) {
	registerCompletion(root, map[string]completeFunc{
		"log-level":  oneOf(logLevels...),
		"log-format": oneOf(logFormats...),
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		registerCompletion(c, map[string]completeFunc{
			"set":         app.completeSet,
			"ignore-rule": completeRuleIDs,
			"force":       completeStages,
			"recipe":      app.completeRecipeFlag,
			"component":   app.completeComponents,
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}
