package patches

import (
	"io/fs"
	"path"
)

// LoadNamed reads only the named shipped sets: a recipe uses a few, and parsing every
// set would cost a rerun with nothing to do more than all its other work. A name with
// no set directory is left out (the caller reports it as unknown).
func LoadNamed(names ...string) (*Catalog, error) {
	var files []string
	seen := map[string]bool{}
	for _, n := range names {
		file := path.Join(n, "set.yaml")
		if n == "" || path.Dir(file) != n || seen[n] {
			continue
		}
		seen[n] = true
		if _, err := fs.Stat(sets, file); err == nil {
			files = append(files, file)
		}
	}
	return loadFiles(sets, files)
}
