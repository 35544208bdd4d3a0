// Package modulefile writes environment modules for an install: Lmod's Lua modulefiles
// and Tcl modulefiles (read by Lmod and by Environment Modules 4.x and later).
//
// Every string of a Module comes from an artifact's manifest: it is written as data
// (builder/quote's Lua and Tcl literals, comments made one line), and the name and
// version, which become the file NAME/VERSION[.lua], must be file-name components.
//
// Path lists the install adds to (PATH, PYTHONPATH, LD_LIBRARY_PATH, LD_PRELOAD) are
// prepended, so that the user's own entries stay after them and `module unload` removes
// exactly what was added (Lmod's sh_to_modulefile on env.sh would turn the prepends into
// setenv and clobber the user's paths). The recipe's runtime env is set with pushenv,
// which `module unload` undoes, giving back a value the user had. Lmod's Tcl reader
// (8.6.19, measured) sets the variable in Lmod's own environment before Lmod records the
// value to give back, so unload would keep the install's: the Tcl modulefile puts the
// user's value back into that environment right after pushenv, under Lmod only (and
// sets a variable the user does not have with setenv, which unload unsets). Where
// pushenv is missing (Environment Modules before 5.1) it falls back to setenv, which
// unload unsets.
//
// Only one DeepEP install is loaded at a time: the Lua modulefile is of the family
// "deepep" (Lmod swaps one install for another), the Tcl one conflicts with its own name.
package modulefile

import (
	"fmt"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/quote"
)

// Module is what a modulefile does.
type Module struct {
	// Name and Version are how the module is loaded (name/version): each a file-name
	// component (quote.Name).
	Name, Version string
	// Family is the Lmod family of the Lua modulefile ("": none).
	Family string
	// Whatis lines (`module whatis`), Help text (`module help`).
	Whatis []string
	Help   string
	// Prepend lists the directories each variable gets, first the one searched first.
	Prepend []PathVar
	// Set are the variables set, in order.
	Set []Var
}

// PathVar is a path-list variable and the directories it gets in front.
type PathVar struct {
	Name string
	Dirs []string
}

// Var is a variable and its value.
type Var struct{ Name, Value string }

// Check refuses what no modulefile can carry: a name or version that is not a file-name
// component, names that are not variable names, values with a NUL, a directory of a path
// list that holds its separator.
func (m Module) Check() error {
	if err := quote.Name("module name", m.Name); err != nil {
		return &NameError{Err: err}
	}
	if err := quote.Name("module version", m.Version); err != nil {
		return &NameError{Err: err}
	}
	if m.Family != "" && !validName(m.Family) {
		return fmt.Errorf("modulefile: family %s is not a name", quote.Term(m.Family))
	}
	for _, p := range m.Prepend {
		if !validName(p.Name) {
			return fmt.Errorf("modulefile: %q is not a variable name", p.Name)
		}
		for _, d := range p.Dirs {
			if strings.ContainsAny(d, "\x00:") || d == "" {
				return fmt.Errorf("modulefile: %s: %q cannot be a directory of a path list (':' separates them)", p.Name, d)
			}
			if strings.Contains(d, "\n") {
				return fmt.Errorf("modulefile: %s: %q holds a newline: %s", p.Name, d, whyNewline)
			}
		}
	}
	for _, v := range m.Set {
		if !validName(v.Name) || strings.ContainsRune(v.Value, 0) {
			return fmt.Errorf("modulefile: %q=%q cannot be set", v.Name, v.Value)
		}
		if strings.Contains(v.Value, "\n") {
			return fmt.Errorf("modulefile: %s=%q holds a newline: %s", v.Name, v.Value, whyNewline)
		}
	}
	return nil
}

// whyNewline: Lmod 8.6 writes a value into the shell code that `module` evals with its
// other characters escaped but a newline as it is, which starts a command (measured).
const whyNewline = "Lmod writes a newline of a value into the shell code module evals unescaped, where it would start a command; use env.sh (an install prefix with a newline) or change the value"

// NameError is a module name or version that cannot become a file name: bad input.
type NameError struct{ Err error }

func (e *NameError) Error() string {
	return "modulefile: " + e.Err.Error() + "; give another with --as NAME/VERSION"
}
func (e *NameError) Unwrap() error { return e.Err }

func validName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// Lua is the Lmod modulefile (NAME/VERSION.lua).
func Lua(m Module) ([]byte, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	var b strings.Builder
	id := quote.Comment(m.Name + "/" + m.Version)
	fmt.Fprintf(&b, "-- -*- lua -*-\n-- %s, written by epbuild: `module load %s`\n", id, id)
	if m.Family != "" {
		fmt.Fprintf(&b, "family(%s)\n", quote.Lua(m.Family))
	}
	for _, w := range m.Whatis {
		fmt.Fprintf(&b, "whatis(%s)\n", quote.Lua(w))
	}
	if m.Help != "" {
		fmt.Fprintf(&b, "help(%s)\n", quote.Lua(m.Help))
	}
	for _, p := range m.Prepend {
		// each prepend goes in front: the last one written is searched first
		for i := len(p.Dirs) - 1; i >= 0; i-- {
			fmt.Fprintf(&b, "prepend_path(%s, %s)\n", quote.Lua(p.Name), quote.Lua(p.Dirs[i]))
		}
	}
	for _, v := range m.Set {
		fmt.Fprintf(&b, "pushenv(%s, %s)\n", quote.Lua(v.Name), quote.Lua(v.Value))
	}
	return []byte(b.String()), nil
}

