// Package quote turns a string that came from outside epbuild (an artifact, a manifest, a
// registry, a report, a recipe) into data for the one format it is written into: a POSIX
// shell word, a Lua or Tcl string, a terminal line, a file-name component. Each format
// has one function here; nothing else in epbuild hand-rolls its own escaping.
//
// It is a leaf: it imports only the standard library.
package quote

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Shell is s as one POSIX shell word: left bare when it holds only characters no shell
// treats specially, else single-quoted (a single quote written as '\”). Safe in sh,
// dash, bash, zsh and ksh, in a script or pasted at a prompt. A newline stays a
// newline inside the quotes, which the shell keeps as data.
func Shell(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,/:+@%") == "" {
		return s
	}
	return ShellAlways(s)
}

// ShellAlways single-quotes s for a POSIX shell even where no quote is needed, for
// values a script reads back with its own parser.
func ShellAlways(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Lua is a Lua string literal of s: every byte outside printable ASCII, the quote and
// the backslash escaped, so no byte of s can end the literal or a comment around it.
func Lua(s string) string {
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

// Tcl is a Tcl word of s in double quotes, with everything Tcl substitutes there ($, [,
// \), the braces and the quote escaped, and control characters as \xHH escapes, so that
// s is one word whatever it holds. Tcl modulefiles are ASCII (tclsh reads them in the
// locale's encoding): callers refuse other bytes first (ASCII reports which).
func Tcl(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\' || r == '$' || r == '[' || r == ']' || r == '{' || r == '}':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ASCII reports whether s is printable ASCII (tab and newline allowed).
func ASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c > 0x7e || c < 0x20 && c != '\t' && c != '\n' {
			return false
		}
	}
	return true
}

// Comment is s made safe for the rest of a one-line comment in any of the formats epbuild
// writes (shell, Lua, Tcl, YAML): control characters, including the newline that would
// end the comment and start code, shown as Go escapes; invalid UTF-8 likewise.
func Comment(s string) string { return Term(s) }

// Term is s made safe for a terminal: every control character (C0, DEL, C1, and the
// newline and carriage return that would forge another line), every invalid UTF-8 byte
// and every Unicode format character (bidirectional overrides) written as a visible Go
// escape (\n, \x1b, \u202e), so that a string from a report, an artifact or a registry
// cannot move the cursor, set a title, clear the screen, add a hyperlink or fake a line.
// Printable text, including non-ASCII letters, is left as it is.
func Term(s string) string {
	if termClean(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\\':
			// kept as one backslash unless it could be read as the start of an escape we wrote
			b.WriteString(`\\`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0, unicode.Is(unicode.Cf, r), r == 0x2028 || r == 0x2029:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}

func termClean(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

// Name checks that s can be one component of a file name epbuild writes: non-empty, at
// most 128 bytes, letters, digits, '.', '_', '-' and '+' only, not starting with '.' or
// '-'. what says what s is, for the error ("recipe name", "version").
func Name(what, s string) error {
	if s == "" {
		return fmt.Errorf("the %s is empty: it must be a name of letters, digits, '.', '_', '-' or '+'", what)
	}
	if len(s) > 128 {
		return fmt.Errorf("the %s %s is %d bytes long: at most 128 may become a file name", what, strconv.Quote(trunc(s, 40)), len(s))
	}
	if s[0] == '.' || s[0] == '-' {
		return fmt.Errorf("the %s %q starts with %q: a file name made from it would be hidden or read as a flag", what, s, s[:1])
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-' || c == '+' {
			continue
		}
		return fmt.Errorf("the %s %q holds %q at byte %d: only letters, digits, '.', '_', '-' and '+' may become a file name", what, s, string(c), i)
	}
	return nil
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Tail is the end of a program's output for an error message: its last n runes, trimmed,
// "…" in front when it was cut. Not escaped: pass it through Term where it is printed.
func Tail(s string, n int) string {
	r := []rune(strings.TrimSpace(s))
	if len(r) <= n {
		return string(r)
	}
	return "…" + string(r[len(r)-n:])
}
