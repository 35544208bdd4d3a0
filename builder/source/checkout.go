package source

import (
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
	"syscall"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/index"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"github.com/epbuild/epbuild/builder/cache"
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
	if err := f.linkObjects(ctx, p, gitDir); err != nil {
		return err
	}
	if err := writeWorktree(ctx, gitDir, tmp, p.commit); err != nil {
		return fmt.Errorf("checkout %s into %s: %w", p, dest, err)
	}
	if err := os.Rename(tmp, dest); err != nil {
		return fmt.Errorf("checkout %s into %s: %w", p, dest, err)
	}
	return nil
}

// linkObjects fetches p if needed and, holding the cache lock, gives gitDir the cache's
// packs (hard links: packs never change; copies across file systems) and shallow list, so
// the workspace owns its objects and outlives a cache gc.
func (f *Fetcher) linkObjects(ctx context.Context, p *gitPin, gitDir string) error {
	unlock, err := f.cache.Lock(ctx, cache.KindGit, p.key)
	if err != nil {
		return fetchErr(err, "checkout %s", p)
	}
	defer unlock()
	if err := f.fetchGitLocked(ctx, p); err != nil {
		return err
	}
	src := f.cache.GitDir(p.key)
	if err := writeBareSkeleton(gitDir); err != nil {
		return fmt.Errorf("checkout %s: %w", p, err)
	}
	files := map[string]string{
		"HEAD":   p.commit.String() + "\n",
		"config": "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(gitDir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("checkout %s: %w", p, err)
		}
	}
	des, err := os.ReadDir(filepath.Join(src, "objects", "pack"))
	if err != nil {
		return fmt.Errorf("checkout %s: %w", p, err)
	}
	for _, d := range des {
		n := d.Name()
		if !strings.HasPrefix(n, "pack-") || !(strings.HasSuffix(n, ".pack") || strings.HasSuffix(n, ".idx")) {
			continue
		}
		from, to := filepath.Join(src, "objects", "pack", n), filepath.Join(gitDir, "objects", "pack", n)
		if err := os.Link(from, to); err != nil {
			if err := copyFile(from, to); err != nil {
				return fmt.Errorf("checkout %s: copy %s: %w", p, from, err)
			}
		}
	}
	// The workspace appears by one rename at the end: its files need no fsync.
	if b, err := os.ReadFile(filepath.Join(src, "shallow")); err == nil {
		if err := os.WriteFile(filepath.Join(gitDir, "shallow"), b, 0o644); err != nil {
			return fmt.Errorf("checkout %s: %w", p, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkout %s: %w", p, err)
	}
	return nil
}

// writeWorktree writes commit's tree into root and the matching index into gitDir.
func writeWorktree(ctx context.Context, gitDir, root string, commit plumbing.Hash) error {
	st := openStorage(gitDir)
	defer st.Close()
	c, err := object.GetCommit(st, commit)
	if err != nil {
		return fmt.Errorf("read commit %s: %w", commit, err)
	}
	w := &treeWriter{st: st, root: root, jobs: make(chan fileJob, 64)}
	// Objects are read in this goroutine (go-git's storage is not safe for concurrent
	// use); creating files, the slow part on a busy file system, is spread over workers.
	var wg sync.WaitGroup
	errs := make([]error, checkoutWorkers)
	for i := 0; i < checkoutWorkers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := range w.jobs {
				if errs[i] == nil {
					errs[i] = j.write()
				}
			}
		}(i)
	}
	err = w.tree(ctx, c.TreeHash, "")
	close(w.jobs)
	wg.Wait()
	if err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(gitDir, "index"))
	if err != nil {
		return err
	}
	if err := index.NewEncoder(f).Encode(&index.Index{Version: 2, Entries: w.entries}); err != nil {
		f.Close()
		return fmt.Errorf("write the index: %w", err)
	}
	return f.Close()
}

// checkoutWorkers is how many goroutines create files in a checkout.
const checkoutWorkers = 4

// inlineLimit: blobs up to this size are read whole and handed to a worker; larger ones are
// streamed by the reading goroutine itself, to bound memory.
const inlineLimit = 4 << 20

