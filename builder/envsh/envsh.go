package envsh

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
)

// env.sh, the script jobs source to use an install, works in any POSIX shell (dash, bash,
// zsh, ksh93), sourced from anywhere. A POSIX shell cannot tell which file it is sourcing
// (bash, zsh and ksh93 can: BASH_SOURCE, %x, .sh.file), so the prefix is written into the
// script by `epbuild install`, with an id of that install; and the script never guesses:
//
//   - the install named in the script still holds this script (same id), and the shell,
//     where it can tell, is sourcing that very file (or a symlink to it): that prefix;
//   - else the shell can tell where the file is: its own directory (a copy of an install,
//     or an artifact unpacked by hand), unless it is sourced through a symlink it cannot
//     resolve portably;
//   - else it refuses, on stderr, with the fix, and returns 1: nothing is exported.
//
// The artifact carries the script with both lines empty; the manifest hashes that form,
// and verify-install accepts an installed env.sh whose only change is those two lines.
//
// It is data for the shell: every value is single-quoted (builder/quote), the prefix is
// only ever expanded inside double quotes, and a prefix may hold any byte but NUL (a
// newline or a backslash in it is written as printf %b reads it, see bakeEnv). Path lists
// (PATH, PYTHONPATH, LD_LIBRARY_PATH, LD_PRELOAD) get the install's entries in front of
// the user's, each once: sourcing it twice is sourcing it once. The file is not
// executable; run anyway (sh env.sh), it says how to source it and exits 1.

// Lines that epbuild install fills in (empty in the artifact).
const (
	envAtVar = "_epbuild_at="
	envIDVar = "_epbuild_id="
)

