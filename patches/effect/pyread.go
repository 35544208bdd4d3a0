package effect

import (
	"slices"
	"strconv"
	"strings"
)

// PyModule is the structure read from one Python file: its classes and functions with
// their bodies as ranges of code tokens (comments and NL tokens dropped).
type PyModule struct {
	Src     []byte
	Toks    []PyToken // code tokens only
	Classes []*PyClass
	Funcs   []*PyFunc
	// Err is the tokenizer's first problem, if any; the structure is read anyway.
	Err error
}

// PyClass is a class statement, at any depth.
type PyClass struct {
	Name string
	// Qual is the dotted path of enclosing classes and functions, e.g. "Outer.Inner".
	Qual    string
	Line    int
	Methods []*PyFunc // defs in the class body, also under if/try/with, not in nested defs
	Classes []*PyClass
	// BodyStart, BodyEnd: the body as code-token indexes [BodyStart, BodyEnd).
	BodyStart, BodyEnd int
}

// PyFunc is a def or async def statement.
type PyFunc struct {
	Name  string
	Qual  string
	Async bool
	// Line is the line of the def keyword (not of a decorator), as in Python's ast.
	Line               int
	BodyStart, BodyEnd int
	Funcs              []*PyFunc // defs nested in the body (through compound statements)
	Classes            []*PyClass
}

// pyKeywords are Python's hard keywords: a keyword before '(' is not a call.
var pyKeywords = map[string]bool{
	"False": true, "None": true, "True": true, "and": true, "as": true, "assert": true, "async": true,
	"await": true, "break": true, "class": true, "continue": true, "def": true, "del": true, "elif": true,
	"else": true, "except": true, "finally": true, "for": true, "from": true, "global": true, "if": true,
	"import": true, "in": true, "is": true, "lambda": true, "nonlocal": true, "not": true, "or": true,
	"pass": true, "raise": true, "return": true, "try": true, "while": true, "with": true, "yield": true,
}

// ParsePython tokenizes src and reads its classes and functions.
func ParsePython(src []byte) *PyModule {
	all, err := TokenizePython(src)
	m := &PyModule{Src: src, Err: err}
	for _, t := range all {
		if t.Type != PyComment && t.Type != PyNL {
			m.Toks = append(m.Toks, t)
		}
	}
	p := &pyParser{t: m.Toks, match: matchIndents(m.Toks)}
	m.Classes, m.Funcs = p.block(0, len(m.Toks), "")
	return m
}

// matchIndents maps each INDENT index to the index of its DEDENT (len(t) when unmatched).
func matchIndents(t []PyToken) []int {
	match := make([]int, len(t))
	var stack []int
	for i, tok := range t {
		match[i] = -1
		switch tok.Type {
		case PyIndent:
			stack = append(stack, i)
		case PyDedent:
			if len(stack) > 0 {
				match[stack[len(stack)-1]] = i
				stack = stack[:len(stack)-1]
			}
		}
	}
	for _, i := range stack {
		match[i] = len(t)
	}
	return match
}

type pyParser struct {
	t     []PyToken
	match []int
}

func (p *pyParser) isOp(i int, op string) bool {
	return i >= 0 && i < len(p.t) && p.t[i].Type == PyOp && p.t[i].Text == op
}

func (p *pyParser) isName(i int, name string) bool {
	return i >= 0 && i < len(p.t) && p.t[i].Type == PyName && p.t[i].Text == name
}

// lineEnd is the index of the NEWLINE ending the logical line that starts at i, or end.
func (p *pyParser) lineEnd(i, end int) int {
	for ; i < end; i++ {
		if p.t[i].Type == PyNewline {
			return i
		}
	}
	return end
}

