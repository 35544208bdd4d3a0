package source

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/source/gitobj"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Repository reads a repository with its history in place (a mirror's bare
// repository): commits, refs, and the files of any commit straight from its
// object store, nothing checked out. The cache holds only pinned commits, so
// history comes from a mirror.
type Repository struct {
	dir  string
	db   *gitobj.DB
	refs *filesystem.Storage
}

// OpenRepository opens the git directory dir (a bare repository).
func OpenRepository(dir string) (*Repository, error) {
	if _, err := os.Stat(filepath.Join(dir, "objects")); err != nil {
		return nil, fetchErr(err, "open repository %s", dir)
	}
	db, err := gitobj.Open(filepath.Join(dir, "objects"))
	if err != nil {
		return nil, fetchErr(err, "open repository %s", dir)
	}
	return &Repository{dir: dir, db: db, refs: openStorage(dir)}, nil
}

// OpenHistory opens the mirror's repository of url, with its history.
func (f *Fetcher) OpenHistory(url string) (*Repository, error) {
	key, err := RepoKey(url)
	if err != nil {
		return nil, err
	}
	if f.mirror == "" {
		// a flag to give, not a fetch that failed
		return nil, badPin(nil, "history of %s: the cache holds only pinned commits; give a mirror (--mirror DIR or EPBUILD_MIRROR) holding the repository with its history", url)
	}
	dir := f.mirrorDir(key)
	if _, err := os.Stat(filepath.Join(dir, "objects")); err != nil {
		return nil, fetchErr(nil, "history of %s: no repository %s in the mirror", url, dir)
	}
	return OpenRepository(dir)
}

// Dir is the repository's git directory.
func (r *Repository) Dir() string { return r.dir }

// Close releases the repository's files.
func (r *Repository) Close() error {
	r.refs.Close()
	return r.db.Close()
}

// Resolve turns a revision into a commit id: a full 40-hex id, HEAD, a tag or
// branch name, or a full ref (refs/pull/466/head). Annotated tags are peeled.
func (r *Repository) Resolve(rev string) (string, error) {
	if len(rev) == 40 && hexRE.MatchString(rev) {
		h := plumbing.NewHash(strings.ToLower(rev))
		if !r.db.Has(h) {
			return "", fetchErr(nil, "commit %s is not in %s", h, r.dir)
		}
		return h.String(), nil
	}
	names := candidates(rev)
	if rev == "HEAD" {
		names = []plumbing.ReferenceName{plumbing.HEAD}
	}
	for _, name := range names {
		ref, err := storer.ResolveReference(r.refs, name)
		if err != nil {
			continue
		}
		h, err := peel(r.db, ref.Hash())
		if err != nil {
			return "", fetchErr(err, "resolve %s in %s", rev, r.dir)
		}
		return h.String(), nil
	}
	if hexRE.MatchString(rev) {
		return "", badPin(nil, "%q is a short commit id: give a full 40-hex commit, a tag or a branch", rev)
	}
	return "", badPin(nil, "%q is neither a commit, a tag nor a branch of %s", rev, r.dir)
}

// Tag is a tag and the commit it names.
type Tag struct {
	Name   string
	Commit string
}

// Tags lists the repository's tags that name commits, peeled, in name order.
func (r *Repository) Tags() ([]Tag, error) {
	it, err := r.refs.IterReferences()
	if err != nil {
		return nil, fetchErr(err, "list the tags of %s", r.dir)
	}
	defer it.Close()
	var out []Tag
	err = it.ForEach(func(ref *plumbing.Reference) error {
		if !ref.Name().IsTag() || ref.Type() != plumbing.HashReference {
			return nil
		}
		h, err := peel(r.db, ref.Hash())
		if err != nil {
			return nil // a tag whose object is missing names nothing here
		}
		if t, _, err := r.db.Reader().Read(h); err != nil || t != plumbing.CommitObject {
			return nil
		}
		out = append(out, Tag{Name: ref.Name().Short(), Commit: h.String()})
		return nil
	})
	if err != nil {
		return nil, fetchErr(err, "list the tags of %s", r.dir)
	}
	return out, nil
}

// Commit is what drift needs of a commit.
type Commit struct {
	ID      string
	Tree    string
	Parents []string
	// Time is the committer time.
	Time    time.Time
	Subject string
}

// ErrNoObject says that an object is not in the repository (a shallow
// repository's history ends there).
var ErrNoObject = errors.New("object not in the repository")

// Reader reads commits, trees and blobs; one goroutine uses one Reader.
type Reader struct {
	r     *gitobj.Reader
	trees map[plumbing.Hash][]gitobj.TreeEntry
}

// Reader returns a new Reader over the repository.
func (r *Repository) Reader() *Reader {
	return &Reader{r: r.db.Reader(), trees: map[plumbing.Hash][]gitobj.TreeEntry{}}
}

func (rd *Reader) read(h plumbing.Hash, want plumbing.ObjectType) ([]byte, error) {
	if !rd.r.DB().Has(h) {
		return nil, fmt.Errorf("%s %s: %w", want, h, ErrNoObject)
	}
	t, data, err := rd.r.Read(h)
	if err != nil {
		return nil, fmt.Errorf("read %s %s: %w", want, h, err)
	}
	if t != want {
		return nil, fmt.Errorf("%s is a %s, not a %s", h, t, want)
	}
	return data, nil
}

