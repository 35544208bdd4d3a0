package effect

import (
	"testing"
)

// FuzzTokenize feeds arbitrary bytes to both tokenizers and the readers on top: nothing
// may panic, and the Python token stream must stay consistent with its source.
func FuzzTokenize(f *testing.F) {
	for _, src := range pyCorpus() {
		f.Add([]byte(src))
	}
	f.Add([]byte(cSource))
	f.Fuzz(func(t *testing.T, src []byte) {
		toks, _ := TokenizePython(src)
		if len(toks) == 0 || toks[len(toks)-1].Type != PyEndMarker {
			t.Fatalf("token stream does not end with ENDMARKER")
		}
		depth, off, line := 0, 0, 1
		for i, tok := range toks {
			if tok.Off < off || tok.Off > len(src) || tok.Line < line {
				t.Fatalf("token %d %v at offset %d line %d goes backwards (after %d, line %d)", i, tok.Type, tok.Off, tok.Line, off, line)
			}
			if tok.Type != PyIndent && tok.Text != "" && string(src[tok.Off:min(len(src), tok.Off+len(tok.Text))]) != tok.Text {
				t.Fatalf("token %d text %q is not the source at offset %d", i, tok.Text, tok.Off)
			}
			for _, e := range tok.Exprs {
				if e.Start < tok.Off || e.End > tok.Off+len(tok.Text) || e.Start > e.End {
					t.Fatalf("token %d: f-string field %v outside the token", i, e)
				}
			}
			off, line = tok.Off, tok.Line
			switch tok.Type {
			case PyIndent:
				depth++
			case PyDedent:
				depth--
			}
			if depth < 0 {
				t.Fatalf("more DEDENT than INDENT at token %d", i)
			}
		}
		if depth != 0 {
			t.Fatalf("%d INDENT without DEDENT", depth)
		}
		m := ParsePython(src)
		m.EnvReads()
		for _, c := range m.AllClasses() {
			if c.BodyStart > c.BodyEnd || c.BodyEnd > len(m.Toks) {
				t.Fatalf("class %s body [%d,%d) outside %d tokens", c.Qual, c.BodyStart, c.BodyEnd, len(m.Toks))
			}
			for _, fn := range c.Methods {
				m.SelfCalls(fn, c.Qual)
			}
		}
		ctoks := TokenizeC(src)
		Includes(ctoks)
		CEnvReads(ctoks)
	})
}
