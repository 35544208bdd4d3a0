package recipes

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/epbuild/epbuild/recipes/strictyaml"
)

//go:embed *.yaml
var embedded embed.FS

// Embedded is the file system of the recipes built into the binary.
func Embedded() fs.FS { return embedded }

// Error is a problem in a recipe, located in its file (or in a --set flag): the one
// error type of the YAML loader.
type Error = strictyaml.Error

// Errors is every problem found in one recipe, in file order.
type Errors []*Error

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// ExitCode marks recipe errors as bad input.
func (es Errors) ExitCode() int { return 2 }

// Doc is a loaded recipe with what is needed to point at its lines.
type Doc struct {
	Recipe Recipe
	// File is the name shown in errors (recipes/gcp-b200.yaml for an embedded one).
	File string
	// Dir is the directory of the recipe file; "" for an embedded recipe.
	Dir string
	y   *strictyaml.Doc
	// set maps a YAML path to the --set flag that overrode it, for error messages.
	set map[string]string
}

// Library finds recipes by name: in the directories given (--recipe-dir), then among
// the embedded ones.
type Library struct {
	dirs []string
	// PatchDirs are directories of local patch sets (<dir>/<name>/set.yaml) given by
	// the user, searched before the patches/ directory beside a recipe file.
	PatchDirs []string
	// Shadow names the local patch sets that may take the place of a shipped set
	// of the same name.
	Shadow []string
}

// PatchSetDirs lists where the local patch sets of doc are looked for, in order:
// PatchDirs, then the patches/ directory beside the recipe file when there is
// one. An embedded recipe has no directory of its own.
func (l *Library) PatchSetDirs(doc *Doc) []string {
	dirs := slices.Clone(l.PatchDirs)
	if doc.Dir != "" {
		beside := filepath.Join(doc.Dir, "patches")
		if fi, err := os.Stat(beside); err == nil && fi.IsDir() && !slices.Contains(dirs, beside) {
			dirs = append(dirs, beside)
		}
	}
	return dirs
}

// NewLibrary returns a library that looks in dirs before the embedded recipes.
func NewLibrary(dirs ...string) *Library { return &Library{dirs: dirs} }

// Names lists every recipe name the library knows, sorted, without duplicates.
func (l *Library) Names() ([]string, error) {
	seen := map[string]bool{}
	add := func(fsys fs.FS, where string) error {
		ents, err := fs.ReadDir(fsys, ".")
		if err != nil {
			return fmt.Errorf("list recipes in %s: %w", where, err)
		}
		for _, e := range ents {
			if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
				seen[n] = true
			}
		}
		return nil
	}
	for _, d := range l.dirs {
		if err := add(os.DirFS(d), d); err != nil {
			return nil, err
		}
	}
	if err := add(embedded, "the embedded recipes"); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Load reads a recipe by name, or from a file when nameOrPath names one (contains a
// path separator or ends in .yaml).
func (l *Library) Load(nameOrPath string) (*Doc, error) {
	if strings.ContainsRune(nameOrPath, filepath.Separator) || strings.HasSuffix(nameOrPath, ".yaml") || strings.HasSuffix(nameOrPath, ".yml") {
		return LoadFile(nameOrPath)
	}
	for _, d := range l.dirs {
		p := filepath.Join(d, nameOrPath+".yaml")
		if _, err := os.Stat(p); err == nil {
			return LoadFile(p)
		}
	}
	data, err := fs.ReadFile(embedded, nameOrPath+".yaml")
	if err != nil {
		names, _ := l.Names()
		return nil, &Error{File: nameOrPath, Msg: fmt.Sprintf("no recipe named %q; known recipes: %s (or give a file path)", nameOrPath, strings.Join(names, ", "))}
	}
	return Parse("recipes/"+nameOrPath+".yaml", data)
}

// LoadFile reads and decodes a recipe file (without semantic validation).
func LoadFile(path string) (*Doc, error) {
	data, err := loader().ReadFile(path)
	if err != nil {
		var ye *Error
		if errors.As(err, &ye) {
			return nil, ye
		}
		return nil, &Error{File: path, Msg: fmt.Sprintf("read recipe: %v", err)}
	}
	d, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	d.Dir = filepath.Dir(path)
	return d, nil
}

// loader is the YAML loader with the hint an unknown recipe field gets.
func loader() strictyaml.Loader {
	return strictyaml.Loader{Limits: strictyaml.DefaultLimits(), UnknownFieldHint: "check the spelling against the schema, recipes/schema.json"}
}

// Parse decodes recipe YAML strictly and within the loader's limits: an unknown field, a
// duplicate key or a wrong type is an *Error with file:line:col and the offending line.
func Parse(file string, data []byte) (*Doc, error) {
	d := &Doc{File: file, set: map[string]string{}}
	y, err := loader().Decode(file, data, &d.Recipe)
	if err != nil {
		return nil, err
	}
	d.y = y
	if errs := numberScalars(file, y.Root()); len(errs) > 0 {
		return nil, errs
	}
	return d, nil
}

// errAt builds an Error located at a YAML path of the document ($.components[0].name).
// A path overridden by --set is reported against the flag; a path with no node (a
// missing field) falls back to its nearest existing parent.
func (d *Doc) errAt(path, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	for p := path; p != ""; p = parentPath(p) {
		if flag, ok := d.set[p]; ok {
			return &Error{File: "--set " + flag, Msg: msg}
		}
	}
	if d.y == nil {
		return &Error{File: d.File, Msg: msg}
	}
	return d.y.ErrorAt(path, msg)
}

// parentPath drops the last element of a YAML path: $.a.b[2] → $.a.b → $.a → $.
func parentPath(p string) string {
	if p == "$" {
		return ""
	}
	i := strings.LastIndexAny(p, ".[")
	if i <= 0 {
		return "$"
	}
	return p[:i]
}
