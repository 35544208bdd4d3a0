package recipes

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
)

// numberScalars finds the values that YAML reads as numbers where the recipe holds a
// string: env values, cmake options, arch lists, versions. Decoding would turn them into
// strings silently, and not back into what was written: TORCH_CUDA_ARCH_LIST: 9.10
// becomes "9.1", cuda: 13.0 becomes "13". Each is an error at its line and column that
// says how to quote it.
func numberScalars(file string, root ast.Node) Errors {
	var errs Errors
	if root == nil {
		return nil
	}
	{
		walkStrings(root, reflect.TypeOf(Recipe{}), "$", func(path string, n ast.Node) {
			tk := n.GetToken()
			raw := tk.Value
			msg := fmt.Sprintf("%s: %s is a number in YAML", strings.TrimPrefix(path, "$."), raw)
			if v, ok := n.(ast.ScalarNode); ok && fmt.Sprint(v.GetValue()) != raw {
				msg += fmt.Sprintf(" (read as %v)", v.GetValue())
			}
			msg += fmt.Sprintf(", and this value is a string: quote it: %q", raw)
			src := yaml.FormatErrorWithToken(msg, tk, false, true)
			if i := strings.IndexByte(src, '\n'); i >= 0 {
				src = strings.TrimRight(src[i+1:], "\n")
			} else {
				src = ""
			}
			errs = append(errs, &Error{File: file, Line: tk.Position.Line, Col: tk.Position.Column, Msg: msg, Source: src})
		})
	}
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
