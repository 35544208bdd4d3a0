// Package drift tries a recipe's patch sets on every upstream commit of a range
// and says, for each commit, whether each set applies cleanly, only at an
// offset, is already there, conflicts (where), or finds a file it patches
// gone: from which commit a patch breaks, and at which file.
//
// Commits come from a repository with its history (a mirror), read in
// process: for each commit only the trees on the way to the files a patch
// names, and those files' blobs, are read; nothing is checked out.
package drift

import (
	"context"
	"errors"
	"fmt"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/stage"
	"github.com/epbuild/epbuild/patches"
)

// Options choose the commits and components.
type Options struct {
	// Commits is a range "A..B" (A and every commit after it up to B), "..B" or
	// "B" (B and all its ancestors), or "A.." (A up to HEAD). Each end is a full
	// commit id, a tag, a branch or HEAD. Empty: the component's pinned commit
	// up to HEAD.
	Commits string
	// Tags keeps only tagged commits (all tags when Commits is empty).
	Tags bool
	// Every keeps every Nth commit of the range, and its first and last.
	Every int
	// Component limits drift to one component.
	Component string
	// Repos maps a component to the repository to drift over instead of its
	// source: a component from an archive has no history of its own.
	Repos map[string]string
	// Workers bounds the commits tried at once (0: one per processor).
	Workers int
	// MaxFileBytes bounds a file a patch names that drift reads into memory (0:
	// DefaultMaxFileBytes): a larger one makes the set's cell at that commit a failed
	// one, "file too large", and is not read.
	MaxFileBytes int64
}

// DefaultMaxFileBytes is far above any source file a patch touches, and what a worker
// may hold of one file: several workers each read a commit's files.
const DefaultMaxFileBytes = 64 << 20

// Report is drift over every patch set of a plan.
type Report struct {
	Recipe string  `json:"recipe"`
	Tables []Table `json:"tables"`
	// Skipped lists components with patch sets that drift could not try, and why.
	Skipped []Skip `json:"skipped,omitempty"`
}

// Skip is a component left out.
type Skip struct {
	Component string `json:"component"`
	Why       string `json:"why"`
}

// Table is one component's sets tried on each commit of the range.
type Table struct {
	Component string `json:"component"`
	Repo      string `json:"repo"`
	// Pinned is the recipe's commit of the component, when it is from Repo.
	Pinned string    `json:"pinned,omitempty"`
	Sets   []SetInfo `json:"sets"`
	Rows   []Row     `json:"rows"`
	// Breaks are, per set, the commits where it stops applying (at any offset)
	// after the previous commit of the table took it.
	Breaks []Break `json:"breaks,omitempty"`
}

// SetInfo names a set and the offset it allows.
type SetInfo struct {
	Name      string `json:"name"`
	MaxOffset int    `json:"max_offset"`
	Origin    string `json:"origin"`
}

// Row is one commit.
type Row struct {
	Commit  string    `json:"commit"`
	Date    time.Time `json:"date"`
	Subject string    `json:"subject"`
	Tags    []string  `json:"tags,omitempty"`
	Cells   []Cell    `json:"sets"`
}

// State is what a set does at a commit.
type State string

// The states.
const (
	Clean          State = "clean"
	Offset         State = "offset"
	AlreadyApplied State = "already-applied"
	Conflict       State = "conflict"
	FileGone       State = "file-gone"
	// Failed: the set cannot be tried there (a refused path, a read error).
	Failed State = "failed"
)

// Applies says whether the set goes in (or is in) at that commit.
func (s State) Applies() bool { return s == Clean || s == Offset || s == AlreadyApplied }

