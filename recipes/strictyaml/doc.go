package strictyaml

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// Doc is a decoded document's syntax tree, kept so that problems found after decoding
// (a short commit, an unknown name) still point at a line.
type Doc struct {
	File string
	root ast.Node
}

// Root is the syntax tree of the decoded document, for checks that follow the tree
// beside the decoded value (nil when there was no document).
func (d *Doc) Root() ast.Node { return d.root }

// Pos gives the line and column of the node at a YAML path ("$.components[0].name"); a
// path with no node (a missing field) gives its nearest existing parent. A mapping is
// located at its first key, the place a reader looks for it. 0, 0 when there is no tree.
func (d *Doc) Pos(path string) (line, col int) {
	n := d.node(path)
	if n == nil {
		return 0, 0
	}
	tk := n.GetToken()
	if tk == nil {
		return 0, 0
	}
	return tk.Position.Line, tk.Position.Column
}

// ErrorAt is a problem at a YAML path: located as Pos says, with the offending line.
func (d *Doc) ErrorAt(path, msg string) *Error {
	e := &Error{File: d.File, Msg: msg}
	n := d.node(path)
	if n == nil || n.GetToken() == nil {
		return e
	}
	tk := n.GetToken()
	e.Line, e.Col = tk.Position.Line, tk.Position.Column
	e.Source = snippet(yaml.FormatErrorWithToken(msg, tk, false, true))
	return e
}

// Errorf is ErrorAt with a format.
func (d *Doc) Errorf(path, format string, args ...any) *Error {
	return d.ErrorAt(path, fmt.Sprintf(format, args...))
}

// node walks a path of .key and [index] steps from the document's root as far as it
// leads.
func (d *Doc) node(path string) ast.Node {
	if d == nil || d.root == nil {
		return nil
	}
	n := d.root
	for _, step := range splitPath(path) {
		next := child(n, step)
		if next == nil {
			break
		}
		n = next
	}
	switch m := unwrap(n).(type) {
	case *ast.MappingNode:
		if len(m.Values) > 0 && m.Values[0].Key != nil {
			return m.Values[0].Key
		}
	case *ast.MappingValueNode:
		if m.Key != nil {
			return m.Key
		}
	}
	return n
}

// step is one element of a path: a mapping key, or a sequence index when key is "".
type step struct {
	key   string
	index int
}

// splitPath reads "$.a.b[2].c" into steps; keys run to the next '.' or '['.
func splitPath(p string) []step {
	p = strings.TrimPrefix(p, "$")
	var out []step
	for p != "" {
		switch p[0] {
		case '.':
			p = p[1:]
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			out = append(out, step{key: p[:end]})
			p = p[end:]
		case '[':
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return out
			}
			i, err := strconv.Atoi(p[1:end])
			if err != nil {
				return out
			}
			out = append(out, step{index: i})
			p = p[end+1:]
		default:
			return out
		}
	}
	return out
}

func unwrap(n ast.Node) ast.Node {
	for {
		switch w := n.(type) {
		case *ast.AnchorNode:
			n = w.Value
		case *ast.TagNode:
			n = w.Value
		default:
			return n
		}
	}
}

func child(n ast.Node, s step) ast.Node {
	n = unwrap(n)
	if s.key == "" {
		if seq, ok := n.(*ast.SequenceNode); ok && s.index >= 0 && s.index < len(seq.Values) {
			return seq.Values[s.index]
		}
		return nil
	}
	var values []*ast.MappingValueNode
	switch m := n.(type) {
	case *ast.MappingNode:
		values = m.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{m}
	}
	for _, v := range values {
		if v.Key != nil && v.Key.GetToken() != nil && v.Key.GetToken().Value == s.key {
			return v.Value
		}
	}
	return nil
}
