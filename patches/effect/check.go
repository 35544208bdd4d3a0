package effect

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Result statuses.
const (
	StatusPass    = "pass"
	StatusFail    = "fail"
	StatusSkipped = "skipped"
	StatusError   = "error" // the effect could not be checked (bad effect, unreadable file)
)

// Result is the outcome of checking one effect on a tree or an install prefix.
type Result struct {
	Effect Effect `json:"effect"`
	Status string `json:"status"`
	// Found says what was read and where (file:line), for a pass as well as a failure.
	Found  string `json:"found,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// OK reports whether the result raises no problem: pass, or skipped (nothing stated to
// check there, e.g. no Installed path).
func (r Result) OK() bool { return r.Status == StatusPass || r.Status == StatusSkipped }

// Validate reports the first field the effect's kind needs but lacks, or a malformed path.
func (e Effect) Validate() error {
	missing := func(field, what string) error {
		return fmt.Errorf("effect %s: missing %q (%s)", e.Kind, field, what)
	}
	if e.Kind == "" {
		return fmt.Errorf(`effect: missing "kind" (one of %s)`, KindList())
	}
	if e.File == "" && len(e.Files) == 0 {
		return missing("file", "the file to check, relative to the source tree; or \"files\"")
	}
	need := map[Kind][][2]string{
		PythonDef:  {{"class", e.Class}, {"method", e.Method}},
		PythonCall: {{"class", e.Class}, {"method", e.Method}, {"callee", e.Callee}},
		Contains:   {{"text", e.Text}},
		Absent:     {{"text", e.Text}},
		Include:    {{"header", e.Header}},
		EnvRead:    {{"name", e.Name}},
		ELFSymbol:  {{"symbol", e.Symbol}},
	}
	what := map[string]string{
		"class":  "the Python class, dotted for a nested one",
		"method": "the method of the class",
		"callee": "the method that Class.Method must call",
		"text":   "the verbatim text",
		"header": "the included header, e.g. ibgda_device.cuh",
		"name":   "the environment variable",
		"symbol": "the dynamic symbol the ELF file must define",
	}
	fields, ok := need[e.Kind]
	if !ok {
		return errors.New("effect: " + UnknownKind(e.Kind))
	}
	for _, f := range fields {
		if f[1] == "" {
			return missing(f[0], what[f[0]])
		}
	}
	if e.Not && e.Kind != Include {
		return fmt.Errorf("effect %s: \"not\" applies only to include", e.Kind)
	}
	for _, p := range append([]string{e.File, e.Installed}, e.Files...) {
		if p == "" {
			continue
		}
		if !filepath.IsLocal(p) {
			return fmt.Errorf("effect %s: path %q must be relative and stay inside the tree", e.Kind, p)
		}
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("effect %s: path %q: %w", e.Kind, p, err)
		}
	}
	return nil
}

// String describes the effect on one line.
func (e Effect) String() string {
	where := strings.Join(e.patterns(), ", ")
	switch e.Kind {
	case PythonDef:
		return fmt.Sprintf("python-def: %s.%s defined in %s", e.Class, e.Method, where)
	case PythonCall:
		return fmt.Sprintf("python-call: %s.%s calls %s in %s", e.Class, e.Method, e.Callee, where)
	case Contains:
		return fmt.Sprintf("contains: %s in %s", shortQuote(e.Text), where)
	case Absent:
		return fmt.Sprintf("absent: %s in none of %s", shortQuote(e.Text), where)
	case Include:
		if e.Not {
			return fmt.Sprintf("include: none of %s includes %s", where, e.Header)
		}
		return fmt.Sprintf("include: %s includes %s", where, e.Header)
	case EnvRead:
		return fmt.Sprintf("env-read: %s reads %s", where, e.Name)
	case ELFSymbol:
		return fmt.Sprintf("elf-symbol: %s defines %s", where, e.Symbol)
	}
	return fmt.Sprintf("%s: %s", e.Kind, where)
}

func shortQuote(s string) string {
	const limit = 60
	if r := []rune(s); len(r) > limit {
		s = string(r[:limit]) + "…"
	}
	return strconv.Quote(s)
}

// patterns is File then Files.
func (e Effect) patterns() []string {
	var p []string
	if e.File != "" {
		p = append(p, e.File)
	}
	return append(p, e.Files...)
}

// SymbolReader reads the dynamic symbol table of a built file, for elf-symbol effects:
// builder/inspect has epbuild's one ELF reader. defined says whether path defines
// symbol ("name" or "name@VERSION"); referenced whether it lists it at all (an import
// when not defined); desc describes the entry ("defined in .dynsym (section .text, ...)").
type SymbolReader interface {
	DynamicSymbol(path, symbol string) (defined, referenced bool, desc string, err error)
}

// Check checks the effect on the source tree at root; elf reads built files for
// elf-symbol effects (nil: such an effect cannot be checked).
func Check(root string, e Effect, elf SymbolReader) Result {
	if err := e.Validate(); err != nil {
		return Result{Effect: e, Status: StatusError, Detail: err.Error()}
	}
	return check(root, e.patterns(), e, elf)
}

// CheckInstalled checks the effect on the install prefix, at e.Installed. A plain relative
// path such as deep_ep/buffer.py is also looked for in the Python package directories
// under prefix (lib*/python*/site-packages or dist-packages, eggs too); every copy found
// must pass, since a stale second copy is what a process may import.
func CheckInstalled(prefix string, e Effect, elf SymbolReader) Result {
	if err := e.Validate(); err != nil {
		return Result{Effect: e, Status: StatusError, Detail: err.Error()}
	}
	if e.Installed == "" {
		return Result{Effect: e, Status: StatusSkipped, Detail: "no installed path stated: checked on the source tree only"}
	}
	return check(prefix, installedPatterns(e.Installed), e, elf)
}

func installedPatterns(p string) []string {
	if hasMeta(p) {
		return []string{p}
	}
	out := []string{p}
	for _, lib := range []string{"lib", "lib64", "local/lib"} {
		for _, dir := range []string{"site-packages", "dist-packages"} {
			base := lib + "/python*/" + dir + "/"
			out = append(out, base+p, base+"*.egg/"+p)
		}
	}
	return out
}

func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

// outcome is the check of one file.
type outcome struct {
	file   string
	pass   bool
	found  []string // file:line notes
	detail string
	err    error
}

func check(root string, pats []string, e Effect, elf SymbolReader) Result {
	fsys := os.DirFS(root)
	var files []string
	for _, p := range pats {
		m, err := fs.Glob(fsys, path.Clean(p))
		if err != nil {
			return Result{Effect: e, Status: StatusError, Detail: fmt.Sprintf("glob %q under %s: %v", p, root, err)}
		}
		for _, f := range m {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	if len(files) == 0 {
		return Result{Effect: e, Status: StatusFail, Detail: fmt.Sprintf("no file matches %s under %s", strings.Join(pats, ", "), root)}
	}
	var outs []outcome
	for _, f := range files {
		o := outcome{file: f}
		if e.Kind == ELFSymbol {
			o = checkELF(elf, filepath.Join(root, filepath.FromSlash(f)), f, e)
		} else if src, err := fs.ReadFile(fsys, f); err != nil {
			o.err = fmt.Errorf("read %s under %s: %w", f, root, err)
		} else {
			o = checkSource(f, src, e)
		}
		outs = append(outs, o)
	}
	if e.Kind == Absent || e.Kind == Include && e.Not {
		return collectNone(e, outs)
	}
	return collectEvery(e, outs)
}

// collectEvery: every file must pass.
func collectEvery(e Effect, outs []outcome) Result {
	r := Result{Effect: e, Status: StatusPass}
	var found, detail []string
	failed, errored := false, false
	for _, o := range outs {
		found = append(found, o.found...)
		switch {
		case o.err != nil:
			errored = true
			detail = append(detail, o.err.Error())
		case !o.pass:
			failed = true
			if o.detail != "" {
				detail = append(detail, o.file+": "+o.detail)
			}
		}
	}
	if failed {
		r.Status = StatusFail
	} else if errored {
		r.Status = StatusError
	}
	r.Found = strings.Join(found, "; ")
	r.Detail = strings.Join(detail, "; ")
	return r
}

// collectNone: no file may show the thing; an outcome passes where a file shows it,
// and its found lists where.
func collectNone(e Effect, outs []outcome) Result {
	var hits, errs []string
	for _, o := range outs {
		if o.err != nil {
			errs = append(errs, o.err.Error())
		}
		if o.pass { // the file shows the thing
			hits = append(hits, o.found...)
		}
	}
	thing := shortQuote(e.Text)
	if e.Kind == Include {
		thing = "an include of " + e.Header
	}
	switch {
	case len(hits) > 0:
		return Result{Effect: e, Status: StatusFail, Found: strings.Join(hits, "; "),
			Detail: fmt.Sprintf("%s found in %d place(s) of %d file(s) checked", thing, len(hits), len(outs))}
	case len(errs) > 0:
		return Result{Effect: e, Status: StatusError, Detail: strings.Join(errs, "; ")}
	}
	names := make([]string, len(outs))
	for i, o := range outs {
		names[i] = o.file
	}
	if e.Kind == Include {
		return Result{Effect: e, Status: StatusPass, Found: fmt.Sprintf("no #include of %s in %s", e.Header, strings.Join(names, ", "))}
	}
	return Result{Effect: e, Status: StatusPass, Found: fmt.Sprintf("%s not in %s", thing, strings.Join(names, ", "))}
}

func checkSource(file string, src []byte, e Effect) outcome {
	switch e.Kind {
	case Contains, Absent:
		lines := occurrences(src, e.Text)
		o := outcome{file: file, pass: len(lines) > 0}
		for _, l := range lines {
			o.found = append(o.found, fmt.Sprintf("%s:%d", file, l))
		}
		if e.Kind == Contains && len(lines) > 0 {
			o.found = []string{fmt.Sprintf("%s:%d: text found (%d time(s))", file, lines[0], len(lines))}
		}
		if !o.pass {
			o.detail = "text " + shortQuote(e.Text) + " not found"
		}
		return o
	case Include:
		return checkInclude(file, src, e)
	case EnvRead:
		if isPython(file) {
			return checkPyEnv(file, src, e)
		}
		if isC(file) {
			return checkCEnv(file, src, e)
		}
		return outcome{file: file, err: fmt.Errorf("env-read on %s: only Python (.py) and C/C++/CUDA (.c .cc .cpp .cu .cuh .h .hpp) files are read", file)}
	case PythonDef:
		return checkPyDef(file, src, e)
	case PythonCall:
		return checkPyCall(file, src, e)
	}
	return outcome{file: file, err: fmt.Errorf("check %s on %s: unknown kind", e.Kind, file)}
}

func isPython(file string) bool { return strings.HasSuffix(file, ".py") }

func isC(file string) bool {
	switch path.Ext(file) {
	case ".c", ".cc", ".cpp", ".cxx", ".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx":
		return true
	}
	return false
}

// occurrences lists the lines where text starts, every non-overlapping occurrence.
func occurrences(src []byte, text string) []int {
	var lines []int
	if text == "" {
		return nil
	}
	line, from := 1, 0
	for {
		i := bytes.Index(src[from:], []byte(text))
		if i < 0 {
			return lines
		}
		line += bytes.Count(src[from:from+i], []byte("\n"))
		lines = append(lines, line)
		line += bytes.Count([]byte(text), []byte("\n"))
		from += i + len(text)
	}
}

// lineList formats line numbers as "3, 7, 12".
func lineList(lines []int) string {
	s := make([]string, len(lines))
	for i, l := range lines {
		s[i] = strconv.Itoa(l)
	}
	return strings.Join(s, ", ")
}

// notInCode says where a name appears as text although the reader did not find it in
// code: in comments, strings or unreached code, the usual reason a grep check passes.
func notInCode(src []byte, name string, from, to int) string {
	var in []int
	for _, l := range occurrences(src, name) {
		if l >= from && l <= to {
			in = append(in, l)
		}
	}
	if len(in) == 0 {
		return ""
	}
	return fmt.Sprintf("; %q appears as text at line(s) %s", name, lineList(in))
}

func tokErr(m *PyModule) string {
	if m.Err != nil {
		return " (tokenizer: " + m.Err.Error() + ")"
	}
	return ""
}

func checkPyDef(file string, src []byte, e Effect) outcome {
	m := ParsePython(src)
	o := outcome{file: file}
	classes := m.FindClass(e.Class)
	if len(classes) == 0 {
		o.found = []string{fmt.Sprintf("%s: no class %s%s", file, e.Class, notInCode(src, e.Class, 1, 1<<30))}
		o.detail = "class " + e.Class + " not found" + tokErr(m)
		return o
	}
	o.pass = true
	for _, c := range classes {
		defs := c.Method(e.Method)
		if len(defs) == 0 {
			o.pass = false
			o.found = append(o.found, fmt.Sprintf("%s:%d: class %s has no method %s%s", file, c.Line, c.Qual, e.Method,
				notInCode(src, e.Method, c.Line, m.lastLine(c.BodyStart, c.BodyEnd))))
			o.detail = fmt.Sprintf("method %s.%s not defined%s", c.Qual, e.Method, tokErr(m))
			continue
		}
		for _, f := range defs {
			kw := "def"
			if f.Async {
				kw = "async def"
			}
			o.found = append(o.found, fmt.Sprintf("%s:%d: %s %s in class %s (line %d)", file, f.Line, kw, f.Name, c.Qual, c.Line))
		}
	}
	return o
}

// lastLine is the last line of the code tokens [start, end).
func (m *PyModule) lastLine(start, end int) int {
	if end > start && end <= len(m.Toks) {
		return m.Toks[end-1].Line
	}
	if start < len(m.Toks) {
		return m.Toks[start].Line
	}
	return 1 << 30
}

func checkPyCall(file string, src []byte, e Effect) outcome {
	m := ParsePython(src)
	o := outcome{file: file}
	classes := m.FindClass(e.Class)
	if len(classes) == 0 {
		o.found = []string{fmt.Sprintf("%s: no class %s", file, e.Class)}
		o.detail = "class " + e.Class + " not found" + tokErr(m)
		return o
	}
	o.pass = true
	for _, c := range classes {
		defs := c.Method(e.Method)
		if len(defs) == 0 {
			o.pass = false
			o.found = append(o.found, fmt.Sprintf("%s:%d: class %s has no method %s", file, c.Line, c.Qual, e.Method))
			o.detail = fmt.Sprintf("method %s.%s not defined%s", c.Qual, e.Method, tokErr(m))
			continue
		}
		var hits, notes []string
		for _, f := range defs {
			reached, unreached := m.SelfCalls(f, c.Qual)
			for _, call := range reached {
				if call.Callee != e.Callee {
					continue
				}
				s := fmt.Sprintf("%s:%d: %s.%s() in %s.%s (def at line %d)", file, call.Line, call.Recv, call.Callee, c.Qual, f.Name, f.Line)
				if len(call.Via) > 0 {
					s += fmt.Sprintf(", inside nested def %s, which %s calls", strings.Join(call.Via, "."), f.Name)
				}
				hits = append(hits, s)
			}
			for _, call := range unreached {
				if call.Callee == e.Callee {
					notes = append(notes, fmt.Sprintf("%s:%d: %s.%s() is inside nested def %s, which %s never calls: does not count",
						file, call.Line, call.Recv, call.Callee, strings.Join(call.Via, "."), f.Name))
				}
			}
			for _, r := range m.funcRefs(f) {
				if r.Attr && !r.Called && r.Name == e.Callee && (r.Recv == "self" || r.Recv == c.Name) {
					notes = append(notes, fmt.Sprintf("%s:%d: %s.%s referenced but not called", file, r.Line, r.Recv, r.Name))
				}
			}
		}
		if len(hits) > 0 {
			o.found = append(o.found, hits...)
			continue
		}
		o.pass = false
		f := defs[0]
		text := notInCode(src, e.Callee, f.Line, m.lastLine(f.BodyStart, f.BodyEnd))
		o.found = append(o.found, notes...)
		o.found = append(o.found, fmt.Sprintf("%s:%d: %s.%s (lines %d-%d) does not call %s%s", file, f.Line, c.Qual, f.Name,
			f.Line, m.lastLine(f.BodyStart, f.BodyEnd), e.Callee, text))
		o.detail = fmt.Sprintf("%s.%s never calls self.%s()%s", c.Qual, e.Method, e.Callee, tokErr(m))
	}
	return o
}

func checkPyEnv(file string, src []byte, e Effect) outcome {
	m := ParsePython(src)
	var lines []int
	for _, r := range m.EnvReads() {
		if r.Name == e.Name {
			lines = append(lines, r.Line)
		}
	}
	return envOutcome(file, src, e, lines, tokErr(m))
}

func checkCEnv(file string, src []byte, e Effect) outcome {
	var lines []int
	for _, r := range CEnvReads(TokenizeC(src)) {
		if r.Name == e.Name {
			lines = append(lines, r.Line)
		}
	}
	return envOutcome(file, src, e, lines, "")
}

func envOutcome(file string, src []byte, e Effect, lines []int, note string) outcome {
	o := outcome{file: file, pass: len(lines) > 0}
	if o.pass {
		o.found = []string{fmt.Sprintf("%s:%s: reads %s", file, lineList(lines), e.Name)}
		return o
	}
	o.found = []string{fmt.Sprintf("%s: no read of %s%s", file, e.Name, notInCode(src, e.Name, 1, 1<<30))}
	o.detail = "environment variable " + e.Name + " is never read" + note
	return o
}

func checkInclude(file string, src []byte, e Effect) outcome {
	o := outcome{file: file}
	for _, inc := range Includes(TokenizeC(src)) {
		if includeMatches(inc.Path, e.Header) {
			quoted := `"` + inc.Path + `"`
			if inc.Angle {
				quoted = "<" + inc.Path + ">"
			}
			o.found = append(o.found, fmt.Sprintf("%s:%d: #include %s", file, inc.Line, quoted))
		}
	}
	o.pass = len(o.found) > 0
	if !o.pass {
		o.found = []string{fmt.Sprintf("%s: no #include of %s%s", file, e.Header, notInCode(src, e.Header, 1, 1<<30))}
		o.detail = "no #include of " + e.Header
	}
	return o
}

func checkELF(elf SymbolReader, full, file string, e Effect) outcome {
	o := outcome{file: file}
	if elf == nil {
		o.err = fmt.Errorf("check %s for symbol %s: no ELF reader given", file, e.Symbol)
		return o
	}
	defined, referenced, desc, err := elf.DynamicSymbol(full, e.Symbol)
	o.found = []string{fmt.Sprintf("%s: %s %s", file, e.Symbol, desc)}
	switch {
	case err != nil:
		o.found = nil
		o.err = fmt.Errorf("check %s for symbol %s: %w", file, e.Symbol, err)
	case defined:
		o.pass = true
	case referenced:
		o.detail = e.Symbol + " is only referenced"
	default:
		o.detail = e.Symbol + " is not exported"
	}
	return o
}
