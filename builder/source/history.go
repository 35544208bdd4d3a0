package source

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/compat"
)

// History reads git history from the repositories epbuild has at hand: a mirror laid out
// by URL (a full clone decides any ancestry question) and the cache's repositories (which
// hold the pinned commits without their history, so they decide only what they reach).
// It answers the compatibility rules' commit conditions (compat.Ancestry) for commits the
// embedded history does not list, and names the tags that point at a commit.
type History struct {
	Mirror string       // "" for none
	Cache  *cache.Cache // nil for none
}

// History is the history of this fetcher's mirror and cache.
func (f *Fetcher) History() History { return History{Mirror: f.mirror, Cache: f.cache} }

// maxWalk bounds one ancestry walk: DeepEP has about 2,000 commits, NCCL and NVSHMEM fewer.
const maxWalk = 1 << 20

// repoDirs lists the bare repositories of a URL that exist, with what to call them.
func (h History) repoDirs(repo string) ([][2]string, error) {
	key, err := RepoKey(repo)
	if err != nil {
		return nil, err
	}
	var out [][2]string
	if h.Mirror != "" {
		out = append(out, [2]string{filepath.Join(h.Mirror, filepath.FromSlash(key)), "the mirror " + h.Mirror})
	}
	if h.Cache != nil {
		out = append(out, [2]string{h.Cache.GitDir(key), "the cache " + h.Cache.Dir()})
	}
	var have [][2]string
	for _, d := range out {
		if _, err := os.Stat(filepath.Join(d[0], "objects")); err == nil {
			have = append(have, d)
		}
	}
	return have, nil
}

// IsAncestor reports whether ancestor is commit or one of its ancestors, walking commit's
// parents in the mirror's repository, then the cache's. A commit a repository lacks, or a
// walk that meets the edge of what it holds (a shallow commit) without finding ancestor,
// is not decided there: ErrUnknownCommit, naming where it looked.
func (h History) IsAncestor(ctx context.Context, repo, ancestor, commit string) (bool, error) {
	dirs, err := h.repoDirs(repo)
	if err != nil {
		return false, &compat.UnknownCommitError{Repo: repo, Commit: commit, Source: err.Error()}
	}
	var where []string
	for _, d := range dirs {
		ok, err := isAncestorIn(ctx, d[0], ancestor, commit)
		if err == nil {
			return ok, nil
		}
		if !errors.Is(err, compat.ErrUnknownCommit) {
			return false, fmt.Errorf("%s: %w", d[1], err)
		}
		where = append(where, d[1]+" ("+err.Error()+")")
	}
	if len(where) == 0 {
		where = append(where, "no mirror or cache holds the repository")
	}
	return false, &compat.UnknownCommitError{Repo: repo, Commit: commit, Source: strings.Join(where, "; ")}
}

// errUndecided is a walk that could not decide in one repository.
type errUndecided string

func (e errUndecided) Error() string        { return string(e) }
func (e errUndecided) Is(target error) bool { return target == compat.ErrUnknownCommit }

func undecided(f string, a ...any) errUndecided { return errUndecided(fmt.Sprintf(f, a...)) }

func isAncestorIn(ctx context.Context, dir, ancestor, commit string) (bool, error) {
	a, c := plumbing.NewHash(ancestor), plumbing.NewHash(commit)
	if a.String() != ancestor || c.String() != commit {
		return false, undecided("not full commit ids: %s, %s", ancestor, commit)
	}
	st := openStorage(dir)
	defer st.Close()
	start, err := object.GetCommit(st, c)
	if err != nil {
		return false, undecided("commit %s is not there", commit[:12])
	}
	seen := map[plumbing.Hash]bool{c: true}
	queue := []*object.Commit{start}
	edge := false // a parent the repository does not hold: a shallow edge
	for len(queue) > 0 {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		if len(seen) > maxWalk {
			return false, undecided("more than %d commits to walk", maxWalk)
		}
		cur := queue[0]
		queue = queue[1:]
		if cur.Hash == a {
			return true, nil
		}
		for _, p := range cur.ParentHashes {
			if seen[p] {
				continue
			}
			seen[p] = true
			pc, err := object.GetCommit(st, p)
			if err != nil {
				edge = true
				continue
			}
			queue = append(queue, pc)
		}
	}
	if edge {
		return false, undecided("the history of %s ends before %s could be reached (a shallow copy)", commit[:12], ancestor[:12])
	}
	return false, nil
}

// TagsAt lists the tags (short names, "v3.4.5-0") that point at commit in the repositories
// of repo, annotated tags peeled; nil when none does or no repository is at hand.
func (h History) TagsAt(repo, commit string) []string {
	dirs, err := h.repoDirs(repo)
	if err != nil {
		return nil
	}
	want := plumbing.NewHash(commit)
	var out []string
	for _, d := range dirs {
		st := openStorage(d[0])
		refs, err := st.IterReferences()
		if err != nil {
			st.Close()
			continue
		}
		_ = refs.ForEach(func(r *plumbing.Reference) error {
			if !r.Name().IsTag() || r.Type() != plumbing.HashReference {
				return nil
			}
			h := r.Hash()
			if t, err := object.GetTag(st, h); err == nil {
				h = t.Target
			}
			if h == want {
				if name := r.Name().Short(); !slices.Contains(out, name) {
					out = append(out, name)
				}
			}
			return nil
		})
		st.Close()
	}
	return out
}
