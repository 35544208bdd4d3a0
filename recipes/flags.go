package recipes

import (
	"errors"
	"regexp"
	"strings"
)

// flagsRe matches the CMake variables that CMake pastes into compile and link command
// lines as they are, where Ninja and make hand them to /bin/sh: CMAKE_C_FLAGS,
// CMAKE_CUDA_FLAGS_RELEASE, CMAKE_SHARED_LINKER_FLAGS, CMAKE_CXX_FLAGS_INIT, ...
var flagsRe = regexp.MustCompile(`^CMAKE_[A-Z0-9_]*FLAGS(_[A-Z0-9]+)?$`)

// IsFlagsOption reports whether a cmake option is a list of compiler or linker flags
// (see SplitFlags for how its value is read).
func IsFlagsOption(name string) bool { return flagsRe.MatchString(name) }

// SplitFlags reads a flags value into the flags it lists, the way a POSIX shell splits
// words but with no expansion of any kind: blanks separate flags; single quotes keep
// everything inside; double quotes keep everything inside except that a backslash
// escapes \ " $ and `; outside quotes a backslash keeps the next character. $, `, ;, |,
// &, <, >, *, ? and the rest are plain characters: nothing is ever run or substituted.
// So "-O2 -DMSG='a b'" is two flags, -O2 and -DMSG=a b. An unterminated quote or a
// trailing backslash is an error.
func SplitFlags(s string) ([]string, error) {
	var (
		out   []string
		cur   strings.Builder
		inTok bool
	)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t':
			if inTok {
				out = append(out, cur.String())
				cur.Reset()
				inTok = false
			}
		case c == '\'':
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, errors.New("unterminated single quote")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
			inTok = true
		case c == '"':
			inTok = true
			closed := false
			for i++; i < len(s); i++ {
				d := s[i]
				if d == '"' {
					closed = true
					break
				}
				if d == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$`", s[i+1]) >= 0 {
					i++
					d = s[i]
				}
				cur.WriteByte(d)
			}
			if !closed {
				return nil, errors.New("unterminated double quote")
			}
		case c == '\\':
			if i+1 == len(s) {
				return nil, errors.New("a backslash at the end escapes nothing")
			}
			i++
			cur.WriteByte(s[i])
			inTok = true
		default:
			cur.WriteByte(c)
			inTok = true
		}
	}
	if inTok {
		out = append(out, cur.String())
	}
	return out, nil
}
