// Package strictyaml is epbuild's one YAML loader. Recipes, patch sets and the compat
// data files (rules, catalogue, history) are all decoded by it: strictly (an unknown
// field, a duplicate key or a wrong type is an error at file:line:col with the offending
// line) and within limits on the document's size, its nesting and its alias expansion,
// checked before the document is decoded, so that a small hostile file cannot exhaust
// memory (a 1.9 KB alias bomb made the unguarded decoder use 9 GB).
package strictyaml

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/epbuild/epbuild/recipes/userfile"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/scanner"
	"github.com/goccy/go-yaml/token"
)

// Limits bound what one document may cost to load.
type Limits struct {
	// MaxBytes is the largest document read at all.
	MaxBytes int
	// MaxDepth is the deepest nesting of mappings and sequences.
	MaxDepth int
	// MaxNodes bounds the nodes a document may hold, counted before it is read from
	// what separates them: lines, "key: ", "- ", '[', '{' and ','.
	MaxNodes int
	// MaxAliasNodes is how many nodes alias expansion (*name, <<: *name) may add to the
	// document in all.
	MaxAliasNodes int
}

// DefaultLimits are far above what epbuild's files need (the largest, compat/rules.yaml,
// is 32 KiB with about 2,300 separators (9 times less than MaxNodes), 14 levels deep, and none uses an alias) and far
// below what hurts: a document at the limits loads in tens of MiB.
func DefaultLimits() Limits {
	return Limits{MaxBytes: 1 << 20, MaxDepth: 64, MaxNodes: 20000, MaxAliasNodes: 10000}
}

// Error is a problem in a YAML file, located by line and column when it has a place.
type Error struct {
	File string `json:"file"`
	Line int    `json:"line,omitempty"`
	Col  int    `json:"col,omitempty"`
	Msg  string `json:"message"`
	// Source is the offending line(s) with a marker, when the place is known.
	Source string `json:"source,omitempty"`
}

func (e *Error) Error() string {
	loc := e.File
	if e.Line > 0 {
		loc = fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Col)
	}
	if e.Source != "" {
		return loc + ": " + e.Msg + "\n" + e.Source
	}
	return loc + ": " + e.Msg
}

// ExitCode marks a bad file as bad input.
func (e *Error) ExitCode() int { return 2 }

// Loader decodes documents under its limits.
type Loader struct {
	Limits Limits
	// UnknownFieldHint is added to an unknown-field error (where to look up the fields).
	UnknownFieldHint string
}

// Decode decodes data (named file in errors) into v under the default limits.
func Decode(file string, data []byte, v any) (*Doc, error) {
	return Loader{Limits: DefaultLimits()}.Decode(file, data, v)
}

// Decode checks the document against the limits, then decodes its first document into v
// strictly. goccy/go-yaml panics on some malformed input; that becomes an error too.
func (l Loader) Decode(file string, data []byte, v any) (doc *Doc, err error) {
	defer func() {
		if p := recover(); p != nil {
			doc, err = nil, &Error{File: file, Msg: fmt.Sprintf("the YAML could not be decoded (%v); check the syntax, tags (!x) and indentation", p)}
		}
	}()
	if err := l.checkSize(file, len(data)); err != nil {
		return nil, err
	}
	if err := l.checkNodes(file, data); err != nil {
		return nil, err
	}
	if err := l.checkDepth(file, data); err != nil {
		return nil, err
	}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		return nil, l.yamlError(file, err)
	}
	d := &Doc{File: file}
	if len(f.Docs) > 0 {
		d.root = f.Docs[0].Body
	}
	for _, doc := range f.Docs {
		if err := l.checkAliases(file, doc.Body); err != nil {
			return nil, err
		}
	}
	if err := yaml.NewDecoder(bytes.NewReader(data), yaml.Strict()).Decode(v); err != nil {
		return nil, l.yamlError(file, err)
	}
	return d, nil
}

