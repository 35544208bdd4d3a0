package effect

import (
	"strings"
)

// CTokType is the type of a C/C++/CUDA token.
type CTokType int

// C token types. Comments produce no token.
const (
	CIdent CTokType = iota
	CNumber
	CString
	CChar
	CPunct
	// CDirective is a whole preprocessor line, continuations joined and comments removed.
	CDirective
)

// CToken is one C token.
type CToken struct {
	Type CTokType
	// Text is the source text; for CDirective the joined line without comments.
	Text string
	Line int
	// Active is false inside an #if 0 block.
	Active bool
}

type cScanner struct {
	src  []byte
	pos  int
	line int
	toks []CToken
}

// TokenizeC splits C, C++ or CUDA source into tokens: comments dropped, string and char
// literals (raw strings too) kept whole, preprocessor lines as one token each. Tokens
// inside "#if 0" blocks are marked inactive.
func TokenizeC(src []byte) []CToken {
	s := &cScanner{src: src, line: 1}
	bol := true
	for s.pos < len(src) {
		c := src[s.pos]
		switch {
		case c == '\n':
			s.pos++
			s.line++
			bol = true
			continue
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			s.pos++
			continue
		case c == '\\' && s.splice(s.pos) > 0:
			s.pos += s.splice(s.pos)
			s.line++
			continue
		case c == '/' && s.peek(1) == '/':
			s.lineComment()
			continue
		case c == '/' && s.peek(1) == '*':
			s.blockComment()
			continue
		case c == '#' && bol:
			s.directive()
			continue
		}
		bol = false
		s.token()
	}
	markIf0(s.toks)
	return s.toks
}

func (s *cScanner) peek(n int) byte {
	if s.pos+n < len(s.src) {
		return s.src[s.pos+n]
	}
	return 0
}

// splice is the length of a backslash-newline at i, or 0.
func (s *cScanner) splice(i int) int {
	if i+1 < len(s.src) && s.src[i] == '\\' {
		if s.src[i+1] == '\n' {
			return 2
		}
		if s.src[i+1] == '\r' && i+2 < len(s.src) && s.src[i+2] == '\n' {
			return 3
		}
	}
	return 0
}

// lineComment skips // to the end of the line; a backslash-newline continues it.
func (s *cScanner) lineComment() {
	for s.pos < len(s.src) && s.src[s.pos] != '\n' {
		if n := s.splice(s.pos); n > 0 {
			s.pos += n
			s.line++
			continue
		}
		s.pos++
	}
}

func (s *cScanner) blockComment() {
	s.pos += 2
	for s.pos < len(s.src) {
		if s.src[s.pos] == '*' && s.peek(1) == '/' {
			s.pos += 2
			return
		}
		if s.src[s.pos] == '\n' {
			s.line++
		}
		s.pos++
	}
}

// directive reads a preprocessor line from its '#'.
func (s *cScanner) directive() {
	line := s.line
	var b strings.Builder
	for s.pos < len(s.src) && s.src[s.pos] != '\n' {
		c := s.src[s.pos]
		switch {
		case s.splice(s.pos) > 0:
			s.pos += s.splice(s.pos)
			s.line++
		case c == '/' && s.peek(1) == '/':
			s.lineComment()
		case c == '/' && s.peek(1) == '*':
			s.blockComment()
			b.WriteByte(' ')
		case c == '"' || c == '\'':
			start := s.pos
			s.quoted(c)
			b.Write(s.src[start:s.pos])
		default:
			b.WriteByte(c)
			s.pos++
		}
	}
	s.toks = append(s.toks, CToken{Type: CDirective, Text: strings.TrimSpace(b.String()), Line: line, Active: true})
}

// quoted skips a literal from its opening quote; it stops at an unescaped line break,
// where C literals end even when unterminated.
func (s *cScanner) quoted(q byte) {
	s.pos++
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		switch {
		case c == q:
			s.pos++
			return
		case c == '\\':
			if n := s.splice(s.pos); n > 0 {
				s.pos += n
				s.line++
				continue
			}
			s.pos += min(2, len(s.src)-s.pos)
			if s.src[s.pos-1] == '\n' {
				s.line++
			}
		case c == '\n':
			return
		default:
			s.pos++
		}
	}
}

