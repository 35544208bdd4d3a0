package effect

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// PyTokType is the type of a Python token; the names follow Python's tokenize module so
// that tests can compare token streams with it.
type PyTokType int

// Python token types.
const (
	PyEndMarker PyTokType = iota
	PyName
	PyNumber
	PyString
	PyOp
	PyNewline // end of a logical line
	PyNL      // a line break that does not end a logical line (blank, comment-only, inside brackets)
	PyComment
	PyIndent
	PyDedent
	PyErrorToken
)

var pyTokNames = [...]string{"ENDMARKER", "NAME", "NUMBER", "STRING", "OP", "NEWLINE", "NL", "COMMENT", "INDENT", "DEDENT", "ERRORTOKEN"}

func (t PyTokType) String() string {
	if int(t) >= 0 && int(t) < len(pyTokNames) {
		return pyTokNames[t]
	}
	return fmt.Sprintf("PyTokType(%d)", int(t))
}

// Span is a byte range [Start, End) of the source; Line and Col are where it starts.
type Span struct{ Start, End, Line, Col int }

// PyToken is one Python token. Offsets are bytes into the source; Col is the byte column.
type PyToken struct {
	Type PyTokType
	Text string
	Line int
	Col  int
	Off  int
	// Exprs holds, for an f-string (or t-string), the source ranges of its replacement-field
	// expressions: the string stays one token, as in Python < 3.12, but code inside it can
	// still be read (a call in f"{self.x()}" is a real call).
	Exprs []Span
}

// SyntaxError is the first problem the tokenizer met; tokenizing goes on after it.
type SyntaxError struct {
	Line, Col int
	Msg       string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("line %d col %d: %s", e.Line, e.Col, e.Msg) }

// pyTabSize is the tab stop Python uses to measure indentation.
const pyTabSize = 8

type pyScanner struct {
	src       []byte
	pos, end  int
	line      int
	lineStart int
	depth     int
	indents   []int
	toks      []PyToken
	err       *SyntaxError
}

// TokenizePython splits Python source into tokens the way Python's tokenize module does
// (NEWLINE/NL, INDENT/DEDENT, COMMENT, one STRING token per literal). It never fails:
// on malformed input it goes on and returns the first problem as a *SyntaxError.
func TokenizePython(src []byte) ([]PyToken, error) {
	s := &pyScanner{src: src, end: len(src), line: 1, indents: []int{0}}
	if strings.HasPrefix(string(src[:min(3, len(src))]), "\xef\xbb\xbf") {
		s.pos, s.lineStart = 3, 3
	}
	s.module()
	if s.err != nil {
		return s.toks, s.err
	}
	return s.toks, nil
}

// tokenizeFragment tokenizes the source range e as an expression inside brackets (the
// code of an f-string replacement field): no indentation, line breaks are NL.
func tokenizeFragment(src []byte, e Span) []PyToken {
	s := &pyScanner{src: src, pos: e.Start, end: e.End, line: e.Line, lineStart: e.Start - e.Col, depth: 1, indents: []int{0}}
	for s.skipSpace(); s.pos < s.end; s.skipSpace() {
		s.token()
	}
	return s.toks
}

func (s *pyScanner) fail(off int, format string, args ...any) {
	if s.err == nil {
		s.err = &SyntaxError{Line: s.line, Col: off - s.lineStart, Msg: fmt.Sprintf(format, args...)}
	}
}

func (s *pyScanner) emit(t PyTokType, start, end int) {
	s.toks = append(s.toks, PyToken{Type: t, Text: string(s.src[start:end]), Line: s.line, Col: start - s.lineStart, Off: start})
}

// newlineLenTo is the length of the line break at i before end: 2 for \r\n, 1 for \n or
// \r, else 0.
func newlineLenTo(src []byte, i, end int) int {
	if i >= end {
		return 0
	}
	switch src[i] {
	case '\n':
		return 1
	case '\r':
		if i+1 < end && src[i+1] == '\n' {
			return 2
		}
		return 1
	}
	return 0
}

func (s *pyScanner) nl(i int) int { return newlineLenTo(s.src, i, s.end) }

// breakLine moves past a line break of length n at s.pos.
func (s *pyScanner) breakLine(n int) {
	s.pos += n
	s.line++
	s.lineStart = s.pos
}

