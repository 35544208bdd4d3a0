// Package demo holds the sources of epbuild's offline demo recipe (a C library built
// with CMake and a Python package that loads it, our own code) and lays them out as a
// mirror of git repositories, so the demo goes through every stage (fetch, patch, build,
// check, package) on any machine, with no network.
package demo

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage"
)

//go:embed all:src
var src embed.FS

// Host is the URL host of the demo repositories: a reserved name that never resolves,
// so a demo source can only come from the embedded mirror.
const Host = "epbuild.invalid"

// Repos are the embedded repositories, by name.
var repoNames = []string{"libdemo", "pydemo"}

// Tag names the single commit of each repository.
const Tag = "v1.0.0"

// commitTime is fixed so that the commit ids are the same on every machine.
var commitTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// URL is the recipe URL of a demo repository.
func URL(name string) string { return "https://" + Host + "/demo/" + name }

// Materialize writes every demo repository as a bare repository under
// dir/epbuild.invalid/demo/<name>.git (the mirror layout) and returns the commit ids.
// The commits are deterministic: the same sources give the same ids everywhere.
func Materialize(dir string) (map[string]string, error) {
	ids := map[string]string{}
	for _, name := range repoNames {
		gitDir := filepath.Join(dir, Host, "demo", name+".git")
		repo, err := git.PlainInit(gitDir, true)
		if err != nil {
			return nil, fmt.Errorf("demo repository %s: %w", name, err)
		}
		id, err := commit(repo.Storer, name)
		if err != nil {
			return nil, fmt.Errorf("demo repository %s: %w", name, err)
		}
		for _, ref := range []plumbing.ReferenceName{plumbing.NewBranchReferenceName("main"), plumbing.NewTagReferenceName(Tag)} {
			if err := repo.Storer.SetReference(plumbing.NewHashReference(ref, id)); err != nil {
				return nil, fmt.Errorf("demo repository %s: %w", name, err)
			}
		}
		if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName("main"))); err != nil {
			return nil, fmt.Errorf("demo repository %s: %w", name, err)
		}
		ids[name] = id.String()
	}
	return ids, nil
}

// commit stores the embedded files of repository name as one commit.
func commit(st storage.Storer, name string) (plumbing.Hash, error) {
	root := path.Join("src", name)
	tree, err := writeTree(st, root)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	sig := object.Signature{Name: "epbuild demo", Email: "demo@" + Host, When: commitTime}
	c := &object.Commit{Author: sig, Committer: sig, Message: name + " 1.0.0\n", TreeHash: tree}
	obj := st.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(obj)
}

func writeTree(st storage.Storer, dir string) (plumbing.Hash, error) {
	ents, err := fs.ReadDir(src, dir)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	var t object.Tree
	for _, e := range ents {
		p := path.Join(dir, e.Name())
		if e.IsDir() {
			h, err := writeTree(st, p)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			t.Entries = append(t.Entries, object.TreeEntry{Name: e.Name(), Mode: filemode.Dir, Hash: h})
			continue
		}
		data, err := fs.ReadFile(src, p)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		obj := st.NewEncodedObject()
		obj.SetType(plumbing.BlobObject)
		w, err := obj.Writer()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if _, err := w.Write(data); err != nil {
			return plumbing.ZeroHash, err
		}
		if err := w.Close(); err != nil {
			return plumbing.ZeroHash, err
		}
		h, err := st.SetEncodedObject(obj)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		t.Entries = append(t.Entries, object.TreeEntry{Name: e.Name(), Mode: filemode.Regular, Hash: h})
	}
	// git orders tree entries by name, directories as if they ended in '/'
	sort.Slice(t.Entries, func(i, j int) bool { return treeKey(t.Entries[i]) < treeKey(t.Entries[j]) })
	obj := st.NewEncodedObject()
	if err := t.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return st.SetEncodedObject(obj)
}

func treeKey(e object.TreeEntry) string {
	if e.Mode == filemode.Dir {
		return e.Name + "/"
	}
	return e.Name
}

// Files lists the embedded files of a repository, for tests.
func Files(name string) (map[string][]byte, error) {
	out := map[string][]byte{}
	root := path.Join("src", name)
	err := fs.WalkDir(src, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(src, p)
		out[strings.TrimPrefix(p, root+"/")] = b
		return err
	})
	return out, err
}

// Ensure makes sure dir holds the materialized mirror (idempotent; atomic).
func Ensure(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, ".done")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("demo mirror: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".demo-mirror-")
	if err != nil {
		return fmt.Errorf("demo mirror: %w", err)
	}
	defer os.RemoveAll(tmp)
	if _, err := Materialize(tmp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".done"), nil, 0o644); err != nil {
		return fmt.Errorf("demo mirror: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ".done")); serr == nil {
			return nil // another process made it first
		}
		return fmt.Errorf("demo mirror: %w", err)
	}
	return nil
}

// Digest identifies the embedded sources (for the materialized mirror's directory name).
func Digest() string {
	h := sha256.New()
	_ = fs.WalkDir(src, "src", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(src, p)
		fmt.Fprintf(h, "%s %d\n", p, len(b))
		h.Write(b)
		return err
	})
	return hex.EncodeToString(h.Sum(nil))[:16]
}
