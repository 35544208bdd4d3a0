package patches

import (
	"errors"
	"io/fs"
	"path"
)

// LoadNamed reads only the named shipped sets: a recipe uses a few, and parsing every
// set would cost a rerun with nothing to do more than all its other work. A name with
// no set directory is left out (the caller reports it as unknown).
func LoadNamed(names ...string) (*Catalog, error) {
	c := &Catalog{sets: make(map[string]*Set, len(names))}
	var errs []error
	for _, n := range names {
		file := path.Join(n, "set.yaml")
		if n == "" || path.Dir(file) != n || c.sets[n] != nil {
			continue
		}
		if _, err := fs.Stat(sets, file); err != nil {
			continue
		}
		s, err := loadSet(sets, file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		c.sets[s.Name] = s
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}