func (s *pyScanner) module() {
	atLineStart := true
	for {
		if atLineStart && s.depth == 0 {
			if !s.indentation() {
				break
			}
			atLineStart = false
		}
		s.skipSpace()
		if s.pos >= s.end {
			break
		}
		if n := s.nl(s.pos); n > 0 {
			t := PyNewline
			if s.depth > 0 {
				t = PyNL
			}
			s.emit(t, s.pos, s.pos+n)
			s.breakLine(n)
			// Inside brackets the next line continues this one: no indentation.
			atLineStart = t == PyNewline
			continue
		}
		s.token()
	}
	// Python ends the last logical line even without a final line break.
	if len(s.toks) > 0 {
		switch s.toks[len(s.toks)-1].Type {
		case PyNewline, PyNL, PyDedent, PyIndent:
		default:
			s.toks = append(s.toks, PyToken{Type: PyNewline, Line: s.line, Col: s.pos - s.lineStart, Off: s.pos})
		}
	}
	// Python's tokenize numbers the end one past the last line.
	// A last line of blanks without a line break does not count.
	eofLine := s.line
	if strings.Trim(string(s.src[s.lineStart:s.end]), " \t\f") != "" {
		eofLine++
	}
	for len(s.indents) > 1 {
		s.indents = s.indents[:len(s.indents)-1]
		s.toks = append(s.toks, PyToken{Type: PyDedent, Line: eofLine, Off: s.end})
	}
	s.toks = append(s.toks, PyToken{Type: PyEndMarker, Line: eofLine, Off: s.end})
}

// indentation handles the start of a physical line outside brackets: blank and
// comment-only lines give COMMENT/NL and leave indentation alone; other lines give
// INDENT or DEDENTs. It returns false at end of input.
func (s *pyScanner) indentation() bool {
	for {
		col, p := 0, s.pos
	measure:
		for ; p < s.end; p++ {
			switch s.src[p] {
			case ' ':
				col++
			case '\t':
				col = (col/pyTabSize + 1) * pyTabSize
			case '\f':
				col = 0
			default:
				break measure
			}
		}
		if p >= s.end {
			s.pos = p
			return false
		}
		if s.src[p] == '#' || s.nl(p) > 0 {
			s.pos = p
			if s.src[p] == '#' {
				s.comment()
			}
			if n := s.nl(s.pos); n > 0 {
				s.emit(PyNL, s.pos, s.pos+n)
				s.breakLine(n)
				continue
			}
			s.emit(PyNL, s.pos, s.pos)
			return false
		}
		top := s.indents[len(s.indents)-1]
		switch {
		case col > top:
			s.indents = append(s.indents, col)
			s.emit(PyIndent, s.lineStart, p)
		case col < top:
			for col < s.indents[len(s.indents)-1] {
				s.indents = s.indents[:len(s.indents)-1]
				s.toks = append(s.toks, PyToken{Type: PyDedent, Line: s.line, Col: p - s.lineStart, Off: s.lineStart})
			}
			if col != s.indents[len(s.indents)-1] {
				s.fail(p, "unindent does not match any outer indentation level")
				s.indents = append(s.indents, col)
				s.emit(PyIndent, s.lineStart, p)
			}
		}
		s.pos = p
		return true
	}
}

func (s *pyScanner) skipSpace() {
	for s.pos < s.end {
		switch s.src[s.pos] {
		case ' ', '\t', '\f':
			s.pos++
		case '\\':
			// A backslash before a line break joins the lines.
			n := s.nl(s.pos + 1)
			if n == 0 {
				return
			}
			s.breakLine(n + 1)
		default:
			return
		}
	}
}

func (s *pyScanner) comment() {
	start := s.pos
	for s.pos < s.end && s.nl(s.pos) == 0 {
		s.pos++
	}
	s.emit(PyComment, start, s.pos)
}

// pyOps lists operators longest first so the first match is the longest.
var pyOps = []string{
	"**=", "//=", ">>=", "<<=", "...",
	"->", ":=", "!=", "==", "<=", ">=", "**", "//", "<<", ">>", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "@=", "<>",
}