// Tcl is the Tcl modulefile (NAME/VERSION). Its values are ASCII: tclsh reads and
// writes text in the locale's encoding (Latin-1 under the C locale of batch jobs), so
// anything else would arrive changed.
func Tcl(m Module) ([]byte, error) {
	if err := m.Check(); err != nil {
		return nil, err
	}
	// whatis and help are text for people: control characters are shown as escapes, one
	// text line per line
	whatis := make([]string, len(m.Whatis))
	for i, w := range m.Whatis {
		whatis[i] = quote.Term(w)
	}
	help := strings.Split(m.Help, "\n")
	for i, l := range help {
		help[i] = quote.Term(l)
	}
	texts := append(slices.Clone(whatis), help...)
	var values []string
	for _, p := range m.Prepend {
		values = append(values, p.Dirs...)
	}
	for _, v := range m.Set {
		values = append(values, v.Value)
	}
	for _, t := range append(texts, values...) {
		if i := strings.IndexFunc(t, func(r rune) bool { return r > 0x7e }); i >= 0 {
			return nil, fmt.Errorf("modulefile: %q is not ASCII, which a Tcl modulefile cannot carry unchanged (tclsh reads it in the locale's encoding): use the Lua modulefile", t)
		}
	}
	// Lmod's Tcl reader (8.6.19, read and measured) turns the modulefile into Lua: it
	// copies a carriage return or a tab into a Lua string unescaped, where it ends the
	// string; a prepend-path value with no escaping at all, where a '"' ends the string
	// and what follows runs; a whatis text into a [===[ ]===] string
	for _, v := range values {
		if strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return nil, fmt.Errorf("modulefile: %q holds a control character, which Lmod's Tcl reader cannot pass on: use the Lua modulefile", v)
		}
	}
	for _, p := range m.Prepend {
		for _, d := range p.Dirs {
			if strings.ContainsAny(d, `"\`) {
				return nil, fmt.Errorf("modulefile: %s: %q holds '\"' or '\\', which Lmod's Tcl reader writes unescaped into the Lua it runs (a '\"' would end the string and run what follows): use the Lua modulefile", p.Name, d)
			}
		}
	}
	for _, t := range texts {
		if strings.Contains(t, "]===]") {
			return nil, fmt.Errorf("modulefile: %q holds ]===], which ends the Lua string Lmod's Tcl reader writes a whatis text into: use the Lua modulefile", t)
		}
	}
	var b strings.Builder
	id := quote.Comment(m.Name + "/" + m.Version)
	fmt.Fprintf(&b, "#%%Module1.0\n## %s, written by epbuild: `module load %s`\n", id, id)
	fmt.Fprintf(&b, "conflict %s\n", quote.Tcl(m.Name))
	for _, w := range whatis {
		fmt.Fprintf(&b, "module-whatis %s\n", quote.Tcl(w))
	}
	if m.Help != "" {
		fmt.Fprintf(&b, "proc ModulesHelp { } {\n    puts stderr %s\n}\n", quote.Tcl(strings.Join(help, "\n")))
	}
	for _, p := range m.Prepend {
		for i := len(p.Dirs) - 1; i >= 0; i-- {
			fmt.Fprintf(&b, "prepend-path %s %s\n", p.Name, quote.Tcl(p.Dirs[i]))
		}
	}
	if len(m.Set) > 0 {
		b.WriteString(tclPushenv)
	}
	for _, v := range m.Set {
		fmt.Fprintf(&b, "_epbuild_pushenv %s %s\n", v.Name, quote.Tcl(v.Value))
	}
	return []byte(b.String()), nil
}

// tclPushenv sets a variable so that unload gives back the user's value (see the package
// comment): pushenv, with Lmod's environment put back to the user's value for Lmod to
// record. Under Lmod a variable the user does not have is set with setenv: its Tcl reader
// cannot unset a variable in Lmod's environment, and on unload pushenv's undo (popenv)
// of a variable with no stack unsets it. Where there is no pushenv, setenv.
const tclPushenv = `proc _epbuild_pushenv {name value} {
    set lmod [info exists ::env(LMOD_VERSION)]
    set had [info exists ::env($name)]
    if {[info commands pushenv] eq "" || ($lmod && !$had)} {
        setenv $name $value
        return
    }
    if {$had} {
        set old $::env($name)
    }
    pushenv $name $value
    if {$lmod} {
        set ::env($name) $old
    }
}
`
