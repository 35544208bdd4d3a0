package source

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/source/dirhandle"
	"github.com/epbuild/epbuild/builder/source/gitobj"
)

// CheckoutGit makes dest a git checkout of the pinned commit: a .git directory with the
// commit's objects, HEAD detached at the commit, the tree written out and an index that
// matches it (git status is clean, git rev-parse HEAD prints the commit). dest must not
// exist; it appears complete or not at all.
func (f *Fetcher) CheckoutGit(ctx context.Context, g Git, dest string) (err error) {
	p, err := parseGit(g)
	if err != nil {
		return err
	}
	dest, err = filepath.Abs(dest)
	if err != nil {
		return fmt.Errorf("checkout %s: %w", p, err)
	}
	if _, err := os.Lstat(dest); err == nil {
		return fmt.Errorf("checkout %s into %s: it already exists: remove it or choose another workspace", p, dest)
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return fmt.Errorf("checkout %s into %s: %w", p, dest, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-")
	if err != nil {
		return fmt.Errorf("checkout %s into %s: %w", p, dest, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	gitDir := filepath.Join(tmp, ".git")
	w, err := f.linkObjects(ctx, p, gitDir, tmp)
	if err != nil {
		return err
	}
	if w != nil {
		err = w.writeIndex(gitDir)
	} else {
		err = writeWorktree(ctx, gitDir, tmp, p.commit)
	}
	if err != nil {
		return fmt.Errorf("checkout %s into %s: %w", p, dest, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return fmt.Errorf("checkout %s into %s: %w", p, dest, err)
	}
	return nil
}

// linkObjects fetches p if needed and, holding the cache lock, gives gitDir the cache's
// packs (hard links: packs never change; copies across file systems) and shallow list, so
// the workspace owns its objects and outlives a cache gc. A fetch from a mirror writes
// the tree into root as it copies (see copyCheckout) and returns it; nil: the tree is
// still to be written from the objects.
func (f *Fetcher) linkObjects(ctx context.Context, p *gitPin, gitDir, root string) (*worktree, error) {
	unlock, err := f.cache.Lock(ctx, cache.KindGit, p.key)
	if err != nil {
		return nil, fetchErr(err, "checkout %s", p)
	}
	defer unlock()
	w, err := f.fetchGitInto(ctx, p, root)
	if err != nil {
		return nil, err
	}
	src := f.cache.GitDir(p.key)
	// HEAD, objects and refs make a git directory; git makes the rest as it needs it.
	for _, d := range []string{filepath.Join(gitDir, "objects", "pack"), filepath.Join(gitDir, "refs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("checkout %s: %w", p, err)
		}
	}
	files := map[string]string{
		"HEAD":   p.commit.String() + "\n",
		"config": "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(gitDir, name), []byte(content), 0o644); err != nil {
			return nil, fmt.Errorf("checkout %s: %w", p, err)
		}
	}
	des, err := os.ReadDir(filepath.Join(src, "objects", "pack"))
	if err != nil {
		return nil, fmt.Errorf("checkout %s: %w", p, err)
	}
	for _, d := range des {
		n := d.Name()
		if !strings.HasPrefix(n, "pack-") || !(strings.HasSuffix(n, ".pack") || strings.HasSuffix(n, ".idx")) {
			continue
		}
		from, to := filepath.Join(src, "objects", "pack", n), filepath.Join(gitDir, "objects", "pack", n)
		if err := os.Link(from, to); err != nil {
			if err := copyFile(from, to); err != nil {
				return nil, fmt.Errorf("checkout %s: copy %s: %w", p, from, err)
			}
		}
	}
	// The workspace appears by one rename at the end: its files need no fsync.
	if b, err := os.ReadFile(filepath.Join(src, "shallow")); err == nil {
		if err := os.WriteFile(filepath.Join(gitDir, "shallow"), b, 0o644); err != nil {
			return nil, fmt.Errorf("checkout %s: %w", p, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("checkout %s: %w", p, err)
	}
	return w, nil
}

// writeWorktree writes commit's tree into root and the matching index into gitDir.
func writeWorktree(ctx context.Context, gitDir, root string, commit plumbing.Hash) error {
	db, err := gitobj.Open(filepath.Join(gitDir, "objects"))
	if err != nil {
		return err
	}
	defer db.Close()
	w, err := planWorktree(ctx, db.Reader(), root, commit)
	if err != nil {
		return err
	}
	if err := w.write(ctx, func() blobSource { return dbSource{db.Reader()} }); err != nil {
		return err
	}
	return w.writeIndex(gitDir)
}

// worktree is a commit's tree as a checkout writes it: its directories, each with its
// files, and the index entries, filled in as the files are written.
type worktree struct {
	top     *wtDir
	entries []*index.Entry
	dirs    int
	trees   []plumbing.Hash // every tree, each once, parents first
	blobs   int             // distinct blobs
}

// planWorktree reads the trees of commit (a bad tree fails before anything is written)
// and plans the checkout into root.
func planWorktree(ctx context.Context, r *gitobj.Reader, root string, commit plumbing.Hash) (*worktree, error) {
	t, data, err := r.Read(commit)
	if err == nil && t != plumbing.CommitObject {
		err = fmt.Errorf("a %s, not a commit", t)
	}
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", commit, err)
	}
	treeHash, err := gitobj.CommitTree(data)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", commit, err)
	}
	w := &worktree{top: &wtDir{abs: root}, dirs: 1}
	seenTree := map[plumbing.Hash]bool{}
	seenBlob := map[plumbing.Hash]bool{}
	var walk func(h plumbing.Hash, d *wtDir) error
	walk = func(h plumbing.Hash, d *wtDir) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !seenTree[h] {
			seenTree[h] = true
			w.trees = append(w.trees, h)
		}
		t, data, err := r.Read(h)
		if err == nil && t != plumbing.TreeObject {
			err = fmt.Errorf("a %s, not a tree", t)
		}
		if err != nil {
			return fmt.Errorf("read tree %s of %q: %w", h, d.rel, err)
		}
		es, err := gitobj.ParseTree(data)
		if err != nil {
			return fmt.Errorf("read tree %s of %q: %w", h, d.rel, err)
		}
		for _, e := range es {
			// A tree is data from upstream: refuse names that would leave the tree or touch .git.
			if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") ||
				strings.EqualFold(e.Name, ".git") {
				return fmt.Errorf("tree %s: refusing entry %q in %q", h, e.Name, d.rel)
			}
			rel := path.Join(d.rel, e.Name)
			ie := &index.Entry{Name: rel, Hash: e.Hash, Mode: e.Mode}
			switch e.Mode {
			case filemode.Dir:
				sub := &wtDir{rel: rel, abs: filepath.Join(d.abs, e.Name), name: e.Name}
				d.subdirs = append(d.subdirs, sub)
				w.dirs++
				if err := walk(e.Hash, sub); err != nil {
					return err
				}
				continue
			case filemode.Regular, filemode.Deprecated:
				ie.Mode = filemode.Regular
			case filemode.Executable, filemode.Symlink, filemode.Submodule:
			default:
				return fmt.Errorf("tree %s: entry %q has unknown mode %o", h, rel, e.Mode)
			}
			if e.Mode != filemode.Submodule && !seenBlob[e.Hash] {
				seenBlob[e.Hash] = true
				w.blobs++
			}
			d.items = append(d.items, wtItem{name: e.Name, entry: ie})
			w.entries = append(w.entries, ie)
		}
		return nil
	}
	if err := walk(treeHash, w.top); err != nil {
		return nil, err
	}
	return w, nil
}

// write writes the planned tree, reading blobs through sources made by newSource (one per
// worker). Workers each take a whole directory at a time: make its subdirectories and
// hand them on, and write its files. Creating files is the slow part of a checkout on a
// busy file system, and the kernel serialises creations in one directory (its inode
// lock), not across directories: workers that shared out a large directory spent their
// time spinning on that lock (6.8% of a checkout's CPU on the benchmark's tree, and 20 to
// 40% more wall time than a directory per worker).
func (w *worktree) write(ctx context.Context, newSource func() blobSource) error {
	wr := &wtWriter{queue: make(chan *wtDir, w.dirs)}
	wr.push(w.top)
	go func() {
		wr.pending.Wait()
		close(wr.queue)
	}()
	var wg sync.WaitGroup
	for range checkoutWorkers {
		wg.Go(func() {
			src := newSource()
			for d := range wr.queue {
				if wr.failed.Load() == nil {
					if err := ctx.Err(); err != nil {
						wr.fail(err)
					} else if err := wr.run(src, d); err != nil {
						wr.fail(err)
					}
				}
				wr.pending.Done()
			}
		})
	}
	wg.Wait()
	if err := wr.failed.Load(); err != nil {
		return *err
	}
	return nil
}

// writeIndex writes the index of the written tree into gitDir.
func (w *worktree) writeIndex(gitDir string) error {
	f, err := os.Create(filepath.Join(gitDir, "index"))
	if err != nil {
		return err
	}
	bw := bufio.NewWriter(f)
	err = index.NewEncoder(bw).Encode(&index.Index{Version: 2, Entries: w.entries})
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the index: %w", err)
	}
	return nil
}

// blobSource gives a checkout the content of its blobs.
type blobSource interface {
	// blob returns the content of h: whole (valid until the next call), or, when it is
	// large, as a stream.
	blob(h plumbing.Hash) ([]byte, io.Reader, error)
}

// dbSource reads blobs from an object database.
type dbSource struct{ r *gitobj.Reader }

func (s dbSource) blob(h plumbing.Hash) ([]byte, io.Reader, error) {
	if size, ok := s.r.WholeSize(h); ok && size > gitobj.InlineLimit {
		t, _, rd, err := s.r.Stream(h)
		if err == nil && t != plumbing.BlobObject {
			err = fmt.Errorf("object %s is a %s, not a blob", h, t)
		}
		return nil, rd, err
	}
	data, err := readBlob(s.r, h)
	return data, nil, err
}

// checkoutWorkers is how many goroutines write a checkout.
const checkoutWorkers = 4

// wtDir is a directory of a checkout with what goes in it.
type wtDir struct {
	rel, abs, name string
	items          []wtItem
	subdirs        []*wtDir
}

// wtItem is a file, symlink or submodule of a checkout (name, in its directory); its
// index entry gets the stat data.
type wtItem struct {
	name  string
	entry *index.Entry
}

type wtWriter struct {
	queue   chan *wtDir // holds every directory at once: pushing never blocks
	pending sync.WaitGroup
	failed  atomic.Pointer[error]
}

func (w *wtWriter) push(d *wtDir) {
	w.pending.Add(1)
	w.queue <- d
}

func (w *wtWriter) fail(err error) { w.failed.CompareAndSwap(nil, &err) }

// run fills the directory d, which its parent's worker made.
func (w *wtWriter) run(src blobSource, d *wtDir) error {
	dh, err := dirhandle.Open(d.abs)
	if err != nil {
		return err
	}
	defer dh.Close()
	for _, s := range d.subdirs {
		if err := dh.Mkdir(s.name); err != nil {
			return fmt.Errorf("%s: %w", s.rel, err)
		}
		w.push(s)
	}
	for _, it := range d.items {
		if err := writeItem(src, dh, it); err != nil {
			return fmt.Errorf("%s: %w", it.entry.Name, err)
		}
	}
	return nil
}

// writeItem writes one file, symlink or (empty, as git leaves one that is not
// initialised) submodule directory into d and fills its index entry.
func writeItem(src blobSource, d dirhandle.Dir, it wtItem) error {
	e := it.entry
	switch e.Mode {
	case filemode.Submodule:
		if err := d.Mkdir(it.name); err != nil {
			return err
		}
		return d.Lstat(it.name, e)
	case filemode.Symlink:
		target, rd, err := src.blob(e.Hash)
		if err == nil && rd != nil {
			err = fmt.Errorf("symlink target: blob %s is too large", e.Hash)
		}
		if err != nil {
			return err
		}
		return d.Symlink(string(target), it.name, e)
	}
	perm := uint32(0o644)
	if e.Mode == filemode.Executable {
		perm = 0o755
	}
	data, rd, err := src.blob(e.Hash)
	if err != nil {
		return err
	}
	return d.WriteFile(it.name, perm, data, rd, e)
}

func readBlob(r *gitobj.Reader, h plumbing.Hash) ([]byte, error) {
	t, data, err := r.Read(h)
	if err == nil && t != plumbing.BlobObject {
		err = fmt.Errorf("object %s is a %s, not a blob", h, t)
	}
	return data, err
}