// token scans one token at s.pos (not whitespace, not a line break outside brackets).
func (s *pyScanner) token() {
	c := s.src[s.pos]
	start := s.pos
	switch {
	case c == '#':
		s.comment()
		return
	case s.depth > 0 && s.nl(s.pos) > 0:
		n := s.nl(s.pos)
		s.emit(PyNL, s.pos, s.pos+n)
		s.breakLine(n)
		return
	case c == '"' || c == '\'':
		s.str(start, start)
		return
	case c >= '0' && c <= '9' || c == '.' && s.pos+1 < s.end && isDigit(s.src[s.pos+1]):
		s.number()
		return
	case isIdentStart(s.src, s.pos):
		for s.pos < s.end && isIdentCont(s.src, s.pos) {
			_, n := utf8.DecodeRune(s.src[s.pos:s.end])
			s.pos += n
		}
		if s.pos < s.end && (s.src[s.pos] == '"' || s.src[s.pos] == '\'') && isStringPrefix(string(s.src[start:s.pos])) {
			s.str(start, s.pos)
			return
		}
		s.emit(PyName, start, s.pos)
		return
	}
	for _, op := range pyOps {
		if strings.HasPrefix(string(s.src[s.pos:min(s.pos+len(op), s.end)]), op) {
			s.pos += len(op)
			s.emit(PyOp, start, s.pos)
			return
		}
	}
	if strings.IndexByte("()[]{}:,;+-*/|&<>=.%~^@!", c) >= 0 {
		s.pos++
		switch c {
		case '(', '[', '{':
			s.depth++
		case ')', ']', '}':
			if s.depth > 0 {
				s.depth--
			}
		}
		s.emit(PyOp, start, s.pos)
		return
	}
	_, n := utf8.DecodeRune(s.src[s.pos:s.end])
	s.pos += n
	s.fail(start, "unexpected character %q", s.src[start:s.pos])
	s.emit(PyErrorToken, start, s.pos)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdentStart(src []byte, i int) bool {
	c := src[i]
	if c < utf8.RuneSelf {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	}
	r, _ := utf8.DecodeRune(src[i:])
	return r != utf8.RuneError && (unicode.IsLetter(r) || unicode.Is(unicode.Nl, r))
}

func isIdentCont(src []byte, i int) bool {
	c := src[i]
	if c < utf8.RuneSelf {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c)
	}
	r, _ := utf8.DecodeRune(src[i:])
	return r != utf8.RuneError && (unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r))
}

// isStringPrefix reports whether p (any case) is a string prefix: r u b f t and the
// two-letter raw combinations.
func isStringPrefix(p string) bool {
	switch strings.ToLower(p) {
	case "r", "u", "b", "f", "t", "br", "rb", "fr", "rf", "tr", "rt":
		return true
	}
	return false
}

func (s *pyScanner) number() {
	start := s.pos
	if s.src[s.pos] == '0' && s.pos+1 < s.end && strings.IndexByte("xXoObB", s.src[s.pos+1]) >= 0 {
		s.pos += 2
		for s.pos < s.end && (isHex(s.src[s.pos]) || s.src[s.pos] == '_') {
			s.pos++
		}
		s.emit(PyNumber, start, s.pos)
		return
	}
	digits := func() {
		for s.pos < s.end && (isDigit(s.src[s.pos]) || s.src[s.pos] == '_') {
			s.pos++
		}
	}
	digits()
	if s.pos < s.end && s.src[s.pos] == '.' {
		s.pos++
		digits()
	}
	if s.pos < s.end && (s.src[s.pos] == 'e' || s.src[s.pos] == 'E') {
		p := s.pos + 1
		if p < s.end && (s.src[p] == '+' || s.src[p] == '-') {
			p++
		}
		if p < s.end && isDigit(s.src[p]) {
			s.pos = p
			digits()
		}
	}
	if s.pos < s.end && (s.src[s.pos] == 'j' || s.src[s.pos] == 'J') {
		s.pos++
	}
	s.emit(PyNumber, start, s.pos)
}

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

// str scans a string literal whose prefix starts at start and whose quote is at q.
func (s *pyScanner) str(start, q int) {
	prefix := strings.ToLower(string(s.src[start:q]))
	raw := strings.Contains(prefix, "r")
	format := strings.ContainsAny(prefix, "ft")
	line, lineStart := s.line, s.lineStart
	s.pos = q
	var exprs []Span
	ok := s.strBody(raw, format, &exprs)
	text := string(s.src[start:s.pos])
	s.toks = append(s.toks, PyToken{Type: PyString, Text: text, Line: line, Col: start - lineStart, Off: start, Exprs: exprs})
	if !ok {
		s.toks[len(s.toks)-1].Type = PyErrorToken
		if s.err == nil {
			s.err = &SyntaxError{Line: line, Col: start - lineStart, Msg: "unterminated string literal"}
		}
	}
}

