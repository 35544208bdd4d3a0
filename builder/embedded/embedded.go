// Package embedded holds source code of our own that recipes build as components, and
// lays it out as a mirror of git repositories served at https://epbuild.invalid/<group>/<name>:
// the demo recipe's library and Python package (group demo) and the tools that recipes
// ship beside what they build, such as the NCCL net plugin transfer benchmark and the
// NVSHMEM smoke test (group tools). A recipe pins each repository by the commit this package makes, so these
// sources go through every stage (fetch, patch, build, check, package) like upstream
// code, on any machine, with no network.
package embedded

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
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

// Host is the URL host of the embedded repositories: a reserved name that never
// resolves, so such a source can only come from the embedded mirror.
const Host = "epbuild.invalid"

// Served reports whether a URL names an embedded repository (its host is Host).
func Served(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Host == Host
}

// Repo is one embedded repository: src/<Group>/<Name>, one commit tagged v<Version>.
type Repo struct {
	Group   string
	Name    string
	Version string
}

// Repos lists the embedded repositories. A repository's commit id depends on its files,
// group, name and version only; editing its files changes the id the recipes pin.
func Repos() []Repo {
	return []Repo{
		{Group: "demo", Name: "libdemo", Version: "1.0.0"},
		{Group: "demo", Name: "pydemo", Version: "1.0.0"},
		{Group: "tools", Name: "netbench", Version: "0.1.0"},
		{Group: "tools", Name: "nvshmem-smoke", Version: "0.1.0"},
	}
}

// Lookup returns the repository group/name.
func Lookup(group, name string) (Repo, bool) {
	for _, r := range Repos() {
		if r.Group == group && r.Name == name {
			return r, true
		}
	}
	return Repo{}, false
}

// Path is group/name, the repository's path under the host.
func (r Repo) Path() string { return r.Group + "/" + r.Name }

// Tag names the repository's single commit.
func (r Repo) Tag() string { return "v" + r.Version }

// URL is the recipe URL of the repository.
func (r Repo) URL() string { return URL(r.Group, r.Name) }

// URL is the recipe URL of an embedded repository.
func URL(group, name string) string { return "https://" + Host + "/" + group + "/" + name }

// commitTime is fixed so that the commit ids are the same on every machine.
var commitTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Materialize writes every embedded repository as a bare repository under
// dir/epbuild.invalid/<group>/<name>.git (the mirror layout) and returns the commit ids
// by group/name. The commits are deterministic: the same sources give the same ids
// everywhere.
func Materialize(dir string) (map[string]string, error) {
	ids := map[string]string{}
	for _, r := range Repos() {
		id, err := materialize(dir, r)
		if err != nil {
			return nil, fmt.Errorf("embedded repository %s: %w", r.Path(), err)
		}
		ids[r.Path()] = id.String()
	}
	return ids, nil
}

func materialize(dir string, r Repo) (plumbing.Hash, error) {
	gitDir := filepath.Join(dir, Host, r.Group, r.Name+".git")
	repo, err := git.PlainInit(gitDir, true)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	id, err := commit(repo.Storer, r)
	if err != nil {
		return plumbing.ZeroHash, err
	}
	for _, ref := range []plumbing.ReferenceName{plumbing.NewBranchReferenceName("main"), plumbing.NewTagReferenceName(r.Tag())} {
		if err := repo.Storer.SetReference(plumbing.NewHashReference(ref, id)); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName("main"))); err != nil {
		return plumbing.ZeroHash, err
	}
	return id, nil
}

// commit stores the embedded files of r as one commit. The author and message are
// those the demo repositories always had, so their ids (pinned by recipes/demo.yaml)
// did not change when the tools group joined.
func commit(st storage.Storer, r Repo) (plumbing.Hash, error) {
	tree, err := writeTree(st, path.Join("src", r.Group, r.Name))
	if err != nil {
		return plumbing.ZeroHash, err
	}
	sig := object.Signature{Name: "epbuild " + r.Group, Email: r.Group + "@" + Host, When: commitTime}
	c := &object.Commit{Author: sig, Committer: sig, Message: r.Name + " " + r.Version + "\n", TreeHash: tree}
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
		mode := filemode.Regular
		if strings.HasSuffix(e.Name(), ".sh") {
			mode = filemode.Executable // embed.FS keeps no modes; scripts are run directly
		}
		t.Entries = append(t.Entries, object.TreeEntry{Name: e.Name(), Mode: mode, Hash: h})
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

// Files returns the embedded files of repository group/name by path inside it.
func Files(group, name string) (map[string][]byte, error) {
	if _, ok := Lookup(group, name); !ok {
		return nil, fmt.Errorf("no embedded repository %s/%s", group, name)
	}
	out := map[string][]byte{}
	root := path.Join("src", group, name)
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

// WriteFiles writes the files of repository group/name under dir (scripts executable),
// for tests and for building a tool outside a recipe.
func WriteFiles(group, name, dir string) error {
	files, err := Files(group, name)
	if err != nil {
		return err
	}
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("write %s/%s: %w", group, name, err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(rel, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, b, mode); err != nil {
			return fmt.Errorf("write %s/%s: %w", group, name, err)
		}
	}
	return nil
}

// Ensure makes sure dir holds the materialized mirror (idempotent; atomic).
func Ensure(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, ".done")); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("embedded mirror: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".embedded-mirror-")
	if err != nil {
		return fmt.Errorf("embedded mirror: %w", err)
	}
	defer os.RemoveAll(tmp)
	if _, err := Materialize(tmp); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, ".done"), nil, 0o644); err != nil {
		return fmt.Errorf("embedded mirror: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, ".done")); serr == nil {
			return nil // another process made it first
		}
		return fmt.Errorf("embedded mirror: %w", err)
	}
	return nil
}

// Digest identifies the embedded sources and the repository list (for the materialized
// mirror's directory name).
func Digest() string {
	h := sha256.New()
	for _, r := range Repos() {
		fmt.Fprintf(h, "repo %s %s\n", r.Path(), r.Version)
	}
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