func (l Loader) checkSize(file string, n int) error {
	if n > l.Limits.MaxBytes {
		return &Error{File: file, Msg: fmt.Sprintf("the document is %s; the limit is %s (strictyaml.Limits.MaxBytes): epbuild's files are a few KiB, so this one is damaged or not what it claims",
			userfile.Size(int64(n)), userfile.Size(int64(l.Limits.MaxBytes)))}
	}
	return nil
}

// ReadFile reads a file of at most MaxBytes without reading more than that from it.
func (l Loader) ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return l.read(path, f)
}

// ReadFS is ReadFile on a file system.
func (l Loader) ReadFS(fsys fs.FS, name, shown string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return l.read(shown, f)
}

func (l Loader) read(shown string, r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(l.Limits.MaxBytes)+1))
	if err != nil {
		return nil, err
	}
	if err := l.checkSize(shown, len(b)); err != nil {
		e := err.(*Error)
		e.Msg = strings.Replace(e.Msg, "the document is "+userfile.Size(int64(len(b))), "the document is larger than "+userfile.Size(int64(l.Limits.MaxBytes)), 1)
		return nil, e
	}
	return b, nil
}

// checkNodes bounds the document's nodes from the bytes alone, before the scanner makes
// a token of each (a 1 MiB flow sequence of empty sequences made it use 780 MiB): every
// node but the first follows a line break, a "key: ", a "- ", a '[', a '{' or a ','.
// Quoted text counts too, so this over-counts a little, never under.
func (l Loader) checkNodes(file string, data []byte) error {
	n := 1
	for i, c := range data {
		switch c {
		case '\n', '[', '{', ',':
			n++
		case ':', '-':
			if i+1 < len(data) && (data[i+1] == ' ' || data[i+1] == '\t') {
				n++
			}
		}
		if n > l.Limits.MaxNodes {
			line := 1 + bytes.Count(data[:i], []byte{'\n'})
			return &Error{File: file, Line: line, Col: i - bytes.LastIndexByte(data[:i], '\n'),
				Msg: fmt.Sprintf("more than %d nodes (strictyaml.Limits.MaxNodes): epbuild's files hold a few thousand; this one is damaged or hostile", l.Limits.MaxNodes)}
		}
	}
	return nil
}

// block is an open block collection: the column its entries start at, and its kind.
type block struct {
	col int
	seq bool
}

// checkDepth bounds the nesting from the token stream, before a syntax tree exists: the
// parser keeps a path per node, so a document nested 100,000 levels deep costs it
// gigabytes. Flow collections ([ {) are counted exactly; a block collection opens where a
// sequence entry or a mapping key starts at a deeper column than the one enclosing it
// (or as a sequence beside its key's column). The scanner is streamed: nothing but the
// open collections is kept.
func (l Loader) checkDepth(file string, data []byte) error {
	var s scanner.Scanner
	s.Init(string(data))
	var (
		stack []block
		flow  int
		prev  *token.Token
	)
	tooDeep := func(tk *token.Token) error {
		return &Error{File: file, Line: tk.Position.Line, Col: tk.Position.Column,
			Msg: fmt.Sprintf("nesting deeper than %d levels (strictyaml.Limits.MaxDepth): epbuild's files need far fewer; this one is damaged or hostile", l.Limits.MaxDepth)}
	}
	open := func(col int, seq bool) {
		for len(stack) > 0 {
			top := stack[len(stack)-1]
			// a mapping key at the column of a sequence beside its key ends that sequence
			if top.col > col || (top.col == col && top.seq && !seq) {
				stack = stack[:len(stack)-1]
				continue
			}
			break
		}
		if n := len(stack); n > 0 && stack[n-1].col == col && stack[n-1].seq == seq {
			return // another entry of the same collection
		}
		stack = append(stack, block{col: col, seq: seq})
	}
	for {
		tks, err := s.Scan()
		if errors.Is(err, io.EOF) {
			return nil
		}
		for _, tk := range tks {
			switch tk.Type {
			case token.SequenceStartType, token.MappingStartType:
				flow++
			case token.SequenceEndType, token.MappingEndType:
				if flow > 0 {
					flow--
				}
			case token.DocumentHeaderType, token.DocumentEndType:
				stack, flow = stack[:0], 0
			case token.SequenceEntryType:
				if flow == 0 {
					open(tk.Position.Column, true)
				}
			case token.MappingValueType:
				if flow == 0 && prev != nil {
					open(prev.Position.Column, false)
				}
			}
			if len(stack)+flow > l.Limits.MaxDepth {
				return tooDeep(tk)
			}
			if tk.Type != token.CommentType && tk.Type != token.SpaceType {
				prev = tk
			}
		}
	}
}