func isCIdent(c byte, first bool) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 || !first && isDigit(c)
}

func (s *cScanner) token() {
	start, line := s.pos, s.line
	c := s.src[s.pos]
	emit := func(t CTokType) {
		s.toks = append(s.toks, CToken{Type: t, Text: string(s.src[start:s.pos]), Line: line, Active: true})
	}
	switch {
	case isCIdent(c, true):
		for s.pos < len(s.src) && isCIdent(s.src[s.pos], false) {
			s.pos++
		}
		id := string(s.src[start:s.pos])
		if s.pos < len(s.src) {
			switch q := s.src[s.pos]; {
			case q == '"' && (id == "R" || id == "LR" || id == "uR" || id == "UR" || id == "u8R"):
				s.rawString()
				emit(CString)
				return
			case q == '"' && (id == "L" || id == "u" || id == "U" || id == "u8"):
				s.quoted('"')
				emit(CString)
				return
			case q == '\'' && (id == "L" || id == "u" || id == "U" || id == "u8"):
				s.quoted('\'')
				emit(CChar)
				return
			}
		}
		emit(CIdent)
	case isDigit(c) || c == '.' && isDigit(s.peek(1)):
		for s.pos < len(s.src) {
			d := s.src[s.pos]
			if (d == '+' || d == '-') && strings.IndexByte("eEpP", s.src[s.pos-1]) >= 0 ||
				isCIdent(d, false) || d == '.' || d == '\'' && s.pos+1 < len(s.src) && isCIdent(s.src[s.pos+1], false) {
				s.pos++
				continue
			}
			break
		}
		emit(CNumber)
	case c == '"':
		s.quoted('"')
		emit(CString)
	case c == '\'':
		s.quoted('\'')
		emit(CChar)
	default:
		s.pos++
		emit(CPunct)
	}
}

// rawString skips R"delim( ... )delim" from its quote.
func (s *cScanner) rawString() {
	open := s.pos
	s.pos++
	for s.pos < len(s.src) && s.src[s.pos] != '(' && s.src[s.pos] != '\n' && s.pos-open <= 17 {
		s.pos++
	}
	if s.pos >= len(s.src) || s.src[s.pos] != '(' {
		return
	}
	closing := ")" + string(s.src[open+1:s.pos]) + `"`
	end := strings.Index(string(s.src[s.pos:]), closing)
	if end < 0 {
		end = len(s.src) - s.pos
	} else {
		end += len(closing)
	}
	s.line += strings.Count(string(s.src[s.pos:s.pos+end]), "\n")
	s.pos += end
}

// directiveName splits "# include <x>" into "include" and "<x>".
func directiveName(text string) (string, string) {
	t := strings.TrimSpace(strings.TrimPrefix(text, "#"))
	i := 0
	for i < len(t) && isCIdent(t[i], i == 0) {
		i++
	}
	return t[:i], strings.TrimSpace(t[i:])
}

// markIf0 marks tokens inside "#if 0" blocks (only that literal form) inactive; an #else
// or #elif of such a block is active again. Other conditionals are taken as active.
func markIf0(toks []CToken) {
	type frame struct{ if0, skipping, inherited bool }
	var stack []frame
	skipping := func() bool { return len(stack) > 0 && stack[len(stack)-1].skipping }
	for i := range toks {
		if toks[i].Type != CDirective {
			toks[i].Active = !skipping()
			continue
		}
		name, rest := directiveName(toks[i].Text)
		outer := skipping()
		toks[i].Active = !outer
		switch name {
		case "if", "ifdef", "ifndef":
			if0 := name == "if" && rest == "0"
			stack = append(stack, frame{if0: if0, skipping: outer || if0, inherited: outer})
		case "elif", "elifdef", "elifndef", "else":
			if n := len(stack); n > 0 && !stack[n-1].inherited && stack[n-1].if0 {
				stack[n-1].skipping = false
				toks[i].Active = true
			}
		case "endif":
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		}
	}
}