// Cell is one set at one commit.
type Cell struct {
	Set   string `json:"set"`
	State State  `json:"state"`
	// Offset is the largest distance, in lines, of a hunk from where the patch says.
	Offset int `json:"offset,omitempty"`
	// File and Line say where the set conflicts or which file is gone; Hunk is
	// the hunk that does not fit (0 for a whole file).
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
	Hunk int    `json:"hunk,omitempty"`
	// Moved names files of the same name elsewhere in the tree when File is gone.
	Moved []string `json:"moved,omitempty"`
	// Partly counts the patches already in the tree when others still apply.
	Partly int    `json:"partly_applied,omitempty"`
	Detail string `json:"detail,omitempty"`
}

func (c Cell) String() string {
	switch c.State {
	case Clean:
		if c.Partly > 0 {
			return fmt.Sprintf("clean (%d already in)", c.Partly)
		}
		return "clean"
	case Offset:
		return fmt.Sprintf("offset %d", c.Offset)
	case AlreadyApplied:
		return "already applied"
	case Conflict:
		if c.Line > 0 {
			return fmt.Sprintf("conflict %s:%d", c.File, c.Line)
		}
		return "conflict " + c.File
	case FileGone:
		s := "file gone " + c.File
		if len(c.Moved) > 0 {
			s += " (same name: " + strings.Join(c.Moved, ", ") + ")"
		}
		return s
	}
	return "failed: " + c.Detail
}

// Break is a set that stops applying at a commit.
type Break struct {
	Set  string    `json:"set"`
	At   string    `json:"commit"`
	Date time.Time `json:"date"`
	// After is the commit before it in the table, where the set still applied.
	After string `json:"after"`
	Cell  Cell   `json:"cell"`
}

// unbounded lets a hunk go anywhere in its file: drift reports the offset a
// set needs, whatever the set allows.
const unbounded = 1 << 30

// Run tries every patch set of the plan's components on the commits opts chooses.
func Run(ctx context.Context, p *plan.Plan, s stage.Sources, opts Options) (*Report, error) {
	rep := &Report{Recipe: p.Recipe}
	if _, ok := p.Component(opts.Component); opts.Component != "" && !ok {
		return nil, &BadInput{Msg: fmt.Sprintf("--component %s: the recipe %s has no such component", opts.Component, p.Recipe)}
	}
	for name := range opts.Repos {
		if _, ok := p.Component(name); !ok {
			return nil, &BadInput{Msg: fmt.Sprintf("--repo %s=...: the recipe %s has no such component", name, p.Recipe)}
		}
	}
	for i := range p.Components {
		c := &p.Components[i]
		if opts.Component != "" && c.Name != opts.Component {
			continue
		}
		if len(c.PatchSets) == 0 {
			continue
		}
		url, pinned := opts.Repos[c.Name], ""
		if url == "" && c.Source.Git != nil {
			url, pinned = c.Source.Git.URL, c.Source.Git.Commit
		}
		if url == "" {
			rep.Skipped = append(rep.Skipped, Skip{Component: c.Name, Why: fmt.Sprintf(
				"its source is %s, which has no history: give --repo %s=URL, a git repository to drift over", c.Source.Kind(), c.Name)})
			continue
		}
		t, err := runComponent(ctx, c, url, pinned, s, opts)
		if err != nil {
			return nil, fmt.Errorf("drift %s: %w", c.Name, err)
		}
		rep.Tables = append(rep.Tables, *t)
	}
	return rep, nil
}

// BadInput is a range or option that names nothing: exit 2.
type BadInput struct{ Msg string }

func (e *BadInput) Error() string { return e.Msg }

// ExitCode marks bad input.
func (e *BadInput) ExitCode() int { return 2 }

