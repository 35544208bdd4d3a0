package patches

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
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
// Lstat from the top, so no read or later write goes through a symlink. It is
// safe for concurrent use: each path is read once, by its first caller.
type disk struct {
	dirs  *dirs
	mu    sync.Mutex
	nodes map[string]*diskEntry
}

// diskEntry is what get found at one path, once done is closed.
type diskEntry struct {
	done chan struct{}
	n    *node
	err  error
}

func newDisk(dirs *dirs) *disk {
	return &disk{dirs: dirs, nodes: map[string]*diskEntry{}}
}

// symlinkError says that a path, or one of its parent directories, is a symlink.
type symlinkError struct{ at string }

func (e *symlinkError) Error() string { return "symlink at " + e.at }

func (d *disk) get(p string) (*node, error) {
	d.mu.Lock()
	e, ok := d.nodes[p]
	if !ok {
		e = &diskEntry{done: make(chan struct{})}
		d.nodes[p] = e
	}
	d.mu.Unlock()
	if !ok {
		e.n, e.err = d.read(p)
		close(e.done)
	}
	<-e.done
	return e.n, e.err
}

// node returns what the disk holds at p when it was read, else nil.
func (d *disk) node(p string) *node {
	d.mu.Lock()
	e := d.nodes[p]
	d.mu.Unlock()
	if e == nil {
		return nil
	}
	<-e.done
	return e.n
}

func (d *disk) read(p string) (*node, error) {
	if dir := path.Dir(p); dir != "." {
		parent, err := d.get(dir)
		if err != nil {
			return nil, err
		}
		if parent.kind != directory {
			// Under a file or nothing: nothing here.
			return absentNode(), nil
		}
	}
	h, name, at := d.dirs.at(p)
	fi, err := h.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
		return absentNode(), nil
	case err != nil:
		return nil, fmt.Errorf("inspect %s: %w", p, treePath(err, at, name))
	case fi.Mode()&fs.ModeSymlink != 0:
		return nil, &symlinkError{at: p}
	case fi.IsDir():
		d.dirs.saw(p, fi)
		return &node{kind: directory}, nil
	case fi.Mode().IsRegular():
		data, err := readString(h, name, fi.Size())
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, treePath(err, at, name))
		}
		return &node{kind: regular, data: data, perm: fi.Mode().Perm()}, nil
	default:
		return &node{kind: special}, nil
	}
}

// readString reads the file name of h, of about size bytes, into a string without a
// second copy.
func readString(h *os.Root, name string, size int64) (string, error) {
	f, err := h.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var b strings.Builder
	b.Grow(int(size))
	if _, err := io.Copy(&b, f); err != nil {
		return "", err
	}
	return b.String(), nil
}

// dirs keeps an open handle (an os.Root) on each directory of the tree that
// the engine reads or writes in, so that a file is reached with one call in
// its directory rather than with a walk from the top for every access. A
// directory is opened only from its parent's handle, after Lstat there said
// it is a directory (not a symlink), and only if the handle is that very
// directory. Where a directory cannot be opened so, the access goes through
// the tree's root with the whole path, as it would without handles. It is
// safe for concurrent use.
type dirs struct {
	root *os.Root
	mu   sync.Mutex
	// seen is the Lstat of each directory found, from its parent.
	seen map[string]fs.FileInfo
	// open holds the handles by directory; nil where opening failed.
	open map[string]*os.Root
	// files holds directories opened as files (see file); nil where that failed.
	files map[string]*os.File
}

func newDirs(root *os.Root) *dirs {
	return &dirs{
		root:  root,
		seen:  map[string]fs.FileInfo{},
		open:  map[string]*os.Root{".": root},
		files: map[string]*os.File{},
	}
}

// saw records that Lstat found the directory p as fi.
func (d *dirs) saw(p string, fi fs.FileInfo) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.seen[p]; !ok {
		d.seen[p] = fi
	}
}