// strBody scans from the opening quote at s.pos to just past the closing quote. It
// reports false for an unterminated literal, leaving s.pos at the end of the line (single
// quotes) or of the input (triple quotes).
func (s *pyScanner) strBody(raw, format bool, exprs *[]Span) bool {
	quote := s.src[s.pos]
	triple := s.pos+2 < s.end && s.src[s.pos+1] == quote && s.src[s.pos+2] == quote
	if triple {
		s.pos += 3
	} else {
		s.pos++
	}
	closes := func() bool {
		if s.src[s.pos] != quote {
			return false
		}
		return !triple || s.pos+2 < s.end && s.src[s.pos+1] == quote && s.src[s.pos+2] == quote
	}
	for s.pos < s.end {
		c := s.src[s.pos]
		switch {
		case closes():
			if triple {
				s.pos += 3
			} else {
				s.pos++
			}
			return true
		case c == '\\':
			// Even in a raw string a backslash keeps the next quote or line break in the literal.
			if n := s.nl(s.pos + 1); n > 0 {
				s.breakLine(n + 1)
				continue
			}
			s.pos += min(2, s.end-s.pos)
		case s.nl(s.pos) > 0:
			if !triple {
				return false
			}
			s.breakLine(s.nl(s.pos))
		case format && c == '{':
			if s.pos+1 < s.end && s.src[s.pos+1] == '{' {
				s.pos += 2
				continue
			}
			s.pos++
			if !s.field(quote, triple, raw, exprs) {
				return false
			}
		default:
			s.pos++
		}
	}
	return false
}

// field scans an f-string replacement field after its '{', up to and past the matching
// '}': the expression (nested strings and brackets allowed, as in Python 3.12), then an
// optional format spec that may hold nested fields.
func (s *pyScanner) field(quote byte, triple, raw bool, exprs *[]Span) bool {
	start, line, col := s.pos, s.line, s.pos-s.lineStart
	depth := 0
	endExpr := func() { *exprs = append(*exprs, Span{Start: start, End: s.pos, Line: line, Col: col}) }
	for s.pos < s.end {
		c := s.src[s.pos]
		if n := s.nl(s.pos); n > 0 {
			s.breakLine(n)
			continue
		}
		switch {
		case c == '"' || c == '\'':
			if c == quote && !triple && !s.nestedQuoteOK(quote) {
				return false
			}
			var nested []Span
			if !s.strBody(false, false, &nested) {
				return false
			}
		case isIdentStart(s.src, s.pos):
			p := s.pos
			for s.pos < s.end && isIdentCont(s.src, s.pos) {
				_, n := utf8.DecodeRune(s.src[s.pos:s.end])
				s.pos += n
			}
			if s.pos < s.end && (s.src[s.pos] == '"' || s.src[s.pos] == '\'') && isStringPrefix(string(s.src[p:s.pos])) {
				pre := strings.ToLower(string(s.src[p:s.pos]))
				var nested []Span
				if !s.strBody(strings.Contains(pre, "r"), strings.ContainsAny(pre, "ft"), &nested) {
					return false
				}
			}
		case c == '(' || c == '[' || c == '{':
			depth++
			s.pos++
		case (c == ')' || c == ']') && depth > 0:
			depth--
			s.pos++
		case c == '}':
			if depth > 0 {
				depth--
				s.pos++
				continue
			}
			endExpr()
			s.pos++
			return true
		case c == ':' && depth == 0:
			endExpr()
			s.pos++
			return s.formatSpec(quote, triple, raw, exprs)
		case c == '#':
			// A comment ends at the line break (Python 3.12 multi-line fields).
			for s.pos < s.end && s.nl(s.pos) == 0 {
				s.pos++
			}
		default:
			s.pos++
		}
	}
	return false
}

// nestedQuoteOK reports whether the quote at s.pos opens a nested string rather than
// closing the enclosing single-quoted f-string: it does when that string closes on the
// same line (Python 3.12 rule), which keeps Python 3.11 sources, where it would close
// the f-string, readable: there the nested form is a syntax error anyway.
func (s *pyScanner) nestedQuoteOK(quote byte) bool {
	for p := s.pos + 1; p < s.end && s.nl(p) == 0; p++ {
		if s.src[p] == '\\' {
			p++
			continue
		}
		if s.src[p] == quote {
			return true
		}
	}
	return false
}

func (s *pyScanner) formatSpec(quote byte, triple, raw bool, exprs *[]Span) bool {
	for s.pos < s.end {
		c := s.src[s.pos]
		switch {
		case c == '}':
			s.pos++
			return true
		case c == '{':
			s.pos++
			if !s.field(quote, triple, raw, exprs) {
				return false
			}
		case c == quote && (!triple || s.pos+2 < s.end && s.src[s.pos+1] == quote && s.src[s.pos+2] == quote):
			return false
		case s.nl(s.pos) > 0:
			if !triple {
				return false
			}
			s.breakLine(s.nl(s.pos))
		default:
			s.pos++
		}
	}
	return false
}