// checkAliases bounds alias expansion on the syntax tree (which holds each alias once):
// walking in document order, each anchor's expanded size is known when an alias to it
// is met, so a bomb is refused after counting, never after expanding.
func (l Loader) checkAliases(file string, root ast.Node) error {
	anchors := map[string]int{}
	budget := l.Limits.MaxAliasNodes
	added := 0
	var err error
	// walk returns the node's size with aliases expanded, saturating at the budget
	var walk func(n ast.Node, depth int) int
	walk = func(n ast.Node, depth int) int {
		if n == nil || err != nil {
			return 0
		}
		if depth > l.Limits.MaxDepth {
			tk := n.GetToken()
			err = &Error{File: file, Msg: fmt.Sprintf("nesting deeper than %d levels (strictyaml.Limits.MaxDepth)", l.Limits.MaxDepth)}
			if tk != nil {
				err.(*Error).Line, err.(*Error).Col = tk.Position.Line, tk.Position.Column
			}
			return 0
		}
		// sum sizes the children at depth d (a mapping or sequence is one level deeper)
		sum := func(d int, ns ...ast.Node) int {
			total := 1
			for _, c := range ns {
				total = min(total+walk(c, d), budget+1)
			}
			return total
		}
		switch n := n.(type) {
		case *ast.AliasNode:
			name := ""
			if n.Value != nil {
				name = n.Value.GetToken().Value
			}
			exp := anchors[name]
			added = min(added+exp, budget+1)
			if added > budget {
				tk := n.GetToken()
				err = &Error{File: file, Line: tk.Position.Line, Col: tk.Position.Column,
					Msg: fmt.Sprintf("alias *%s takes the document past %d nodes of alias expansion (strictyaml.Limits.MaxAliasNodes): write the values out, or this is an alias bomb", name, budget)}
			}
			return exp
		case *ast.AnchorNode:
			s := walk(n.Value, depth)
			if n.Name != nil {
				anchors[n.Name.GetToken().Value] = s
			}
			return s
		case *ast.TagNode:
			return walk(n.Value, depth)
		case *ast.MappingNode:
			var ns []ast.Node
			for _, v := range n.Values {
				ns = append(ns, v)
			}
			return sum(depth+1, ns...)
		case *ast.MappingValueNode:
			return sum(depth, n.Key, n.Value)
		case *ast.MappingKeyNode:
			return sum(depth, n.Value)
		case *ast.SequenceNode:
			return sum(depth+1, n.Values...)
		case *ast.DocumentNode:
			return sum(depth, n.Body)
		}
		return 1
	}
	walk(root, 0)
	return err
}

// yamlError turns a goccy error into an *Error at its line and column.
func (l Loader) yamlError(file string, err error) error {
	var ye yaml.Error
	if errors.As(err, &ye) && ye.GetToken() != nil {
		tk := ye.GetToken()
		msg := ye.GetMessage()
		var uf *yaml.UnknownFieldError
		if errors.As(err, &uf) && l.UnknownFieldHint != "" {
			msg += " (" + l.UnknownFieldHint + ")"
		}
		return &Error{File: file, Line: tk.Position.Line, Col: tk.Position.Column, Msg: msg, Source: snippet(ye.FormatError(false, true))}
	}
	return &Error{File: file, Msg: fmt.Sprintf("decode: %v", err)}
}

// snippet is goccy's formatted error without its leading message line.
func snippet(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimRight(s[i+1:], "\n")
	}
	return ""
}
