package patches

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
)

type nodeKind uint8

const (
	absent nodeKind = iota
	regular
	directory
	symlink
	special
)

// node is what one path holds: nothing, a regular file (data and permission
// bits), a directory, or something epbuild does not touch.
type node struct {
	kind nodeKind
	data string
	perm fs.FileMode
}

// absentNode is a fresh node for "nothing here" (fresh: no shared package state).
func absentNode() *node { return &node{kind: absent} }

func (n *node) same(o *node) bool {
	return n.kind == o.kind && n.data == o.data && n.perm == o.perm
}

// disk reads the original tree through an os.Root (which refuses paths that
// leave it) and caches what it read. Every component of a path is checked with
// Lstat from the top, so no read or later write goes through a symlink.
type disk struct {
	root  *os.Root
	nodes map[string]*node
}

func newDisk(root *os.Root) *disk {
	return &disk{root: root, nodes: map[string]*node{}}
}

// symlinkError says that a path, or one of its parent directories, is a symlink.
type symlinkError struct{ at string }

func (e *symlinkError) Error() string { return "symlink at " + e.at }

func (d *disk) get(p string) (*node, error) {
	if n, ok := d.nodes[p]; ok {
		return n, nil
	}
	if dir := path.Dir(p); dir != "." {
		parent, err := d.get(dir)
		if err != nil {
			return nil, err
		}
		if parent.kind != directory {
			// Under a file or nothing: nothing here.
			n := absentNode()
			d.nodes[p] = n
			return n, nil
		}
	}
	fi, err := d.root.Lstat(p)
	var n *node
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		n = absentNode()
	case err != nil:
		return nil, fmt.Errorf("inspect %s: %w", p, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, &symlinkError{at: p}
	case fi.IsDir():
		n = &node{kind: directory}
	case fi.Mode().IsRegular():
		data, err := d.root.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		n = &node{kind: regular, data: string(data), perm: fi.Mode().Perm()}
	default:
		n = &node{kind: special}
	}
	d.nodes[p] = n
	return n, nil
}

// state is the tree as the patches applied so far leave it, in memory: the
// changed paths over the original disk.
type state struct {
	disk    *disk
	changes map[string]*node
}

func (s *state) get(p string) (*node, error) {
	if n, ok := s.changes[p]; ok {
		return n, nil
	}
	return s.disk.get(p)
}

func (s *state) fork() *state {
	c := &state{disk: s.disk, changes: make(map[string]*node, len(s.changes)+8)}
	for k, v := range s.changes {
		c.changes[k] = v
	}
	return c
}

// writeOp is one path to change on disk.
type writeOp struct {
	path string
	from *node // what the disk holds
	to   *node
}

// diff lists what differs from the disk: removals first, deepest first (so a
// directory emptied by them can go), then writes in path order.
func (s *state) diff() []writeOp {
	var removes, writes []writeOp
	for p, to := range s.changes {
		from := s.disk.nodes[p]
		if from == nil {
			from = absentNode()
		}
		if from.same(to) {
			continue
		}
		op := writeOp{path: p, from: from, to: to}
		if to.kind == absent {
			removes = append(removes, op)
		} else {
			writes = append(writes, op)
		}
	}
	slices.SortFunc(removes, func(a, b writeOp) int {
		if d := strings.Count(b.path, "/") - strings.Count(a.path, "/"); d != 0 {
			return d
		}
		return strings.Compare(a.path, b.path)
	})
	slices.SortFunc(writes, func(a, b writeOp) int { return strings.Compare(a.path, b.path) })
	return append(removes, writes...)
}

// writer changes the tree through the os.Root and keeps a journal, so that a
// failure midway can put back everything it did.
type writer struct {
	root    *os.Root
	journal []undo
	dirs    map[string]bool // directories known to exist
}

type undoKind uint8

const (
	undoFile   undoKind = iota // put back node at path (or remove it when absent)
	undoMkdir                  // remove a directory we made
	undoPruned                 // make again a directory we removed when it became empty
)

type undo struct {
	kind undoKind
	path string
	node *node
}

func (w *writer) apply(ops []writeOp) error {
	for _, op := range ops {
		if err := w.do(op); err != nil {
			if rerr := w.rollback(); rerr != nil {
				return fmt.Errorf("%w; rollback failed, the tree is not as it was: %w", err, rerr)
			}
			return err
		}
	}
	return nil
}

func (w *writer) do(op writeOp) error {
	if op.to.kind == absent {
		if err := w.root.Remove(op.path); err != nil {
			return fmt.Errorf("remove %s: %w", op.path, err)
		}
		w.journal = append(w.journal, undo{kind: undoFile, path: op.path, node: op.from})
		// Like git apply: a directory the removal left empty goes too.
		for dir := path.Dir(op.path); dir != "."; dir = path.Dir(dir) {
			if w.root.Remove(dir) != nil {
				break
			}
			delete(w.dirs, dir)
			w.journal = append(w.journal, undo{kind: undoPruned, path: dir})
		}
		return nil
	}
	if err := w.mkdirs(path.Dir(op.path)); err != nil {
		return err
	}
	// writeFile leaves p as it was when it fails, so only a done write is journaled.
	if err := writeFile(w.root, op.path, op.to); err != nil {
		return err
	}
	w.journal = append(w.journal, undo{kind: undoFile, path: op.path, node: op.from})
	return nil
}

// mkdirs makes the missing directories of dir, recording each.
func (w *writer) mkdirs(dir string) error {
	if dir == "." || w.dirs[dir] {
		return nil
	}
	if fi, err := w.root.Lstat(dir); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("create directory %s: a non-directory is in the way", dir)
		}
		w.dirs[dir] = true
		return nil
	}
	if err := w.mkdirs(path.Dir(dir)); err != nil {
		return err
	}
	if err := w.root.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, err)
	}
	w.journal = append(w.journal, undo{kind: undoMkdir, path: dir})
	w.dirs[dir] = true
	return nil
}

// writeFile replaces p with n through a temporary file in the same directory
// and a rename, so that p never holds half a file.
func writeFile(root *os.Root, p string, n *node) error {
	tmp := path.Join(path.Dir(p), "."+path.Base(p)+".epbuild-tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, n.perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	_, werr := f.WriteString(n.data)
	// Chmod: OpenFile's mode is cut by the umask.
	merr := f.Chmod(n.perm)
	cerr := f.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, err)
	}
	if err := root.Rename(tmp, p); err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

func (w *writer) rollback() error {
	var errs []error
	for i := len(w.journal) - 1; i >= 0; i-- {
		u := w.journal[i]
		switch u.kind {
		case undoFile:
			if u.node.kind == absent {
				if err := w.root.Remove(u.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs = append(errs, fmt.Errorf("remove %s: %w", u.path, err))
				}
				continue
			}
			if err := writeFile(w.root, u.path, u.node); err != nil {
				errs = append(errs, err)
			}
		case undoMkdir:
			if err := w.root.Remove(u.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove directory %s: %w", u.path, err))
			}
		case undoPruned:
			if err := w.root.Mkdir(u.path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				errs = append(errs, fmt.Errorf("create directory %s: %w", u.path, err))
			}
		}
	}
	w.journal = nil
	return errors.Join(errs...)
}