// headerColon is the index of the first ':' at bracket depth 0 in [i, end), or -1.
func (p *pyParser) headerColon(i, end int) int {
	depth := 0
	for ; i < end; i++ {
		if p.t[i].Type != PyOp {
			continue
		}
		switch p.t[i].Text {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth--
		case ":":
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// dedent is the matching DEDENT of the INDENT at i, clamped to end.
func (p *pyParser) dedent(i, end int) int { return min(p.match[i], end) }

// block reads the statements in code tokens [i, end) for defs and classes; compound
// statements other than def and class are looked through, so a def under if or try in a
// class body is still a method.
func (p *pyParser) block(i, end int, qual string) (classes []*PyClass, funcs []*PyFunc) {
	for i < end {
		switch p.t[i].Type {
		case PyNewline, PyDedent, PyEndMarker:
			i++
			continue
		case PyIndent:
			// An indented block with no header: read it in the same scope.
			d := p.dedent(i, end)
			c, f := p.block(i+1, d, qual)
			classes, funcs = append(classes, c...), append(funcs, f...)
			i = d + 1
			continue
		}
		j := i
		for j < end && p.isOp(j, "@") {
			j = p.lineEnd(j, end) + 1
		}
		if j >= end {
			break
		}
		le := p.lineEnd(j, end)
		name, async, kind := -1, false, ""
		switch {
		case p.isName(j, "class") && j+1 < end && p.t[j+1].Type == PyName:
			name, kind = j+1, "class"
		case p.isName(j, "def") && j+1 < end && p.t[j+1].Type == PyName:
			name, kind = j+1, "def"
		case p.isName(j, "async") && p.isName(j+1, "def") && j+2 < end && p.t[j+2].Type == PyName:
			name, kind, async = j+2, "def", true
		}
		colon := -1
		if kind != "" {
			colon = p.headerColon(name+1, le)
		}
		if colon < 0 {
			i = le + 1
			if i < end && p.t[i].Type == PyIndent {
				d := p.dedent(i, end)
				c, f := p.block(i+1, d, qual)
				classes, funcs = append(classes, c...), append(funcs, f...)
				i = d + 1
			}
			continue
		}
		bs, be, next := colon+1, le, le+1
		if colon+1 == le && le+1 < end && p.t[le+1].Type == PyIndent {
			d := p.dedent(le+1, end)
			bs, be, next = le+2, d, d+1
		}
		n := p.t[name].Text
		q := n
		if qual != "" {
			q = qual + "." + n
		}
		c, f := p.block(bs, be, q)
		if kind == "class" {
			classes = append(classes, &PyClass{Name: n, Qual: q, Line: p.t[j].Line, Methods: f, Classes: c, BodyStart: bs, BodyEnd: be})
		} else {
			funcs = append(funcs, &PyFunc{Name: n, Qual: q, Async: async, Line: p.t[name-1].Line, BodyStart: bs, BodyEnd: be, Funcs: f, Classes: c})
		}
		i = next
	}
	return classes, funcs
}

// AllClasses lists every class in the module, outer before inner.
func (m *PyModule) AllClasses() []*PyClass {
	var out []*PyClass
	var walkC func(cs []*PyClass)
	var walkF func(fs []*PyFunc)
	walkC = func(cs []*PyClass) {
		for _, c := range cs {
			out = append(out, c)
			walkC(c.Classes)
			walkF(c.Methods)
		}
	}
	walkF = func(fs []*PyFunc) {
		for _, f := range fs {
			walkC(f.Classes)
			walkF(f.Funcs)
		}
	}
	walkC(m.Classes)
	walkF(m.Funcs)
	return out
}

// FindClass returns the classes whose Qual is name; failing that, those whose simple
// name is name (so "Inner" finds "Outer.Inner").
func (m *PyModule) FindClass(name string) []*PyClass {
	all := m.AllClasses()
	var exact, simple []*PyClass
	for _, c := range all {
		if c.Qual == name {
			exact = append(exact, c)
		}
		if c.Name == name {
			simple = append(simple, c)
		}
	}
	if len(exact) > 0 {
		return exact
	}
	return simple
}

// Method returns the class's defs named name (a property setter repeats the name).
func (c *PyClass) Method(name string) []*PyFunc {
	var out []*PyFunc
	for _, f := range c.Methods {
		if f.Name == name {
			out = append(out, f)
		}
	}
	return out
}

// codeSegments is the function body minus the bodies of defs nested in it (at any depth,
// also methods of classes nested in it): code in those runs only when they are called.
// Headers of nested defs (decorators, defaults) and nested class bodies stay: they run
// when the function runs.
func (f *PyFunc) codeSegments() [][2]int {
	var skip [][2]int
	var walkC func(cs []*PyClass)
	walkC = func(cs []*PyClass) {
		for _, c := range cs {
			for _, mf := range c.Methods {
				skip = append(skip, [2]int{mf.BodyStart, mf.BodyEnd})
			}
			walkC(c.Classes)
		}
	}
	for _, g := range f.Funcs {
		skip = append(skip, [2]int{g.BodyStart, g.BodyEnd})
	}
	walkC(f.Classes)
	slices.SortFunc(skip, func(a, b [2]int) int { return a[0] - b[0] })
	var segs [][2]int
	at := f.BodyStart
	for _, s := range skip {
		if s[0] > at {
			segs = append(segs, [2]int{at, s[0]})
		}
		at = max(at, s[1])
	}
	if at < f.BodyEnd {
		segs = append(segs, [2]int{at, f.BodyEnd})
	}
	return segs
}

// expand returns toks followed by the token sequences of the f-string fields inside
// them (recursively): each sequence is matched on its own.
func (m *PyModule) expand(toks []PyToken) [][]PyToken {
	out := [][]PyToken{toks}
	for _, t := range toks {
		for _, e := range t.Exprs {
			out = append(out, m.expand(tokenizeFragment(m.Src, e))...)
		}
	}
	return out
}

// pyRef is a name used in code: recv.Name(...) or Name(...) or recv.Name.
type pyRef struct {
	Recv   string // receiver token ("self", a class name, "super()"); "" for a bare name
	Attr   bool   // recv.Name
	Called bool   // followed by '('
	Name   string
	Line   int
}

func isOpTok(t PyToken, op string) bool { return t.Type == PyOp && t.Text == op }

// refs finds attribute uses and bare-name calls in one token sequence.
func refs(seq []PyToken) []pyRef {
	var out []pyRef
	for k, t := range seq {
		if t.Type != PyName || pyKeywords[t.Text] {
			continue
		}
		called := k+1 < len(seq) && isOpTok(seq[k+1], "(")
		if k >= 1 && isOpTok(seq[k-1], ".") {
			out = append(out, pyRef{Recv: receiver(seq, k-2), Attr: true, Called: called, Name: t.Text, Line: t.Line})
			continue
		}
		if called && !(k >= 1 && seq[k-1].Type == PyName && (seq[k-1].Text == "def" || seq[k-1].Text == "class")) {
			out = append(out, pyRef{Called: true, Name: t.Text, Line: t.Line})
		}
	}
	return out
}

// receiver names what is before the '.' ending at index r: a name, "super()" for
// super(...), or the name inside plain parentheses; "" for anything else.
func receiver(seq []PyToken, r int) string {
	if r < 0 {
		return ""
	}
	if seq[r].Type == PyName {
		return seq[r].Text
	}
	if !isOpTok(seq[r], ")") {
		return ""
	}
	// Only super(...) and (name) matter, both short: a bounded scan keeps long
	// bracket runs from costing quadratic time.
	const maxScan = 64
	depth := 0
	o := -1
	for i := r; i >= 0 && i > r-maxScan; i-- {
		if seq[i].Type != PyOp {
			continue
		}
		switch seq[i].Text {
		case ")", "]", "}":
			depth++
		case "(", "[", "{":
			depth--
		}
		if depth == 0 {
			o = i
			break
		}
	}
	if o < 0 || !isOpTok(seq[o], "(") {
		return ""
	}
	if o >= 1 && seq[o-1].Type == PyName && seq[o-1].Text == "super" && !(o >= 2 && isOpTok(seq[o-2], ".")) {
		return "super()"
	}
	calledBefore := o >= 1 && (seq[o-1].Type == PyName && !pyKeywords[seq[o-1].Text] || seq[o-1].Type == PyString ||
		isOpTok(seq[o-1], ")") || isOpTok(seq[o-1], "]"))
	if r == o+2 && seq[o+1].Type == PyName && !calledBefore {
		return seq[o+1].Text
	}
	return ""
}

// funcRefs is every ref in the code segments of f, f-string fields included.
func (m *PyModule) funcRefs(f *PyFunc) []pyRef {
	var out []pyRef
	for _, s := range f.codeSegments() {
		for _, seq := range m.expand(m.Toks[s[0]:s[1]]) {
			out = append(out, refs(seq)...)
		}
	}
	return out
}

// PyCall is a call of a method on self, on the class or on super().
type PyCall struct {
	Recv   string // "self", the class name or "super()"
	Callee string
	Line   int
	// Via names the nested defs the call sits in, outermost first; empty when it is in
	// the method's own code.
	Via []string
}

// SelfCalls returns the calls self.X(...), Class.X(...) and super().X(...) that run when
// f runs: those in its own code and those in nested defs that f calls by name. Calls in
// nested defs that are never called come back separately in unreached.
func (m *PyModule) SelfCalls(f *PyFunc, class string) (reached, unreached []PyCall) {
	if i := strings.LastIndexByte(class, '.'); i >= 0 {
		class = class[i+1:]
	}
	visited := map[*PyFunc]bool{}
	var visit func(g *PyFunc, scopes [][]*PyFunc, via []string)
	visit = func(g *PyFunc, scopes [][]*PyFunc, via []string) {
		if visited[g] {
			return
		}
		visited[g] = true
		scopes = append(slices.Clip(scopes), g.Funcs)
		for _, r := range m.funcRefs(g) {
			switch {
			case r.Attr && r.Called && (r.Recv == "self" || r.Recv == class || r.Recv == "super()"):
				reached = append(reached, PyCall{Recv: r.Recv, Callee: r.Name, Line: r.Line, Via: via})
			case !r.Attr && r.Called:
				for s := len(scopes) - 1; s >= 0; s-- {
					var hit []*PyFunc
					for _, h := range scopes[s] {
						if h.Name == r.Name {
							hit = append(hit, h)
						}
					}
					if len(hit) > 0 {
						for _, h := range hit {
							visit(h, scopes[:s+1], append(slices.Clip(via), h.Name))
						}
						break
					}
				}
			}
		}
	}
	visit(f, nil, nil)
	var walk func(g *PyFunc, via []string)
	walk = func(g *PyFunc, via []string) {
		for _, h := range g.Funcs {
			v := append(slices.Clip(via), h.Name)
			if !visited[h] {
				for _, r := range m.funcRefs(h) {
					if r.Attr && r.Called && (r.Recv == "self" || r.Recv == class || r.Recv == "super()") {
						unreached = append(unreached, PyCall{Recv: r.Recv, Callee: r.Name, Line: r.Line, Via: v})
					}
				}
			}
			walk(h, v)
		}
	}
	walk(f, nil)
	return reached, unreached
}

// PyEnvRead is a read of an environment variable.
type PyEnvRead struct {
	Name string
	Line int
}

// EnvReads finds os.environ[K], os.environ.get(K, os.getenv(K, K in os.environ and
// K not in os.environ (also through "import os as x" and "from os import environ,
// getenv"), where K is a string literal, anywhere in code and f-string fields. A plain
// assignment os.environ[K] = v and del os.environ[K] are writes, not reads.
func (m *PyModule) EnvReads() []PyEnvRead {
	osNames := map[string]bool{"os": true}
	envNames := map[string]bool{}
	getenvNames := map[string]bool{}
	m.imports(osNames, envNames, getenvNames)
	var out []PyEnvRead
	for _, seq := range m.expand(m.Toks) {
		out = append(out, envReads(seq, osNames, envNames, getenvNames)...)
	}
	return out
}

// imports records the names "import os [as x]" and "from os import environ/getenv [as y]"
// bind.
func (m *PyModule) imports(osNames, envNames, getenvNames map[string]bool) {
	t := m.Toks
	atStart := true
	for i := 0; i < len(t); i++ {
		start := atStart
		atStart = t[i].Type == PyNewline || t[i].Type == PyIndent || t[i].Type == PyDedent || isOpTok(t[i], ";")
		if !start || t[i].Type != PyName {
			continue
		}
		switch t[i].Text {
		case "import":
			for j := i + 1; j < len(t) && t[j].Type != PyNewline && !isOpTok(t[j], ";"); j++ {
				if t[j].Type == PyName && t[j].Text == "os" && (j+1 >= len(t) || !isOpTok(t[j+1], ".")) && !isOpTok(t[j-1], ".") {
					if j+2 < len(t) && t[j+1].Type == PyName && t[j+1].Text == "as" && t[j+2].Type == PyName {
						osNames[t[j+2].Text] = true
					}
				}
			}
		case "from":
			if i+2 < len(t) && t[i+1].Type == PyName && t[i+1].Text == "os" && t[i+2].Type == PyName && t[i+2].Text == "import" {
				for j := i + 3; j < len(t) && t[j].Type != PyNewline && !isOpTok(t[j], ";"); j++ {
					if t[j].Type != PyName || (t[j].Text != "environ" && t[j].Text != "getenv") || isOpTok(t[j-1], ".") || t[j-1].Text == "as" {
						continue
					}
					bound := t[j].Text
					if j+2 < len(t) && t[j+1].Type == PyName && t[j+1].Text == "as" && t[j+2].Type == PyName {
						bound = t[j+2].Text
					}
					if t[j].Text == "environ" {
						envNames[bound] = true
					} else {
						getenvNames[bound] = true
					}
				}
			}
		}
	}
}

func envReads(seq []PyToken, osNames, envNames, getenvNames map[string]bool) []PyEnvRead {
	var out []PyEnvRead
	// environAt reports whether an os.environ expression (or a bare from-imported
	// environ) starts at i, and returns the index after it.
	environAt := func(i int) (int, bool) {
		if i >= len(seq) || seq[i].Type != PyName || i >= 1 && isOpTok(seq[i-1], ".") {
			return 0, false
		}
		if osNames[seq[i].Text] && i+2 < len(seq) && isOpTok(seq[i+1], ".") && seq[i+2].Type == PyName && seq[i+2].Text == "environ" {
			return i + 3, true
		}
		if envNames[seq[i].Text] {
			return i + 1, true
		}
		return 0, false
	}
	for i := 0; i < len(seq); i++ {
		if k, ok := environAt(i); ok {
			switch {
			case k < len(seq) && isOpTok(seq[k], "["):
				v, line, e, ok := pyStrings(seq, k+1)
				write := e < len(seq) && isOpTok(seq[e], "]") && e+1 < len(seq) && isOpTok(seq[e+1], "=")
				deleted := i >= 1 && seq[i-1].Type == PyName && seq[i-1].Text == "del"
				if ok && e < len(seq) && isOpTok(seq[e], "]") && !write && !deleted {
					out = append(out, PyEnvRead{v, line})
				}
			case k+2 < len(seq) && isOpTok(seq[k], ".") && seq[k+1].Type == PyName && seq[k+1].Text == "get" && isOpTok(seq[k+2], "("):
				if v, line, e, ok := pyStrings(seq, k+3); ok && e < len(seq) && (isOpTok(seq[e], ",") || isOpTok(seq[e], ")")) {
					out = append(out, PyEnvRead{v, line})
				}
			}
			continue
		}
		// os.getenv( or a from-imported getenv(
		if seq[i].Type == PyName && !(i >= 1 && isOpTok(seq[i-1], ".")) {
			a := -1
			if osNames[seq[i].Text] && i+3 < len(seq) && isOpTok(seq[i+1], ".") && seq[i+2].Type == PyName && seq[i+2].Text == "getenv" && isOpTok(seq[i+3], "(") {
				a = i + 4
			} else if getenvNames[seq[i].Text] && i+1 < len(seq) && isOpTok(seq[i+1], "(") {
				a = i + 2
			}
			if a >= 0 {
				if v, line, e, ok := pyStrings(seq, a); ok && e < len(seq) && (isOpTok(seq[e], ",") || isOpTok(seq[e], ")")) {
					out = append(out, PyEnvRead{v, line})
				}
			}
		}
		// 'X' in os.environ, 'X' not in os.environ: the literal must stand alone on the left.
		if seq[i].Type == PyString && (i == 0 || seq[i-1].Type != PyString) {
			v, line, e, ok := pyStrings(seq, i)
			if !ok || e >= len(seq) || seq[e].Type != PyName {
				continue
			}
			k := e + 1
			if seq[e].Text == "not" && k < len(seq) && seq[k].Type == PyName && seq[k].Text == "in" {
				k++
			} else if seq[e].Text != "in" {
				continue
			}
			if j, ok := environAt(k); ok && (j >= len(seq) || !isOpTok(seq[j], ".") && !isOpTok(seq[j], "[") && !isOpTok(seq[j], "(")) {
				if i == 0 || !isOpTok(seq[i-1], ".") {
					out = append(out, PyEnvRead{v, line})
				}
			}
		}
	}
	return out
}

// pyStrings reads adjacent plain (not f-, not bytes) string literals from i, joined as
// Python joins them. It returns the value, the first literal's line and the index after.
func pyStrings(seq []PyToken, i int) (string, int, int, bool) {
	if i >= len(seq) || seq[i].Type != PyString {
		return "", 0, i, false
	}
	var b strings.Builder
	line := seq[i].Line
	j := i
	for ; j < len(seq) && seq[j].Type == PyString; j++ {
		v, ok := PyStringValue(seq[j].Text)
		if !ok {
			return "", 0, j, false
		}
		b.WriteString(v)
	}
	return b.String(), line, j, true
}

// PyStringValue decodes a plain string literal; ok is false for f-strings, bytes and
// escapes it does not decode (\N{...}).
func PyStringValue(lit string) (string, bool) {
	q := strings.IndexAny(lit, `'"`)
	if q < 0 {
		return "", false
	}
	prefix := strings.ToLower(lit[:q])
	if strings.ContainsAny(prefix, "fbt") {
		return "", false
	}
	body := lit[q:]
	n := 1
	if len(body) >= 6 && (strings.HasPrefix(body, `"""`) || strings.HasPrefix(body, `'''`)) {
		n = 3
	}
	if len(body) < 2*n {
		return "", false
	}
	body = body[n : len(body)-n]
	if strings.Contains(prefix, "r") {
		return body, true
	}
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' || i+1 >= len(body) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := body[i]; e {
		case '\n':
		case '\r':
			if i+1 < len(body) && body[i+1] == '\n' {
				i++
			}
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			width := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+width > len(body) {
				return "", false
			}
			r, err := strconv.ParseUint(body[i+1:i+1+width], 16, 32)
			if err != nil {
				return "", false
			}
			b.WriteRune(rune(r))
			i += width
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(body) && j < i+3 && body[j] >= '0' && body[j] <= '7' {
				j++
			}
			r, _ := strconv.ParseUint(body[i:j], 8, 32)
			b.WriteRune(rune(r))
			i = j - 1
		default:
			if e == 'N' {
				return "", false
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), true
}
