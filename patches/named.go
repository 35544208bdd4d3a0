package patches

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
)

// LoadNamed reads only the named shipped sets: a recipe uses a few, and parsing every
// set would cost a rerun with nothing to do more than all its other work. A name with
// no set directory is left out (the caller reports it as unknown).
func LoadNamed(names ...string) (*Catalog, error) {
	return LoadFor(Local{}, names...)
}

// Local says where patch sets outside the binary live: directories holding
// <name>/set.yaml (a recipe's own patches/ directory, --patch-dir), searched in
// order, and the names of local sets allowed to take the place of a shipped set.
type Local struct {
	Dirs   []string
	Shadow []string
	// Limits bound the reads of every set's files; zero fields take DefaultLimits.
	Limits Limits
}

// LoadFor reads the named sets, each from the first directory of local that
// holds it, else from the shipped ones. A local set with the name of a shipped
// one is refused unless local.Shadow names it: a patch set that silently
// changes under a known name would build something else than the name says.
// Set.Origin says where each set came from. A name found nowhere is left out
// (the caller reports it as unknown).
func LoadFor(local Local, names ...string) (*Catalog, error) {
	var dirs []fs.FS
	for _, d := range local.Dirs {
		fi, err := os.Stat(d)
		if err != nil {
			return nil, &LoadError{Err: fmt.Errorf("patch set directory %s: %w", d, err)}
		}
		if !fi.IsDir() {
			return nil, &LoadError{Err: fmt.Errorf("patch set directory %s: not a directory", d)}
		}
		dirs = append(dirs, userDir(d))
	}
	var refs []setFileRef
	var errs []error
	seen := map[string]bool{}
	for _, n := range names {
		file := path.Join(n, "set.yaml")
		if n == "" || path.Dir(file) != n || seen[n] {
			continue
		}
		seen[n] = true
		_, err := fs.Stat(sets, file)
		shipped := err == nil
		found := false
		for i, d := range dirs {
			if _, err := fs.Stat(d, file); err != nil {
				continue
			}
			found = true
			if shipped && !slices.Contains(local.Shadow, n) {
				errs = append(errs, fmt.Errorf("%s: patch set %q is also shipped with epbuild: pass --shadow %s to use this one instead, or give it another name",
					filepath.Join(local.Dirs[i], n), n, n))
				break
			}
			refs = append(refs, setFileRef{fsys: d, file: file, root: local.Dirs[i], local: true, limits: local.Limits})
			break
		}
		if !found && shipped {
			refs = append(refs, setFileRef{fsys: sets, file: file, root: "patches", limits: local.Limits})
		}
	}
	c, err := loadFiles(refs)
	var le *LoadError
	switch {
	case err != nil && !errors.As(err, &le):
		return nil, err
	case err != nil:
		errs = append(errs, le.Err)
	}
	if len(errs) > 0 {
		return nil, &LoadError{Err: errors.Join(errs...)}
	}
	return c, nil
}
