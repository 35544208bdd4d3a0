package recipes

import (
	"reflect"

	"github.com/goccy/go-yaml/ast"

	"github.com/epbuild/epbuild/recipes/strictyaml"
)

// numberScalars finds the values that YAML reads as numbers where the recipe holds a
// string: env values, cmake options, arch lists, versions. Decoding would turn them into
// strings silently, and not back into what was written: TORCH_CUDA_ARCH_LIST: 9.10
// becomes "9.1", cuda: 13.0 becomes "13". Each is an error at its line and column that
// says how to quote it.
func numberScalars(file string, root ast.Node) Errors {
	return Errors(strictyaml.NumberStrings(file, root, reflect.TypeOf(Recipe{})))
}
