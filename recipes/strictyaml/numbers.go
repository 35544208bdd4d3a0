package strictyaml

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// NumberStrings finds the values that YAML reads as numbers where the Go type t (the
// type a document is decoded into) holds a string. Decoding would turn them into strings
// silently, and not back into what was written: 9.10 becomes "9.1", 0001 becomes "1".
// Each is an error at its line and column that says how to quote it. Fields are matched
// by their json names (epbuild's types give yaml and json the same names).
func NumberStrings(file string, root ast.Node, t reflect.Type) []*Error {
	var errs []*Error
	walkStrings(root, t, "$", func(path string, n ast.Node) {
		tk := n.GetToken()
		raw := tk.Value
		msg := fmt.Sprintf("%s: %s is a number in YAML", strings.TrimPrefix(path, "$."), raw)
		if v, ok := n.(ast.ScalarNode); ok && fmt.Sprint(v.GetValue()) != raw {
			msg += fmt.Sprintf(" (read as %v)", v.GetValue())
		}
		msg += fmt.Sprintf(", and this value is a string: quote it: %q", raw)
		src := snippet(yaml.FormatErrorWithToken(msg, tk, false, true))
		errs = append(errs, &Error{File: file, Line: tk.Position.Line, Col: tk.Position.Column, Msg: msg, Source: src})
	})
	return errs
}

// walkStrings follows node along the Go type t (the fields by their json names, map
// values, slice elements) and calls bad for every number where t wants a string. Nodes
// that do not fit the type are left to the decoder, which reports them.
func walkStrings(node ast.Node, t reflect.Type, path string, bad func(string, ast.Node)) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n := node.(type) {
	case nil:
		return
	case *ast.AnchorNode:
		walkStrings(n.Value, t, path, bad)
		return
	case *ast.TagNode:
		return // an explicit tag (!!str 9.10) says what the author meant
	}
	switch t.Kind() {
	case reflect.String:
		switch node.(type) {
		case *ast.IntegerNode, *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
			bad(path, node)
		}
	case reflect.Struct:
		m, ok := node.(*ast.MappingNode)
		if !ok {
			return
		}
		for _, mv := range m.Values {
			key := mv.Key.GetToken().Value
			if f, ok := fieldByJSON(t, key); ok {
				walkStrings(mv.Value, f.Type, path+"."+key, bad)
			}
		}
	case reflect.Map:
		m, ok := node.(*ast.MappingNode)
		if !ok {
			return
		}
		for _, mv := range m.Values {
			walkStrings(mv.Value, t.Elem(), path+"."+mv.Key.GetToken().Value, bad)
		}
	case reflect.Slice:
		s, ok := node.(*ast.SequenceNode)
		if !ok {
			return
		}
		for i, v := range s.Values {
			walkStrings(v, t.Elem(), fmt.Sprintf("%s[%d]", path, i), bad)
		}
	}
}

func fieldByJSON(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}
