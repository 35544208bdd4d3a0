package envsh

import (
	"errors"
	"fmt"
	"strings"
)

// parseEnvScript reads back what EnvScript writes (and install bakes), with
// EPBUILD_PREFIX = prefix and an empty inherited environment: it returns each export's
// value, the export order and what install wrote into it. Anything EnvScript does not
// write is an error, so a hand-edited env.sh shows.
func ParseEnvScript(text, prefix string) (map[string]string, []string, EnvBaked, error) {
	tmpl, baked, err := UnbakeEnv(text)
	if err != nil {
		return nil, nil, baked, err
	}
	lines := strings.SplitAfter(tmpl, "\n")
	for i := range 2 {
		if !strings.HasPrefix(lines[i], "#") {
			return nil, nil, baked, fmt.Errorf("env.sh line %d: %q is not the comment epbuild writes", i+1, strings.TrimSpace(lines[i]))
		}
	}
	body, ok := strings.CutPrefix(strings.Join(lines[4:], ""), EnvLocate)
	if !ok {
		return nil, nil, baked, errors.New("env.sh: the lines that find the prefix (from line 5) are not the ones epbuild writes")
	}
	first := 5 + strings.Count(EnvLocate, "\n")
	body, ok = strings.CutSuffix(body, EnvTail)
	if !ok {
		return nil, nil, baked, fmt.Errorf("env.sh: it does not end with the lines epbuild writes (%s)", strings.ReplaceAll(strings.TrimSpace(EnvTail), "\n", "; "))
	}
	vars := map[string]string{"EPBUILD_PREFIX": prefix}
	var order []string
	for i, line := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if body == "" {
			break
		}
		var name, v string
		if rest, ok := strings.CutPrefix(line, EnvPrepend+" "); ok {
			// directories in front of a path list; the inherited value is empty here
			name, rest, _ = strings.Cut(rest, " ")
			words, err := shellWords(rest, prefix)
			if err != nil || len(words) == 0 || !validEnvName(name) || name == "EPBUILD_PREFIX" {
				return nil, nil, baked, fmt.Errorf("env.sh line %d: %q is not a line epbuild writes", first+i, line)
			}
			v = strings.Join(words, ":")
		} else {
			rest, ok := strings.CutPrefix(line, "export ")
			k, val, ok2 := strings.Cut(rest, "=")
			if !ok || !ok2 || !validEnvName(k) || k == "EPBUILD_PREFIX" {
				return nil, nil, baked, fmt.Errorf("env.sh line %d: %q is not an export epbuild writes", first+i, line)
			}
			words, err := shellWords(val, prefix)
			if err == nil && len(words) != 1 {
				err = errors.New("not one word")
			}
			if err != nil {
				return nil, nil, baked, fmt.Errorf("env.sh line %d: %s: %w", first+i, k, err)
			}
			name, v = k, words[0]
		}
		if _, dup := vars[name]; !dup {
			order = append(order, name)
		}
		vars[name] = v
	}
	return vars, order, baked, nil
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// shellWords evaluates words made of the pieces EnvScript writes: "$EPBUILD_PREFIX",
// single-quoted literals and plain characters, separated by one blank. Anything else (a
// substitution, an unquoted $) is refused.
func shellWords(s, prefix string) ([]string, error) {
	var words []string
	var out strings.Builder
	started := false
	for s != "" {
		switch {
		case strings.HasPrefix(s, `"$EPBUILD_PREFIX"`):
			out.WriteString(prefix)
			s = s[len(`"$EPBUILD_PREFIX"`):]
		case strings.HasPrefix(s, `\'`):
			out.WriteByte('\'')
			s = s[2:]
		case s[0] == '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return nil, errors.New("unterminated single quote")
			}
			out.WriteString(s[1 : 1+end])
			s = s[end+2:]
		case s[0] == ' ' && started && len(s) > 1 && s[1] != ' ':
			words = append(words, out.String())
			out.Reset()
			s = s[1:]
			continue
		case strings.IndexByte(shellPlain, s[0]) >= 0:
			out.WriteByte(s[0])
			s = s[1:]
		default:
			return nil, fmt.Errorf("unexpected %q", s)
		}
		started = true
	}
	if started {
		words = append(words, out.String())
	}
	return words, nil
}

// shellPlain are the characters that mean themselves unquoted in sh.
const shellPlain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,+-=@%"