func runComponent(ctx context.Context, c *plan.PlanComponent, url, pinned string, s stage.Sources, opts Options) (*Table, error) {
	f, err := s.For(url)
	if err != nil {
		return nil, err
	}
	repo, err := f.OpenHistory(url)
	if err != nil {
		return nil, err
	}
	defer repo.Close()
	t := &Table{Component: c.Name, Repo: url}
	up := stage.Upstream(s)
	sets := make([]*patches.PreparedSet, len(c.PatchSets))
	for i, set := range c.PatchSets {
		if sets[i], err = patches.Prepare(ctx, set, up); err != nil {
			return nil, err
		}
		t.Sets = append(t.Sets, SetInfo{Name: set.Name, MaxOffset: set.MaxOffset, Origin: set.Origin()})
	}
	rd := repo.Reader()
	if pinned != "" {
		if _, err := rd.Commit(pinned); err != nil {
			if opts.Commits == "" && !opts.Tags {
				// the default range starts at the pin: without it, the range would be
				// whatever history the mirror happens to hold
				return nil, &IncompleteHistory{From: pinned, To: "HEAD", Missing: pinned}
			}
			pinned = "" // not in this repository: only the given range is read
		}
	}
	t.Pinned = pinned
	commits, tags, err := selectCommits(repo, rd, pinned, opts)
	if err != nil {
		return nil, err
	}
	t.Rows = make([]Row, len(commits))
	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = max(1, min(workers, len(commits)))
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		next  int
		first error
	)
	for range workers {
		wg.Go(func() {
			rd := repo.Reader()
			for {
				mu.Lock()
				i := next
				next++
				stop := first != nil || i >= len(commits)
				mu.Unlock()
				if stop || ctx.Err() != nil {
					return
				}
				row, err := tryCommit(rd, commits[i], sets, t.Sets, opts.maxFileBytes())
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
				row.Tags = tags[commits[i].ID]
				t.Rows[i] = row
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if first != nil {
		return nil, first
	}
	t.Breaks = breaks(t)
	return t, nil
}

func (o Options) maxFileBytes() int64 {
	if o.MaxFileBytes > 0 {
		return o.MaxFileBytes
	}
	return DefaultMaxFileBytes
}

// tryCommit tries every set on one commit.
func tryCommit(rd *source.Reader, c source.Commit, sets []*patches.PreparedSet, info []SetInfo, maxFile int64) (Row, error) {
	row := Row{Commit: c.ID, Date: c.Time, Subject: c.Subject}
	tree := &commitTree{rd: rd, tree: c.Tree, maxFile: maxFile}
	off := unbounded
	for i, ps := range sets {
		res, err := ps.Check(tree, patches.Options{MaxOffset: &off, AllowApplied: true})
		cell := classify(res, err)
		if cell.State == FileGone {
			if cell.Moved, err = sameName(rd, c.Tree, cell.File); err != nil {
				return row, err
			}
		}
		if tree.err != nil {
			return row, fmt.Errorf("commit %s: %w", c.ID, tree.err)
		}
		cell.Set = info[i].Name
		row.Cells = append(row.Cells, cell)
	}
	return row, nil
}

// classify turns a set's check into a cell.
func classify(res *patches.SetResult, err error) Cell {
	var ce *patches.ConflictError
	var tl *tooLargeError
	switch {
	case errors.As(err, &tl):
		return Cell{State: Failed, File: tl.file, Detail: tl.Error()}
	case errors.As(err, &ce):
		if ce.Hunk == 0 && ce.Reason == "file does not exist" {
			return Cell{State: FileGone, File: ce.File}
		}
		return Cell{State: Conflict, File: ce.File, Line: ce.Line, Hunk: ce.Hunk, Detail: firstLine(err.Error())}
	case err != nil:
		return Cell{State: Failed, Detail: firstLine(err.Error())}
	}
	c := Cell{State: Clean}
	already := 0
	for _, p := range res.Patches {
		if p.Status == patches.StatusAlreadyApplied {
			already++
			continue
		}
		for _, f := range p.Files {
			for _, h := range f.Hunks {
				c.Offset = max(c.Offset, h.Offset, -h.Offset)
			}
		}
	}
	switch {
	case already == len(res.Patches):
		return Cell{State: AlreadyApplied}
	case c.Offset > 0:
		c.State = Offset
	}
	c.Partly = already
	return c
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// breaks finds, per set, each commit where the set stops applying after the
// row before it took it.
func breaks(t *Table) []Break {
	var out []Break
	for j, s := range t.Sets {
		for i := 1; i < len(t.Rows); i++ {
			prev, cur := t.Rows[i-1].Cells[j], t.Rows[i].Cells[j]
			if prev.State.Applies() && !cur.State.Applies() {
				out = append(out, Break{Set: s.Name, At: t.Rows[i].Commit, Date: t.Rows[i].Date, After: t.Rows[i-1].Commit, Cell: cur})
			}
		}
	}
	return out
}

// sameName lists the files of tree with the base name of p, but p: where a
// gone file may have moved.
func sameName(rd *source.Reader, tree, p string) ([]string, error) {
	base := path.Base(p)
	var out []string
	err := rd.Walk(tree, func(q string, e source.Entry) bool {
		if path.Base(q) == base && q != p {
			out = append(out, q)
		}
		return len(out) < 3
	})
	return out, err
}

// commitTree is a commit's tree as the patch engine reads it. The engine
// reads several files at once; the Reader is for one goroutine.
type commitTree struct {
	rd      *source.Reader
	tree    string
	maxFile int64
	mu      sync.Mutex
	err     error
}

// tooLargeError is a file over Options.MaxFileBytes: the set is not tried there, the
// drift goes on.
type tooLargeError struct {
	file string
	size int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("file too large %s (%d bytes)", e.file, e.size)
}

func (t *commitTree) Entry(p string) (patches.Entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, err := t.rd.Lookup(t.tree, p)
	if err != nil {
		t.err = err
		return patches.Entry{}, err
	}
	switch e.Kind {
	case source.EntryNone:
		return patches.Entry{Kind: patches.EntryNone}, nil
	case source.EntryDir:
		return patches.Entry{Kind: patches.EntryDir}, nil
	case source.EntrySymlink:
		return patches.Entry{Kind: patches.EntrySymlink}, nil
	case source.EntryFile, source.EntryExec:
		// sized from its headers first: a huge blob is refused, not read whole
		size, err := t.rd.BlobSize(e.ID)
		if err != nil {
			t.err = err
			return patches.Entry{}, err
		}
		if size > t.maxFile {
			return patches.Entry{}, &tooLargeError{file: p, size: size}
		}
		data, err := t.rd.Blob(e.ID)
		if err != nil {
			t.err = err
			return patches.Entry{}, err
		}
		return patches.Entry{Kind: patches.EntryFile, Data: data, Exec: e.Kind == source.EntryExec}, nil
	}
	return patches.Entry{Kind: patches.EntryOther}, nil
}

// selectCommits lists the commits of the range, parents before children
// (oldest first where history allows), and the tags naming each.
func selectCommits(repo *source.Repository, rd *source.Reader, pinned string, opts Options) ([]source.Commit, map[string][]string, error) {
	tags := map[string][]string{}
	all, err := repo.Tags()
	if err != nil {
		return nil, nil, err
	}
	for _, tg := range all {
		tags[tg.Commit] = append(tags[tg.Commit], tg.Name)
	}
	var commits []source.Commit
	if opts.Tags && opts.Commits == "" {
		for id := range tags {
			c, err := rd.Commit(id)
			if err != nil {
				return nil, nil, err
			}
			commits = append(commits, c)
		}
		commits = order(commits)
	} else {
		from, to, err := parseRange(opts.Commits, pinned)
		if err != nil {
			return nil, nil, err
		}
		if commits, err = walk(repo, rd, from, to); err != nil {
			return nil, nil, err
		}
		if opts.Tags {
			commits = slices.DeleteFunc(commits, func(c source.Commit) bool { return len(tags[c.ID]) == 0 })
		}
	}
	if opts.Every > 1 && len(commits) > 2 {
		var kept []source.Commit
		for i, c := range commits {
			if i%opts.Every == 0 || i == len(commits)-1 {
				kept = append(kept, c)
			}
		}
		commits = kept
	}
	if len(commits) == 0 {
		return nil, nil, &BadInput{Msg: "the range holds no commit"}
	}
	return commits, tags, nil
}

// parseRange splits "A..B" into its ends; B defaults to HEAD and A to the
// pinned commit when no range is given.
func parseRange(r, pinned string) (from, to string, err error) {
	switch {
	case r == "":
		return pinned, "HEAD", nil
	case strings.Count(r, "..") > 1 || strings.Contains(r, "..."):
		return "", "", &BadInput{Msg: fmt.Sprintf("--commits %q: give A..B, A.., ..B or B", r)}
	case !strings.Contains(r, ".."):
		return "", r, nil
	}
	from, to, _ = strings.Cut(r, "..")
	if to == "" {
		to = "HEAD"
	}
	return from, to, nil
}

// walk lists from (when given) and the commits reachable from to but not from
// from, in order. Without from, a parent missing from the repository (a shallow
// history) ends its line. With from, from must be an ancestor of to and the
// history between them complete: else the range would silently miss commits, or
// hold commits that never had from's code.
func walk(repo *source.Repository, rd *source.Reader, from, to string) ([]source.Commit, error) {
	toID, err := resolve(repo, rd, to)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var fromC *source.Commit
	if from != "" {
		fromID, err := resolve(repo, rd, from)
		if err != nil {
			return nil, err
		}
		c, err := rd.Commit(fromID)
		if err != nil {
			return nil, err
		}
		fromC = &c
		if _, _, err := reach(rd, []string{fromID}, seen, nil); err != nil {
			return nil, err
		}
	}
	commits, missing, err := reach(rd, []string{toID}, seen, nil)
	if err != nil {
		return nil, err
	}
	if fromC != nil {
		if err := descends(fromC.ID, toID, commits, missing, from, to); err != nil {
			return nil, err
		}
	}
	commits = order(commits)
	if fromC != nil {
		commits = append([]source.Commit{*fromC}, commits...)
	}
	return commits, nil
}

// descends checks that from is an ancestor of to with every commit between them
// present: commits are those reachable from to and not from from, missing the
// parents among them the repository lacks. The first commit of seen that a walk
// down from to meets on a path to from is from itself, so from is an ancestor
// exactly when it is a parent of one of commits (or is to).
func descends(fromID, toID string, commits []source.Commit, missing []string, from, to string) error {
	if fromID == toID {
		return nil
	}
	if len(missing) > 0 {
		return &IncompleteHistory{From: from, To: to, Missing: missing[0]}
	}
	for _, c := range commits {
		if slices.Contains(c.Parents, fromID) {
			return nil
		}
	}
	return &BadInput{Msg: fmt.Sprintf("%s does not descend from the pin %s: its history does not hold %.12s (an orphan branch, or a rewritten history); give --commits A..B with A an ancestor of B",
		quote.Term(to), quote.Term(from), fromID)}
}

// IncompleteHistory is a range whose history the mirror does not hold whole (a
// shallow clone, a missing object): drift cannot tell what the range holds. The
// mirror lacks something: exit 3.
type IncompleteHistory struct {
	From, To string
	// Missing is the first parent found missing.
	Missing string
}

func (e *IncompleteHistory) Error() string {
	return fmt.Sprintf("cannot tell: history between %s and %s is incomplete (shallow or missing parent %.12s); fetch the whole history into the mirror (git fetch --unshallow)",
		quote.Term(e.From), quote.Term(e.To), e.Missing)
}

// ExitCode: the environment (the mirror) lacks something.
func (e *IncompleteHistory) ExitCode() int { return 3 }

// minShort is the shortest commit id prefix resolved: as git's default
// abbreviation, short enough to type, long enough to be mostly unique.
const minShort = 7

func resolve(repo *source.Repository, rd *source.Reader, rev string) (string, error) {
	if len(rev) >= minShort && len(rev) < 40 && isHex(rev) {
		return resolveShort(repo, rd, rev)
	}
	id, err := repo.Resolve(rev)
	if err != nil {
		var se *source.Error
		if errors.As(err, &se) && se.Kind == source.KindBadPin {
			return "", &BadInput{Msg: "--commits: " + err.Error()}
		}
		return "", err
	}
	return id, nil
}

// resolveShort finds the commit of the mirror's history (from HEAD and the tags)
// whose id starts with prefix. A tag or branch spelled like hex comes first.
func resolveShort(repo *source.Repository, rd *source.Reader, prefix string) (string, error) {
	if id, err := repo.Resolve(prefix); err == nil {
		return id, nil
	}
	starts := []string{}
	if head, err := repo.Resolve("HEAD"); err == nil {
		starts = append(starts, head)
	}
	tags, err := repo.Tags()
	if err != nil {
		return "", err
	}
	for _, tg := range tags {
		starts = append(starts, tg.Commit)
	}
	all, _, err := reach(rd, starts, map[string]bool{}, nil)
	if err != nil {
		return "", err
	}
	ids := make([]string, len(all))
	for i, c := range all {
		ids[i] = c.ID
	}
	return matchPrefix(ids, prefix)
}

// matchPrefix is the one id of ids that starts with prefix (any case).
func matchPrefix(ids []string, prefix string) (string, error) {
	prefix = strings.ToLower(prefix)
	var found []string
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) && !slices.Contains(found, id) {
			found = append(found, id)
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", &BadInput{Msg: fmt.Sprintf("--commits: no commit of the mirror's history (from HEAD and the tags) starts with %s", prefix)}
	}
	slices.Sort(found)
	return "", &BadInput{Msg: fmt.Sprintf("--commits: %s is ambiguous: it starts %d commits (%s); give more of the id", prefix, len(found), strings.Join(found, ", "))}
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i] | 0x20; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// reach adds to seen every commit reachable from starts that is not in seen
// yet, and returns them, and the parents among them the repository lacks.
func reach(rd *source.Reader, starts []string, seen map[string]bool, out []source.Commit) ([]source.Commit, []string, error) {
	var missing []string
	stack := slices.Clone(starts)
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[id] {
			continue
		}
		seen[id] = true
		c, err := rd.Commit(id)
		if errors.Is(err, source.ErrNoObject) {
			missing = append(missing, id)
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		out = append(out, c)
		stack = append(stack, c.Parents...)
	}
	return out, missing, nil
}

// order sorts commits so that a commit comes after its parents among them,
// and otherwise by committer time, then id.
func order(commits []source.Commit) []source.Commit {
	in := make(map[string]bool, len(commits))
	for _, c := range commits {
		in[c.ID] = true
	}
	waiting := map[string]int{}
	children := map[string][]int{}
	var ready []int
	for i, c := range commits {
		for _, p := range c.Parents {
			if in[p] {
				waiting[c.ID]++
				children[p] = append(children[p], i)
			}
		}
		if waiting[c.ID] == 0 {
			ready = append(ready, i)
		}
	}
	older := func(a, b int) int {
		if d := commits[a].Time.Compare(commits[b].Time); d != 0 {
			return d
		}
		return strings.Compare(commits[a].ID, commits[b].ID)
	}
	out := make([]source.Commit, 0, len(commits))
	for len(ready) > 0 {
		// the oldest ready commit next; ready stays small
		k := 0
		for j := range ready {
			if older(ready[j], ready[k]) < 0 {
				k = j
			}
		}
		i := ready[k]
		ready = slices.Delete(ready, k, k+1)
		out = append(out, commits[i])
		for _, ch := range children[commits[i].ID] {
			waiting[commits[ch].ID]--
			if waiting[commits[ch].ID] == 0 {
				ready = append(ready, ch)
			}
		}
	}
	return out
}
