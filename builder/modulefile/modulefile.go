// Package modulefile writes environment modules for an install: Lmod's Lua modulefiles
// and Tcl modulefiles (read by Lmod and by Environment Modules 4.x and later).
//
// Paths the install adds to (PYTHONPATH, LD_LIBRARY_PATH) are prepended, so that the
// user's own entries stay after them and `module unload` removes exactly what was added
// (Lmod's sh_to_modulefile on env.sh would turn the prepends into setenv and clobber the
// user's paths). The recipe's runtime env is set: in Lua with pushenv, which `module
// unload` undoes, giving back a value the user had; in Tcl with setenv, which unload
// unsets, because Lmod's Tcl reader does not undo pushenv (measured with Lmod 8.6.19,
// Debian bookworm: the variable stays set after unload).
package modulefile

import (
	"fmt"
	"slices"
	"strings"
)

// Module is what a modulefile does.
type Module struct {
	// Name and Version are how the module is loaded (name/version).
	Name, Version string
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

// Check refuses what no modulefile can carry: names that are not variable names, values
// with a NUL.
func (m Module) Check() error {
	for _, p := range m.Prepend {
		if !validName(p.Name) {
			return fmt.Errorf("modulefile: %q is not a variable name", p.Name)
		}
		for _, d := range p.Dirs {
			if strings.ContainsAny(d, "\x00:") || d == "" {
				return fmt.Errorf("modulefile: %s: %q cannot be a directory of a path list", p.Name, d)
			}
		}
	}
	for _, v := range m.Set {
		if !validName(v.Name) || strings.ContainsRune(v.Value, 0) {
			return fmt.Errorf("modulefile: %q=%q cannot be set", v.Name, v.Value)
		}
	}
	return nil
}

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
	fmt.Fprintf(&b, "-- -*- lua -*-\n-- %s/%s, written by epbuild: `module load %s/%s`\n", m.Name, m.Version, m.Name, m.Version)
	for _, w := range m.Whatis {
		fmt.Fprintf(&b, "whatis(%s)\n", luaQuote(w))
	}
	if m.Help != "" {
		fmt.Fprintf(&b, "help(%s)\n", luaQuote(m.Help))
	}
	for _, p := range m.Prepend {
		// each prepend goes in front: the last one written is searched first
		for i := len(p.Dirs) - 1; i >= 0; i-- {
			fmt.Fprintf(&b, "prepend_path(%s, %s)\n", luaQuote(p.Name), luaQuote(p.Dirs[i]))
		}
	}
	for _, v := range m.Set {
		fmt.Fprintf(&b, "pushenv(%s, %s)\n", luaQuote(v.Name), luaQuote(v.Value))
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
	texts := append(slices.Clone(m.Whatis), m.Help)
	for _, p := range m.Prepend {
		texts = append(texts, p.Dirs...)
	}
	for _, v := range m.Set {
		texts = append(texts, v.Value)
	}
	for _, t := range texts {
		if i := strings.IndexFunc(t, func(r rune) bool { return r > 0x7e }); i >= 0 {
			return nil, fmt.Errorf("modulefile: %q is not ASCII, which a Tcl modulefile cannot carry unchanged (tclsh reads it in the locale's encoding): use the Lua modulefile", t)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "#%%Module1.0\n## %s/%s, written by epbuild: `module load %s/%s`\n", m.Name, m.Version, m.Name, m.Version)
	for _, w := range m.Whatis {
		fmt.Fprintf(&b, "module-whatis %s\n", tclQuote(w))
	}
	if m.Help != "" {
		fmt.Fprintf(&b, "proc ModulesHelp { } {\n    puts stderr %s\n}\n", tclQuote(m.Help))
	}
	for _, p := range m.Prepend {
		for i := len(p.Dirs) - 1; i >= 0; i-- {
			fmt.Fprintf(&b, "prepend-path %s %s\n", p.Name, tclQuote(p.Dirs[i]))
		}
	}
	for _, v := range m.Set {
		fmt.Fprintf(&b, "setenv %s %s\n", v.Name, tclQuote(v.Value))
	}
	return []byte(b.String()), nil
}

// luaQuote is a Lua string literal of s: every byte outside printable ASCII, and the
// quote and backslash, escaped.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// tclQuote is a Tcl word of s in double quotes, with everything Tcl substitutes there
// ($, [, \) and the quote escaped.
func tclQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"', '\\', '$', '[', ']', '{', '}':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