// envLocate finds the prefix or refuses; it is the same in every env.sh (the parser
// checks it byte for byte).
const EnvLocate = `case $_epbuild_at in
  *\\*)
    _epbuild_at=$(printf '%bx' "$_epbuild_at")
    _epbuild_at=${_epbuild_at%x}
    ;;
esac
_epbuild_self=
if [ -n "${BASH_VERSION-}" ]; then
  eval '_epbuild_self=${BASH_SOURCE[0]-}'
elif [ -n "${ZSH_VERSION-}" ]; then
  eval '_epbuild_self=${(%):-%x}'
else
  case "${KSH_VERSION-}" in *93*) eval '_epbuild_self=${.sh.file}' ;; esac
fi
if [ -n "$_epbuild_self" ] && ! [ -e "$_epbuild_self" ]; then
  _epbuild_self=
fi
_epbuild_run=
if [ -n "${ZSH_VERSION-}" ]; then
  case "${ZSH_EVAL_CONTEXT-}" in toplevel) _epbuild_run=$0 ;; esac
elif [ -n "$_epbuild_self" ]; then
  if [ "$0" -ef "$_epbuild_self" ]; then _epbuild_run=$0; fi
elif [ -n "$_epbuild_at" ]; then
  if [ "$0" -ef "$_epbuild_at/env.sh" ]; then _epbuild_run=$0; fi
else
  case "${0##*/}" in env.sh) _epbuild_run=$0 ;; esac
fi
if [ -n "$_epbuild_run" ]; then
  _epbuild_run=$(printf '%s\n' "$_epbuild_run" | sed "s/'/'\\\\''/g")
  printf "env.sh: it was run as a program, which sets nothing in the shell that ran it: source it: . '%s'\n" "$_epbuild_run" >&2
  exit 1
fi
_epbuild_here=
if [ -n "$_epbuild_at" ] && [ -r "$_epbuild_at/env.sh" ]; then
  while IFS= read -r _epbuild_line || [ -n "$_epbuild_line" ]; do
    if [ "$_epbuild_line" = "_epbuild_id='$_epbuild_id'" ]; then
      _epbuild_here=1
      break
    fi
  done < "$_epbuild_at/env.sh"
fi
if [ -n "$_epbuild_self" ] && [ -n "$_epbuild_here" ] && ! [ "$_epbuild_self" -ef "$_epbuild_at/env.sh" ]; then
  _epbuild_here=
fi
_epbuild_err=
if [ -n "$_epbuild_here" ]; then
  EPBUILD_PREFIX=$_epbuild_at
elif [ -n "$_epbuild_self" ] && [ -h "$_epbuild_self" ]; then
  _epbuild_err="$_epbuild_self is a symlink to an env.sh that is not where epbuild install put it: source the file itself, or install the artifact with epbuild install"
elif [ -n "$_epbuild_self" ]; then
  case "$_epbuild_self" in
    */*) _epbuild_dir=${_epbuild_self%/*} ;;
    *) _epbuild_dir=. ;;
  esac
  if EPBUILD_PREFIX=$(CDPATH= cd -P -- "${_epbuild_dir:-/}" && pwd -P && echo x); then
    EPBUILD_PREFIX=${EPBUILD_PREFIX%?x}
  else
    _epbuild_err="cannot enter the directory of $_epbuild_self"
  fi
elif [ -n "$_epbuild_at" ]; then
  _epbuild_err="this shell cannot tell where env.sh is, and $_epbuild_at, where epbuild install put it, no longer holds it (moved, copied or kept as a previous install): source it from bash, zsh or ksh93, or install the artifact where it is now with epbuild install"
else
  _epbuild_err="this shell cannot tell where env.sh is, and epbuild install did not write it: install the artifact with epbuild install ARTIFACT --prefix DIR, or source it from bash, zsh or ksh93"
fi
if [ -n "$_epbuild_err" ]; then
  printf 'env.sh: %s; nothing was set\n' "$_epbuild_err" >&2
  unset _epbuild_at _epbuild_id _epbuild_self _epbuild_run _epbuild_here _epbuild_line _epbuild_dir _epbuild_err
  return 1
fi
export EPBUILD_PREFIX
_epbuild_prepend() {
  _epbuild_var=$1
  shift
  eval "_epbuild_old=\${$_epbuild_var-}"
  _epbuild_new=
  for _epbuild_p in "$@"; do
    case $_epbuild_var in
      LD_PRELOAD) case " :$_epbuild_old: " in *[\ :]"$_epbuild_p"[\ :]*) continue ;; esac ;;
      *) case ":$_epbuild_old:" in *:"$_epbuild_p":*) continue ;; esac ;;
    esac
    _epbuild_new=$_epbuild_new${_epbuild_new:+:}$_epbuild_p
  done
  eval "$_epbuild_var=\$_epbuild_new\${_epbuild_new:+\${_epbuild_old:+:}}\$_epbuild_old"
  export "$_epbuild_var"
}
`

// envMode is env.sh's mode: it is sourced, never run (run, it would set nothing).
const EnvMode = 0o644

// envPrepend begins a line that puts directories in front of a path list, each once.
const EnvPrepend = "_epbuild_prepend"

// envTail ends every env.sh.
const EnvTail = "unset -f _epbuild_prepend\nunset _epbuild_at _epbuild_id _epbuild_self _epbuild_run _epbuild_here _epbuild_line _epbuild_dir _epbuild_err _epbuild_var _epbuild_old _epbuild_new _epbuild_p\n"

// EnvScript writes env.sh as the artifact carries it (no prefix written in): the locator,
// then PREFIX/bin in front of PATH, PYTHONPATH and LD_LIBRARY_PATH for the components
// (laid out under root) that have python/ and lib/, the recipe's LD_PRELOAD in front of
// the user's, and exports of the rest of the recipe's runtime env, with {{C.prefix}}
// pointing into the prefix. Values are single-quoted; only the prefix is expanded.
func EnvScript(p *plan.Plan, root string, installed []string) (string, error) {
	return ScriptWith(p, func(c string) string { return filepath.Join(root, c) }, installed)
}