type fileJob struct {
	abs   string
	rel   string
	perm  fs.FileMode
	data  []byte
	entry *index.Entry
}

func (j fileJob) write() error {
	f, err := os.OpenFile(j.abs, os.O_WRONLY|os.O_CREATE|os.O_EXCL, j.perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(j.data); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", j.rel, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", j.rel, err)
	}
	return statEntry(j.entry, j.abs)
}

type treeWriter struct {
	st      storer.EncodedObjectStorer
	root    string
	jobs    chan fileJob
	entries []*index.Entry
}

// tree writes the tree h at the slash path dir (relative to root).
func (w *treeWriter) tree(ctx context.Context, h plumbing.Hash, dir string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := object.GetTree(w.st, h)
	if err != nil {
		return fmt.Errorf("read tree %s of %q: %w", h, dir, err)
	}
	for _, e := range t.Entries {
		// A tree is data from upstream: refuse names that would leave the tree or touch .git.
		if e.Name == "" || e.Name == "." || e.Name == ".." || strings.ContainsAny(e.Name, "/\x00") ||
			strings.EqualFold(e.Name, ".git") {
			return fmt.Errorf("tree %s: refusing entry %q in %q", h, e.Name, dir)
		}
		rel := path.Join(dir, e.Name)
		abs := filepath.Join(w.root, filepath.FromSlash(rel))
		ie := &index.Entry{Name: rel, Hash: e.Hash, Mode: e.Mode}
		switch e.Mode {
		case filemode.Dir:
			if err := os.Mkdir(abs, 0o755); err != nil {
				return err
			}
			if err := w.tree(ctx, e.Hash, rel); err != nil {
				return err
			}
			continue
		case filemode.Submodule:
			// git leaves an empty directory for a submodule that is not initialised.
			if err := os.Mkdir(abs, 0o755); err != nil {
				return err
			}
		case filemode.Symlink:
			target, err := w.blob(e.Hash)
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			if err := os.Symlink(string(target), abs); err != nil {
				return err
			}
		case filemode.Regular, filemode.Executable, filemode.Deprecated:
			ie.Mode = filemode.Regular
			perm := fs.FileMode(0o644)
			if e.Mode == filemode.Executable {
				ie.Mode, perm = filemode.Executable, 0o755
			}
			w.entries = append(w.entries, ie)
			if err := w.file(e.Hash, fileJob{abs: abs, rel: rel, perm: perm, entry: ie}); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			continue
		default:
			return fmt.Errorf("tree %s: entry %q has unknown mode %o", h, rel, e.Mode)
		}
		if err := statEntry(ie, abs); err != nil {
			return err
		}
		w.entries = append(w.entries, ie)
	}
	return nil
}

func (w *treeWriter) blob(h plumbing.Hash) ([]byte, error) {
	o, err := w.st.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", h, err)
	}
	r, err := o.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// file hands a regular file to the workers, or writes a large one here.
func (w *treeWriter) file(h plumbing.Hash, j fileJob) error {
	o, err := w.st.EncodedObject(plumbing.BlobObject, h)
	if err != nil {
		return fmt.Errorf("blob %s: %w", h, err)
	}
	r, err := o.Reader()
	if err != nil {
		return err
	}
	defer r.Close()
	if o.Size() <= inlineLimit {
		if j.data, err = io.ReadAll(r); err != nil {
			return err
		}
		w.jobs <- j
		return nil
	}
	f, err := os.OpenFile(j.abs, os.O_WRONLY|os.O_CREATE|os.O_EXCL, j.perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return statEntry(j.entry, j.abs)
}

// statEntry fills the index's stat fields, so that git trusts the file without rehashing.
func statEntry(e *index.Entry, abs string) error {
	fi, err := os.Lstat(abs)
	if err != nil {
		return err
	}
	e.ModifiedAt = fi.ModTime()
	if e.Mode != filemode.Submodule {
		e.Size = uint32(fi.Size())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return errors.New("stat " + abs + ": no system stat")
	}
	fillStat(e, st)
	return nil
}