// CInclude is one #include line.
type CInclude struct {
	Path  string // as written, without the quotes or angle brackets
	Angle bool   // <path> rather than "path"
	Line  int
}

// Includes lists the active #include, #include_next and #import lines.
func Includes(toks []CToken) []CInclude {
	var out []CInclude
	for _, t := range toks {
		if t.Type != CDirective || !t.Active {
			continue
		}
		name, rest := directiveName(t.Text)
		if name != "include" && name != "include_next" && name != "import" || rest == "" {
			continue
		}
		closer := map[byte]byte{'"': '"', '<': '>'}[rest[0]]
		if closer == 0 {
			continue // a macro include: the header is not known here
		}
		if end := strings.IndexByte(rest[1:], closer); end >= 0 {
			out = append(out, CInclude{Path: rest[1 : 1+end], Angle: rest[0] == '<', Line: t.Line})
		}
	}
	return out
}

// includeMatches reports whether the included path names header: equal, or ending in
// "/"+header, so "ibgda_device.cuh" matches "../x/ibgda_device.cuh" but not
// "my_ibgda_device.cuh".
func includeMatches(path, header string) bool {
	path = strings.ReplaceAll(path, `\`, "/")
	header = strings.TrimPrefix(header, "./")
	return path == header || strings.HasSuffix(path, "/"+header)
}

// CEnvRead is a read of an environment variable in C.
type CEnvRead struct {
	Name string
	Line int
}

// CEnvReads finds string literals passed to a function whose name ends in "getenv" (any
// case: getenv, secure_getenv, std::getenv, wrappers), in active code and in #define
// bodies.
func CEnvReads(toks []CToken) []CEnvRead {
	var out []CEnvRead
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		if !t.Active {
			continue
		}
		if t.Type == CDirective {
			if name, rest := directiveName(t.Text); name == "define" {
				for _, r := range CEnvReads(TokenizeC([]byte(rest))) {
					out = append(out, CEnvRead{Name: r.Name, Line: t.Line})
				}
			}
			continue
		}
		if t.Type != CIdent || !strings.HasSuffix(strings.ToLower(t.Text), "getenv") ||
			i+1 >= len(toks) || toks[i+1].Type != CPunct || toks[i+1].Text != "(" {
			continue
		}
		depth := 0
		for j := i + 1; j < len(toks); j++ {
			u := toks[j]
			if u.Type == CPunct {
				switch u.Text {
				case "(", "[", "{":
					depth++
				case ")", "]", "}":
					depth--
				}
				if depth == 0 {
					break
				}
				continue
			}
			if u.Type == CString && depth == 1 && (toks[j-1].Type != CString) {
				v := cStringValue(u.Text)
				for k := j + 1; k < len(toks) && toks[k].Type == CString; k++ {
					v += cStringValue(toks[k].Text)
				}
				out = append(out, CEnvRead{Name: v, Line: u.Line})
			}
		}
	}
	return out
}

// cStringValue is the content of a C string literal with simple escapes decoded; enough
// for environment variable names.
func cStringValue(lit string) string {
	q := strings.IndexByte(lit, '"')
	if q < 0 {
		return ""
	}
	prefix, body := lit[:q], lit[q:]
	if strings.HasSuffix(prefix, "R") {
		open := strings.IndexByte(body, '(')
		closeAt := strings.LastIndexByte(body, ')')
		if open < 0 || closeAt < open {
			return ""
		}
		return body[open+1 : closeAt]
	}
	body = strings.TrimPrefix(body, `"`)
	body = strings.TrimSuffix(body, `"`)
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		if body[i] == '\\' && i+1 < len(body) {
			i++
			switch body[i] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			default:
				b.WriteByte(body[i])
			}
			continue
		}
		b.WriteByte(body[i])
	}
	return b.String()
}
