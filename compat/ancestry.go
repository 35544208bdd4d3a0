package compat

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Ancestry decides git ancestry: whether ancestor is commit or one of its ancestors in
// repo (a repository URL as recipes write it). Rules about commits ("DeepEP before
// 29d31c0") are decided this way, never by dates.
//
// An implementation that does not have a commit returns an error wrapping
// ErrUnknownCommit; the finding then says the rule could not be decided.
type Ancestry interface {
	IsAncestor(ctx context.Context, repo, ancestor, commit string) (bool, error)
}

// ErrUnknownCommit says that an ancestry source does not know a commit (or the repo).
var ErrUnknownCommit = errors.New("commit unknown to the ancestry source")

// UnknownCommitError names the commit an ancestry source does not have.
type UnknownCommitError struct {
	Repo, Commit, Source string
}

func (e *UnknownCommitError) Error() string {
	return fmt.Sprintf("%s: commit %s of %s is unknown", e.Source, e.Commit, e.Repo)
}

// Is makes errors.Is(err, ErrUnknownCommit) hold.
func (e *UnknownCommitError) Is(target error) bool { return target == ErrUnknownCommit }

// ChainAncestry asks each source in turn and answers with the first that knows both
// commits (the cache or mirror first, then the embedded history). Nil sources are skipped.
func ChainAncestry(sources ...Ancestry) Ancestry {
	var s chain
	for _, a := range sources {
		if a != nil {
			s = append(s, a)
		}
	}
	return s
}

type chain []Ancestry

func (c chain) IsAncestor(ctx context.Context, repo, ancestor, commit string) (bool, error) {
	var where []string
	for _, a := range c {
		ok, err := a.IsAncestor(ctx, repo, ancestor, commit)
		if err == nil {
			return ok, nil
		}
		var uc *UnknownCommitError
		switch {
		case errors.As(err, &uc):
			where = append(where, uc.Source)
		case errors.Is(err, ErrUnknownCommit):
			where = append(where, err.Error())
		default:
			return false, err
		}
	}
	if len(where) == 0 {
		where = append(where, "no ancestry source")
	}
	// one line: the finding's reasons quote it
	return false, &UnknownCommitError{Repo: repo, Commit: commit, Source: strings.Join(where, "; ")}
}

//go:embed history.yaml
var historyYAML []byte

// History is ancestry known without a clone: for a few upstream repositories, which of
// the commits that rules name (marks) each commit that recipes pin contains, as computed
// by `git merge-base --is-ancestor` on the upstream repository (TestUpstreamHistory
// checks it again against a mirror). It lets `epbuild compat check` decide the embedded
// recipes before anything is fetched; a commit it does not list is unknown.
type History struct {
	repos map[string]historyRepo
}

type historyRepo struct {
	marks    []string
	contains map[string][]string
}

// HistoryRepo is one repository of the history file.
type HistoryRepo struct {
	URL   string   `json:"url"`
	Marks []string `json:"marks"`
	// Commits maps a commit to the marks it contains (itself included when it is one).
	Commits map[string][]string `json:"commits"`
}

// LoadHistory reads the embedded history.
func LoadHistory() (*History, error) { return ParseHistory("compat/history.yaml", historyYAML) }

// ParseHistory decodes a history file strictly.
func ParseHistory(file string, data []byte) (*History, error) {
	var raw struct {
		Repos []HistoryRepo `json:"repos"`
	}
	d, err := decodeStrict(file, data, &raw)
	if err != nil {
		return nil, err
	}
	h := &History{repos: map[string]historyRepo{}}
	for i, r := range raw.Repos {
		p := fmt.Sprintf("$.repos[%d]", i)
		key := RepoKey(r.URL)
		if _, dup := h.repos[key]; dup {
			d.at(p+".url", "repository %s is listed twice", r.URL)
		}
		for j, m := range r.Marks {
			if !full40.MatchString(m) {
				d.at(fmt.Sprintf("%s.marks[%d]", p, j), "%q is not a full 40-hex commit id", m)
			}
		}
		for c, ms := range r.Commits {
			if !full40.MatchString(c) {
				d.at(p+".commits", "%q is not a full 40-hex commit id", c)
			}
			for _, m := range ms {
				if !slices.Contains(r.Marks, m) {
					d.at(p+".commits."+c, "%s is not one of the marks", m)
				}
			}
			if slices.Contains(r.Marks, c) && !slices.Contains(ms, c) {
				d.at(p+".commits."+c, "a mark contains itself: list %s in its own line", c)
			}
		}
		for _, m := range r.Marks {
			if _, ok := r.Commits[m]; !ok {
				d.at(p+".commits", "mark %s has no line of its own", m)
			}
		}
		h.repos[key] = historyRepo{marks: r.Marks, contains: r.Commits}
	}
	if err := d.err(); err != nil {
		return nil, err
	}
	return h, nil
}

// IsAncestor answers from the table; anything it does not list is ErrUnknownCommit.
func (h *History) IsAncestor(_ context.Context, repo, ancestor, commit string) (bool, error) {
	if ancestor == commit && full40.MatchString(commit) {
		return true, nil
	}
	r, ok := h.repos[RepoKey(repo)]
	if !ok {
		return false, &UnknownCommitError{Repo: repo, Commit: commit, Source: "embedded history (repository not listed)"}
	}
	ms, ok := r.contains[commit]
	if !ok {
		return false, &UnknownCommitError{Repo: repo, Commit: commit, Source: "embedded history"}
	}
	if !slices.Contains(r.marks, ancestor) {
		return false, &UnknownCommitError{Repo: repo, Commit: ancestor, Source: "embedded history (not a mark)"}
	}
	return slices.Contains(ms, ancestor), nil
}

// Repos lists the repositories of the history with their data, for tests that check it.
func (h *History) Repos() map[string]HistoryRepo {
	out := map[string]HistoryRepo{}
	for k, r := range h.repos {
		out[k] = HistoryRepo{URL: k, Marks: slices.Clone(r.marks), Commits: r.contains}
	}
	return out
}

// RepoKey is the form of a repository URL used to match repositories: host in lower
// case, no scheme, no trailing ".git" or "/" (https://github.com/NVIDIA/nccl.git and
// https://github.com/NVIDIA/nccl are one repository).
func RepoKey(raw string) string {
	s := strings.TrimSpace(raw)
	if u, err := url.Parse(s); err == nil && u.Host != "" {
		s = strings.ToLower(u.Host) + u.Path
	}
	s = strings.TrimSuffix(strings.TrimSuffix(s, "/"), ".git")
	return s
}
