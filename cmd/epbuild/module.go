package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/modulefile"
	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/quote"
)

func newModuleCmd(app *App) *cobra.Command {
	var prefix, as, format, out string
	cmd := &cobra.Command{
		Use:   "module [--prefix DIR] [--as NAME/VERSION] [--format lua|tcl] [-o MODULEDIR]",
		Short: "Write an Lmod (Lua) or Tcl modulefile for an install, from its manifest",
		Long: `Write an environment module for the install at --prefix (default $EPBUILD_PREFIX): what
env.sh exports, read from the install's manifest, with prepend_path for PYTHONPATH and
LD_LIBRARY_PATH (the user's own entries stay after the install's, and module unload
removes exactly what was added), EPBUILD_PREFIX and the recipe's runtime env set with
pushenv (module unload gives back a value the user had, from Lua and Tcl alike), and
whatis lines with the recipe, the plan key, every component's pin and patch sets, and
the artifact. Every value from the manifest is written as data.

--format lua (default) writes MODULEDIR/NAME/VERSION.lua for Lmod; --format tcl writes
MODULEDIR/NAME/VERSION, a Tcl modulefile that Lmod and Environment Modules (4.x and later)
read. NAME/VERSION defaults to the recipe and the short plan key; each must be a file
name of letters, digits, '.', '_', '-' and '+' (a recipe name from a manifest that is
not is refused: give --as). Without -o the modulefile goes to stdout. Then: module use
MODULEDIR; module load NAME/VERSION.

PATH gets PREFIX/bin (the epbuild that installed it), LD_PRELOAD is prepended (a site's
own preload stays after the install's). Only one DeepEP install is loaded at a time:
the Lua modulefile is of the family "deepep", the Tcl one conflicts with NAME.

Exit codes: 0 done; 2 bad input (no install at the prefix, a bad --as or --format).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if prefix == "" {
				prefix = app.Getenv("EPBUILD_PREFIX")
			}
			if prefix == "" {
				return usageError{errors.New("module: give --prefix DIR, or source the install's env.sh (it sets EPBUILD_PREFIX)")}
			}
			var name, ver string
			if as != "" {
				var ok bool
				name, ver, ok = strings.Cut(as, "/")
				if !ok {
					return usageError{fmt.Errorf("--as %s: give NAME/VERSION, e.g. deepep/1.2.1-gcp", quote.Term(as))}
				}
				// each becomes a file name under MODULEDIR
				if err := errors.Join(quote.Name("module name", name), quote.Name("module version", ver)); err != nil {
					return usageError{fmt.Errorf("--as: %w; give NAME/VERSION, e.g. deepep/1.2.1-gcp", err)}
				}
			}
			render, ext := modulefile.Lua, ".lua"
			switch format {
			case "lua":
			case "tcl":
				render, ext = modulefile.Tcl, ""
			default:
				return usageError{fmt.Errorf("--format %q: use lua or tcl", format)}
			}
			mod, err := pack.Module(pack.ModuleOptions{Prefix: prefix, Name: name, Version: ver})
			if err != nil {
				return err
			}
			b, err := render(mod)
			if err != nil {
				return err
			}
			if out == "" {
				_, err = app.Out.Write(b)
				return err
			}
			path := filepath.Join(out, mod.Name, mod.Version+ext)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("module: %w", err)
			}
			if err := disk.WriteFileAtomic(path, b); err != nil {
				return err
			}
			if err := os.Chmod(path, 0o644); err != nil {
				return fmt.Errorf("module: %w", err)
			}
			abs, err := filepath.Abs(out)
			if err != nil {
				return fmt.Errorf("module: %w", err)
			}
			fmt.Fprintf(app.Out, "wrote %s\nuse it: module use %s && module load %s\n", quote.Term(path), quote.Shell(abs), quote.Shell(mod.Name+"/"+mod.Version))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&prefix, "prefix", "", "the install (default $EPBUILD_PREFIX)")
	f.StringVar(&as, "as", "", "load it as NAME/VERSION (default: the recipe and the short plan key)")
	f.StringVar(&format, "format", "lua", "lua (Lmod) or tcl (Lmod, Environment Modules)")
	f.StringVarP(&out, "output", "o", "", "write MODULEDIR/NAME/VERSION[.lua] instead of printing it")
	return cmd
}
