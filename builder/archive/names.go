package archive

import (
	"errors"
	"io/fs"
	"path"
	"strings"
)

// cleanName turns a stored entry name into a clean relative slash path. "" means the
// archive's root itself ("./"). Any ".." component is refused outright, even one that would
// stay inside: no real source tree or artifact needs it, and it is how escapes are spelled.
func cleanName(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("name contains a NUL byte")
	}
	if strings.HasPrefix(name, "/") {
		return "", errors.New("absolute path")
	}
	parts := strings.Split(name, "/")
	out := parts[:0]
	for _, p := range parts {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", errors.New("path escapes the destination (contains \"..\")")
		}
		out = append(out, p)
	}
	return strings.Join(out, "/"), nil
}

// checkLinkTarget applies the lexical rule for a symlink at linkPath (clean, relative):
// the target must be relative and, read from the link's directory, stay inside the tree.
func checkLinkTarget(linkPath, target string) error {
	switch {
	case target == "":
		return errors.New("symlink has an empty target")
	case strings.IndexByte(target, 0) >= 0:
		return errors.New("symlink target contains a NUL byte")
	case strings.HasPrefix(target, "/"):
		return errors.New("symlink target " + quote(target) + " is absolute")
	}
	j := path.Join(path.Dir(linkPath), target)
	if j == ".." || strings.HasPrefix(j, "../") {
		return errors.New("symlink target " + quote(target) + " points outside the tree")
	}
	return nil
}

func quote(s string) string { return "\"" + strings.ReplaceAll(s, "\"", "\\\"") + "\"" }

// nodeKind is what a path of a tree under construction is.
type nodeKind uint8

const (
	nodeDir nodeKind = iota + 1
	nodeFile
	nodeSymlink
)

type node struct {
	kind   nodeKind
	target string      // symlinks only
	mode   fs.FileMode // regular files: the mode extraction gives them
	size   int64       // regular files, when hashed
	sum    string      // regular files, when hashed: sha256, hex
}

// tree records what has been created, so that later entries can be checked against it
// without asking the file system (which would follow links).
type tree map[string]node

// maxLinkHops mirrors Linux's MAXSYMLINKS: a longer chain fails with ELOOP in the kernel,
// so nothing behind it can be reached.
const maxLinkHops = 40

// linkEscapes resolves a symlink's target the way the kernel would, following the symlinks
// recorded in t, and reports whether any step climbs above the tree's root. The lexical
// check alone misses chains such as "x -> l/.." with "l -> ..".
func (t tree) linkEscapes(linkPath, target string) bool {
	stack := splitPath(path.Dir(linkPath))
	pending := splitPath(target)
	hops := 0
	for len(pending) > 0 {
		c := pending[0]
		pending = pending[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return true
			}
			stack = stack[:len(stack)-1]
			continue
		}
		cur := strings.Join(append(stack[:len(stack):len(stack)], c), "/")
		if n, ok := t[cur]; ok && n.kind == nodeSymlink {
			hops++
			if hops > maxLinkHops {
				return false
			}
			if strings.HasPrefix(n.target, "/") {
				return true
			}
			pending = append(splitPath(n.target), pending...)
			continue
		}
		stack = append(stack, c)
	}
	return false
}

func splitPath(p string) []string {
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(p, "/")
}