// Commit reads the commit id.
func (rd *Reader) Commit(id string) (Commit, error) {
	data, err := rd.read(plumbing.NewHash(id), plumbing.CommitObject)
	if err != nil {
		return Commit{}, err
	}
	c := Commit{ID: id}
	head, msg, _ := bytes.Cut(data, []byte("\n\n"))
	for _, l := range strings.Split(string(head), "\n") {
		k, v, _ := strings.Cut(l, " ")
		switch k {
		case "tree":
			c.Tree = v
		case "parent":
			c.Parents = append(c.Parents, v)
		case "committer":
			// Name <email> 1700000000 +0800
			f := strings.Fields(v)
			if len(f) >= 2 {
				if sec, err := strconv.ParseInt(f[len(f)-2], 10, 64); err == nil {
					c.Time = time.Unix(sec, 0).In(zone(f[len(f)-1]))
				}
			}
		}
	}
	if c.Tree == "" {
		return Commit{}, fmt.Errorf("commit %s: malformed: no tree", id)
	}
	c.Subject, _, _ = strings.Cut(strings.TrimSpace(string(msg)), "\n")
	return c, nil
}

// zone turns git's +0800 into a fixed zone.
func zone(s string) *time.Location {
	if len(s) != 5 || (s[0] != '+' && s[0] != '-') {
		return time.UTC
	}
	h, err1 := strconv.Atoi(s[1:3])
	m, err2 := strconv.Atoi(s[3:])
	if err1 != nil || err2 != nil {
		return time.UTC
	}
	off := (h*60 + m) * 60
	if s[0] == '-' {
		off = -off
	}
	return time.FixedZone(s, off)
}

// EntryKind is what a path of a commit holds.
type EntryKind uint8

// The entry kinds.
const (
	EntryNone EntryKind = iota
	EntryFile
	EntryExec
	EntryDir
	EntrySymlink
	EntrySubmodule
)

// Entry is one path of a commit's tree.
type Entry struct {
	Kind EntryKind
	// ID is the object the path names: a blob, a tree, or a submodule's commit.
	ID string
}

// Lookup finds the slash-separated path p in the tree id (a commit's tree),
// reading only the trees on the way. Trees read are kept for the next lookups.
func (rd *Reader) Lookup(tree, p string) (Entry, error) {
	h := plumbing.NewHash(tree)
	if p == "" || p == "." {
		return Entry{Kind: EntryDir, ID: tree}, nil
	}
	parts := strings.Split(p, "/")
	for i, name := range parts {
		entries, err := rd.tree(h)
		if err != nil {
			return Entry{}, err
		}
		var found *gitobj.TreeEntry
		for j := range entries {
			if entries[j].Name == name {
				found = &entries[j]
				break
			}
		}
		if found == nil {
			return Entry{Kind: EntryNone}, nil
		}
		e := Entry{ID: found.Hash.String()}
		switch found.Mode {
		case filemode.Dir:
			e.Kind = EntryDir
		case filemode.Regular, filemode.Deprecated:
			e.Kind = EntryFile
		case filemode.Executable:
			e.Kind = EntryExec
		case filemode.Symlink:
			e.Kind = EntrySymlink
		case filemode.Submodule:
			e.Kind = EntrySubmodule
		default:
			return Entry{}, fmt.Errorf("tree %s: %s has mode %s", h, name, found.Mode)
		}
		if i == len(parts)-1 {
			return e, nil
		}
		if e.Kind != EntryDir {
			return Entry{Kind: EntryNone}, nil
		}
		h = found.Hash
	}
	return Entry{Kind: EntryNone}, nil
}

func (rd *Reader) tree(h plumbing.Hash) ([]gitobj.TreeEntry, error) {
	if t, ok := rd.trees[h]; ok {
		return t, nil
	}
	data, err := rd.read(h, plumbing.TreeObject)
	if err != nil {
		return nil, err
	}
	t, err := gitobj.ParseTree(data)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", h, err)
	}
	rd.trees[h] = t
	return t, nil
}

// Blob returns the content of the blob id (a copy the caller owns).
func (rd *Reader) Blob(id string) ([]byte, error) {
	data, err := rd.read(plumbing.NewHash(id), plumbing.BlobObject)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(data), nil
}

// BlobSize returns the size of the blob id, read from its headers alone: a caller that
// bounds what it holds in memory refuses a huge blob before reading it.
func (rd *Reader) BlobSize(id string) (int64, error) {
	h := plumbing.NewHash(id)
	if !rd.r.DB().Has(h) {
		return 0, fmt.Errorf("blob %s: %w", h, ErrNoObject)
	}
	n, err := rd.r.Size(h)
	if err != nil {
		return 0, fmt.Errorf("read the size of blob %s: %w", h, err)
	}
	return n, nil
}

// Walk calls fn for every file of the tree id (path, entry), in tree order,
// directories first entered as they come; fn returning false stops the walk.
func (rd *Reader) Walk(tree string, fn func(p string, e Entry) bool) error {
	var walk func(h plumbing.Hash, prefix string) (bool, error)
	walk = func(h plumbing.Hash, prefix string) (bool, error) {
		entries, err := rd.tree(h)
		if err != nil {
			return false, err
		}
		for _, te := range entries {
			p := prefix + te.Name
			if te.Mode == filemode.Dir {
				more, err := walk(te.Hash, p+"/")
				if err != nil || !more {
					return more, err
				}
				continue
			}
			k := EntryFile
			switch te.Mode {
			case filemode.Executable:
				k = EntryExec
			case filemode.Symlink:
				k = EntrySymlink
			case filemode.Submodule:
				k = EntrySubmodule
			}
			if !fn(p, Entry{Kind: k, ID: te.Hash.String()}) {
				return false, nil
			}
		}
		return true, nil
	}
	_, err := walk(plumbing.NewHash(tree), "")
	return err
}