// scriptWith is EnvScript with each installed component's tree at dirOf(component) (the
// package stage packs the staged prefixes where they are).
func ScriptWith(p *plan.Plan, dirOf func(string) string, installed []string) (string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# env.sh for %s (plan %s), written by epbuild: . PREFIX/%s from any POSIX shell (sh, bash, zsh, ksh93)\n", p.Recipe, p.Key[:12], manifest.EnvName)
	b.WriteString("# epbuild install writes the install's directory and id on the next two lines\n")
	b.WriteString(envAtVar + "''\n" + envIDVar + "''\n")
	b.WriteString(EnvLocate)
	has := map[string]bool{}
	for _, c := range installed {
		has[c] = true
	}
	var py, ld []string
	for _, c := range installed {
		if disk.DirExists(filepath.Join(dirOf(c), "python")) {
			py = append(py, `"$EPBUILD_PREFIX"/`+quote.ShellAlways(c+"/python"))
		}
		if disk.DirExists(filepath.Join(dirOf(c), "lib")) {
			ld = append(ld, `"$EPBUILD_PREFIX"/`+quote.ShellAlways(c+"/lib"))
		}
	}
	// PREFIX/bin holds the epbuild that installed it (epbuild install puts it there)
	fmt.Fprintf(&b, "%s PATH %s\n", EnvPrepend, `"$EPBUILD_PREFIX"/`+quote.ShellAlways("bin"))
	if len(py) > 0 {
		fmt.Fprintf(&b, "%s PYTHONPATH %s\n", EnvPrepend, strings.Join(py, " "))
	}
	if len(ld) > 0 {
		fmt.Fprintf(&b, "%s LD_LIBRARY_PATH %s\n", EnvPrepend, strings.Join(ld, " "))
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		if k == "LD_PRELOAD" {
			// in front of a site's own preload (XALT, Darshan, a profiler), which stays
			var words []string
			for _, e := range SplitPaths(k, p.Env[k]) {
				w, err := shellTemplate(e, has)
				if err != nil {
					return "", fmt.Errorf("env.sh for %s: %s: %w", p.Recipe, k, err)
				}
				words = append(words, w)
			}
			if len(words) > 0 {
				fmt.Fprintf(&b, "%s %s %s\n", EnvPrepend, k, strings.Join(words, " "))
			}
			continue
		}
		v, err := shellTemplate(p.Env[k], has)
		if err != nil {
			return "", fmt.Errorf("env.sh for %s: %s: %w", p.Recipe, k, err)
		}
		fmt.Fprintf(&b, "export %s=%s\n", k, v)
	}
	b.WriteString(EnvTail)
	return b.String(), nil
}

// envBaked is what epbuild install wrote into an env.sh: the install's directory and id
// ("" in the artifact's form).
type EnvBaked struct {
	At, ID string
}

// bakeEnv writes the install's directory and id into the artifact's env.sh.
func BakeEnv(text string, b EnvBaked) (string, error) {
	tmpl, cur, err := UnbakeEnv(text)
	if err != nil {
		return "", err
	}
	if cur != (EnvBaked{}) {
		return "", errors.New("env.sh already names an install")
	}
	if strings.ContainsRune(b.At, 0) || strings.ContainsAny(b.ID, "\n\\\x00") {
		return "", fmt.Errorf("%q (id %q) cannot be written into env.sh", b.At, b.ID)
	}
	tmpl = strings.Replace(tmpl, "\n"+envAtVar+"''\n", "\n"+envAtVar+quote.ShellAlways(atEscaper.Replace(b.At))+"\n", 1)
	return strings.Replace(tmpl, "\n"+envIDVar+"''\n", "\n"+envIDVar+quote.ShellAlways(b.ID)+"\n", 1), nil
}

// atEscaper keeps the prefix line one line: a backslash and a newline are written as
// printf %b reads them, which env.sh does when the line holds a backslash.
var atEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

// unescapeAt reads what atEscaper wrote.
func unescapeAt(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", false
		}
		i++
		switch s[i] {
		case '\\':
			b.WriteByte('\\')
		case 'n':
			b.WriteByte('\n')
		default:
			return "", false
		}
	}
	return b.String(), true
}