// handle returns the open directory p, or nil. d.mu is held.
func (d *dirs) handle(p string) *os.Root {
	if h, ok := d.open[p]; ok {
		return h
	}
	fi := d.seen[p]
	if fi == nil || len(d.open) >= maxOpenDirs {
		return nil
	}
	parent := d.handle(path.Dir(p))
	if parent == nil {
		return nil
	}
	h, err := parent.OpenRoot(path.Base(p))
	if err == nil {
		// Lstat(".") on the handle is the directory it holds.
		if got, err := h.Lstat("."); err != nil || !os.SameFile(fi, got) {
			h.Close()
			h = nil
		}
	} else {
		h = nil
	}
	d.open[p] = h
	return h
}

// maxOpenDirs bounds the directories held open (twice: as handles, and as
// files); past it, paths are reached from the top of the tree.
const maxOpenDirs = 256

// at returns how to reach the path p: a handle, p's name relative to it, and
// the handle's directory (to name p in errors as the tree would).
func (d *dirs) at(p string) (h *os.Root, name, dir string) {
	dir, name = path.Split(p)
	dir = path.Clean(dir)
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.handle(dir); h != nil {
		return h, name, dir
	}
	return d.root, p, "."
}

// file returns the open directory dir as a file, for a call that os.Root
// does not have, or nil.
func (d *dirs) file(dir string) *os.File {
	d.mu.Lock()
	defer d.mu.Unlock()
	if f, ok := d.files[dir]; ok {
		return f
	}
	var f *os.File
	if h := d.open[dir]; h != nil && len(d.files) < maxOpenDirs {
		if df, err := h.Open("."); err == nil {
			f = df
		}
	}
	d.files[dir] = f
	return f
}

// forget drops the directory p, which is gone, and the directories under it.
func (d *dirs) forget(p string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for q, f := range d.files {
		if q == p || strings.HasPrefix(q, p+"/") {
			if f != nil {
				f.Close()
			}
			delete(d.files, q)
		}
	}
	for q, h := range d.open {
		if q == p || strings.HasPrefix(q, p+"/") {
			if h != nil {
				h.Close()
			}
			delete(d.open, q)
		}
	}
	for q := range d.seen {
		if q == p || strings.HasPrefix(q, p+"/") {
			delete(d.seen, q)
		}
	}
}

// close closes every handle but the tree's own.
func (d *dirs) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.files {
		if f != nil {
			f.Close()
		}
	}
	clear(d.files)
	for q, h := range d.open {
		if q != "." && h != nil {
			h.Close()
		}
	}
	clear(d.open)
}

// treePath names, in an error of a call on the handle of dir about names,
// each of the names by its path from the top of the tree, as the same call
// on the tree would.
func treePath(err error, dir string, names ...string) error {
	if dir == "." {
		return err
	}
	full := func(s string) string {
		if slices.Contains(names, s) {
			return path.Join(dir, s)
		}
		return s
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		pe.Path = full(pe.Path)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		le.Old, le.New = full(le.Old), full(le.New)
	}
	return err
}

// state is the tree as the patches applied so far leave it, in memory: the
// changed paths over the original tree (the disk, or a tree in memory).
type state struct {
	disk    base
	changes map[string]*node
}