// unbakeEnv returns env.sh in the artifact's form and what install wrote into it. The two
// lines must be the third and fourth, each once.
func UnbakeEnv(text string) (string, EnvBaked, error) {
	lines := strings.SplitAfter(text, "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[2], envAtVar) || !strings.HasPrefix(lines[3], envIDVar) {
		return "", EnvBaked{}, fmt.Errorf("env.sh does not begin with the two lines epbuild writes (%s..., %s...)", envAtVar, envIDVar)
	}
	var b EnvBaked
	for i, dst := range []*string{&b.At, &b.ID} {
		name := []string{envAtVar, envIDVar}[i]
		v, ok := singleQuoted(strings.TrimSuffix(strings.TrimPrefix(lines[2+i], name), "\n"))
		if ok && i == 0 {
			v, ok = unescapeAt(v)
		}
		if !ok {
			return "", EnvBaked{}, fmt.Errorf("env.sh line %d: %q is not a single-quoted value", 3+i, strings.TrimSuffix(lines[2+i], "\n"))
		}
		*dst = v
		lines[2+i] = name + "''\n"
	}
	return strings.Join(lines, ""), b, nil
}

// singleQuoted reads a value quote.ShellAlways wrote: single-quoted pieces and \'.
func singleQuoted(s string) (string, bool) {
	if !strings.HasPrefix(s, "'") {
		return "", false
	}
	var out strings.Builder
	for s != "" {
		switch {
		case strings.HasPrefix(s, `\'`):
			out.WriteByte('\'')
			s = s[2:]
		case s[0] == '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return "", false
			}
			out.WriteString(s[1 : 1+end])
			s = s[end+2:]
		default:
			return "", false
		}
	}
	return out.String(), true
}

// newEnvID is a fresh install id: env.sh checks that the prefix written in it still holds
// this install, not a later one (an install kept as PREFIX.prev, a moved one).
func newEnvID() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("make an install id: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// BakeEnvScript writes the prefix the install at tree will have (final) and a fresh id
// into tree's env.sh, keeping its mode.
func BakeEnvScript(tree, final string) error {
	path := filepath.Join(tree, manifest.EnvName)
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("write the prefix into %s: %w", manifest.EnvName, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("write the prefix into %s: %w", manifest.EnvName, err)
	}
	id, err := newEnvID()
	if err != nil {
		return err
	}
	out, err := BakeEnv(string(b), EnvBaked{At: final, ID: id})
	if err != nil {
		return fmt.Errorf("write the prefix into %s: %w", manifest.EnvName, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(out), st.Mode().Perm()); err != nil {
		return fmt.Errorf("write the prefix into %s: %w", manifest.EnvName, err)
	}
	// WriteFile's mode passes through the umask: set it as the manifest records it
	if err := os.Chmod(tmp, st.Mode().Perm()); err != nil {
		return fmt.Errorf("write the prefix into %s: %w", manifest.EnvName, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the prefix into %s: %w", manifest.EnvName, err)
	}
	return nil
}

// shellTemplate turns "{{nvshmem.prefix}}/lib/x" into "$EPBUILD_PREFIX"/'nvshmem/lib/x'.
func shellTemplate(v string, installed map[string]bool) (string, error) {
	var out strings.Builder
	rest := v
	for {
		loc := templRe.FindStringSubmatchIndex(rest)
		if loc == nil {
			break
		}
		lit, ref := rest[:loc[0]], rest[loc[2]:loc[3]]
		if lit != "" {
			out.WriteString(quote.ShellAlways(lit))
		}
		switch {
		case ref == "prefix":
			out.WriteString(`"$EPBUILD_PREFIX"`)
		case strings.HasSuffix(ref, ".prefix") && installed[strings.TrimSuffix(ref, ".prefix")]:
			out.WriteString(`"$EPBUILD_PREFIX"/` + quote.ShellAlways(strings.TrimSuffix(ref, ".prefix")))
		default:
			return "", fmt.Errorf("{{%s}} does not name an installed component", ref)
		}
		rest = rest[loc[1]:]
	}
	if rest != "" || out.Len() == 0 {
		out.WriteString(quote.ShellAlways(rest))
	}
	return out.String(), nil
}