// base is the tree a state starts from: what each path holds (get, read once
// per path), and what was read of a path so far (node, nil if not read).
type base interface {
	get(p string) (*node, error)
	node(p string) *node
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
		from := s.disk.node(p)
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
	dirs    *dirs
	known   map[string]bool // directories known to exist
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

func newWriter(root *os.Root, dirs *dirs) *writer {
	return &writer{root: root, dirs: dirs, known: map[string]bool{}}
}

func (w *writer) apply(ops []writeOp) error {
	if err := w.run(ops); err != nil {
		if rerr := w.rollback(); rerr != nil {
			return fmt.Errorf("%w; rollback failed, the tree is not as it was: %w", err, rerr)
		}
		return err
	}
	return nil
}

// run does ops in order, as far as the first failure, whose error it returns.
// A run of writes is done a few directories at a time (see writeBatch); what
// it leaves and the error it returns are those of doing it op by op.
func (w *writer) run(ops []writeOp) error {
	for i := 0; i < len(ops); {
		if ops[i].to.kind == absent {
			if err := w.remove(ops[i]); err != nil {
				return err
			}
			i++
			continue
		}
		j := i
		for j < len(ops) && ops[j].to.kind != absent {
			j++
		}
		if err := w.writeBatch(ops[i:j]); err != nil {
			return err
		}
		i = j
	}
	return nil
}

func (w *writer) remove(op writeOp) error {
	h, name, at := w.dirs.at(op.path)
	if err := h.Remove(name); err != nil {
		return fmt.Errorf("remove %s: %w", op.path, treePath(err, at, name))
	}
	w.journal = append(w.journal, undo{kind: undoFile, path: op.path, node: op.from})
	// Like git apply: a directory the removal left empty goes too.
	for dir := path.Dir(op.path); dir != "."; dir = path.Dir(dir) {
		h, name, _ := w.dirs.at(dir)
		if h.Remove(name) != nil {
			break
		}
		w.dirs.forget(dir)
		delete(w.known, dir)
		w.journal = append(w.journal, undo{kind: undoPruned, path: dir})
	}
	return nil
}

// writeJob is one file write, with the directory handle it goes through.
type writeJob struct {
	op       writeOp
	h        *os.Root
	name, at string
	swap     *os.File // see writeFile
	index    int
}

// job prepares the write of op; the directory must be there.
func (w *writer) job(op writeOp, index int) writeJob {
	h, name, at := w.dirs.at(op.path)
	j := writeJob{op: op, h: h, name: name, at: at, index: index}
	if canExchange && op.from.kind == regular && !strings.Contains(name, "/") {
		j.swap = w.dirs.file(at)
	}
	return j
}

// writeBatch writes files: first the directories they need, in order, then
// the files, the files of one directory in order and several directories at
// once. Creating a file is the costly part of a write on many file systems,
// and creations in different directories do not wait on each other.
//
// Done op by op, the batch would stop at its first failure: an error making
// the directory of one file stops before that file, after the files before
// it. So the files before the first directory error are written, and the
// error returned is that of the first file (in op order) that failed, else
// the directory error. A write depends only on its own directory, so it fares
// the same in either order but for one case: a directory that a later file
// needs where an earlier file puts its temporary file. A batch where that can
// happen is written op by op.
func (w *writer) writeBatch(ops []writeOp) error {
	if tmpInTheWay(ops) {
		for _, op := range ops {
			if err := w.mkdirs(path.Dir(op.path)); err != nil {
				return err
			}
			if err := w.write(w.job(op, 0)); err != nil {
				return err
			}
		}
		return nil
	}
	jobs := make([]writeJob, 0, len(ops))
	var dirErr error
	for i, op := range ops {
		if err := w.mkdirs(path.Dir(op.path)); err != nil {
			dirErr = err
			break
		}
		jobs = append(jobs, w.job(op, i))
	}
	if err := w.writeJobs(jobs); err != nil {
		return err
	}
	return dirErr
}

// tmpInTheWay says whether the temporary file of a write is a directory
// above another write.
func tmpInTheWay(ops []writeOp) bool {
	dirs := map[string]bool{}
	for _, op := range ops {
		for d := path.Dir(op.path); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, op := range ops {
		if dirs[tmpName(op.path)] {
			return true
		}
	}
	return false
}

func (w *writer) write(j writeJob) error {
	done, err := writeFile(j.h, j.at, j.name, j.op.to, j.swap)
	if done {
		w.journal = append(w.journal, undo{kind: undoFile, path: j.op.path, node: j.op.from})
	}
	return err
}

// writeJobs writes the jobs (in op order), those of one directory in order
// and, on as many workers as there are processors, several directories at
// once. It returns the error of the first job in op order that failed; a job
// after a failed one may be left undone.
func (w *writer) writeJobs(jobs []writeJob) error {
	var groups [][]writeJob
	at := map[string]int{}
	for _, j := range jobs {
		g, ok := at[j.at]
		if !ok {
			g = len(groups)
			at[j.at] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], j)
	}
	workers := min(runtime.GOMAXPROCS(0), len(groups), maxWriters)
	if workers <= 1 {
		for _, j := range jobs {
			if err := w.write(j); err != nil {
				return err
			}
		}
		return nil
	}
	var (
		mu      sync.Mutex
		next    int
		failed  = len(jobs) // index of the first failed job
		failErr error
		wg      sync.WaitGroup
	)
	// take returns the next group to write, or nil.
	take := func() []writeJob {
		mu.Lock()
		defer mu.Unlock()
		if next == len(groups) {
			return nil
		}
		next++
		return groups[next-1]
	}
	for range workers {
		wg.Go(func() {
			for g := take(); g != nil; g = take() {
				for _, j := range g {
					mu.Lock()
					skip := j.index > failed
					mu.Unlock()
					if skip {
						break
					}
					done, err := writeFile(j.h, j.at, j.name, j.op.to, j.swap)
					mu.Lock()
					if done {
						w.journal = append(w.journal, undo{kind: undoFile, path: j.op.path, node: j.op.from})
					}
					if err != nil && j.index < failed {
						failed, failErr = j.index, err
					}
					mu.Unlock()
					if err != nil {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	return failErr
}

// maxWriters bounds the files written at once.
const maxWriters = 8

// mkdirs makes the missing directories of dir, recording each.
func (w *writer) mkdirs(dir string) error {
	if dir == "." || w.known[dir] {
		return nil
	}
	h, name, at := w.dirs.at(dir)
	if fi, err := h.Lstat(name); err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("create directory %s: a non-directory is in the way", dir)
		}
		w.dirs.saw(dir, fi)
		w.known[dir] = true
		return nil
	}
	if err := w.mkdirs(path.Dir(dir)); err != nil {
		return err
	}
	// The parent may be new: look up its handle again.
	h, name, at = w.dirs.at(dir)
	if err := h.Mkdir(name, 0o755); err != nil {
		return fmt.Errorf("create directory %s: %w", dir, treePath(err, at, name))
	}
	w.journal = append(w.journal, undo{kind: undoMkdir, path: dir})
	if fi, err := h.Lstat(name); err == nil && fi.IsDir() {
		w.dirs.saw(dir, fi)
	}
	w.known[dir] = true
	return nil
}

// tmpName is the temporary file that a write of p goes through.
func tmpName(p string) string {
	return path.Join(path.Dir(p), "."+path.Base(p)+".epbuild-tmp")
}

// writeFile replaces the file name of the directory handle h (the tree's
// directory dir) with n through a temporary file in the same directory, so
// that the file never holds half its content, and says whether it did: it
// leaves the file as it was when it fails, but for the one case said below.
//
// The temporary file takes the file's place by a rename, or, given swap (the
// directory, where name is a regular file), by an exchange of the two names
// in one step, after which the old file goes. A rename over a file makes some
// file systems (ext4) write the new file's data out at once; an exchange does
// not. Should the old file then be something else than a regular file (the
// tree changed since it was read) or not go, the exchange is undone and the
// rename done instead; should that undoing fail, the file holds the new
// content, and writeFile says so with the error.
func writeFile(h *os.Root, dir, name string, n *node, swap *os.File) (bool, error) {
	p := path.Join(dir, name)
	tmp := tmpName(name)
	f, err := h.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, n.perm)
	if err != nil {
		return false, fmt.Errorf("write %s: %w", p, treePath(err, dir, tmp))
	}
	_, werr := f.WriteString(n.data)
	// Chmod: OpenFile's mode is cut by the umask.
	merr := f.Chmod(n.perm)
	cerr := f.Close()
	if err := errors.Join(werr, merr, cerr); err != nil {
		_ = h.Remove(tmp)
		return false, fmt.Errorf("write %s: %w", p, err)
	}
	if swap != nil && exchange(swap, tmp, name) == nil {
		// tmp is now the old file.
		if fi, err := h.Lstat(tmp); err == nil && fi.Mode().IsRegular() && h.Remove(tmp) == nil {
			return true, nil
		}
		if err := exchange(swap, tmp, name); err != nil {
			return true, fmt.Errorf("write %s: %w", p, treePath(err, dir, tmp, name))
		}
	}
	if err := h.Rename(tmp, name); err != nil {
		_ = h.Remove(tmp)
		return false, fmt.Errorf("write %s: %w", p, treePath(err, dir, tmp, name))
	}
	return true, nil
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
			if _, err := writeFile(w.root, ".", u.path, u.node, nil); err != nil {
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
