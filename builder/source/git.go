package source

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	gitcache "github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/epbuild/epbuild/builder/cache"
)

// pinRef is the namespace that keeps fetched commits reachable in the cache and in mirrors.
const pinRef = "refs/epbuild/"

// refPin is one named ref that must point at a pinned commit.
type refPin struct {
	name string                 // as given
	full plumbing.ReferenceName // as resolved at the source
	obj  plumbing.Hash          // what the ref names: a tag object or the commit
	want plumbing.Hash          // the commit it must peel to
}

// gitPin is a checked Git.
type gitPin struct {
	url    string
	key    string
	commit plumbing.Hash
	refs   []refPin
	also   []plumbing.Hash // more commits fetched with it (a diff's base)
}

func (p *gitPin) String() string { return p.url + "@" + p.commit.String() }

// commits are the commits that the fetch brings: the pin, also, and those of name=sha extra
// refs.
func (p *gitPin) commits() []plumbing.Hash {
	out := []plumbing.Hash{p.commit}
	for _, h := range p.also {
		if !containsHash(out, h) {
			out = append(out, h)
		}
	}
	for _, r := range p.refs {
		if !containsHash(out, r.want) {
			out = append(out, r.want)
		}
	}
	return out
}

var hexRE = regexp.MustCompile(`^[0-9a-fA-F]+$`)

func parseCommit(what, s string) (plumbing.Hash, error) {
	switch {
	case len(s) == 40 && hexRE.MatchString(s):
		return plumbing.NewHash(strings.ToLower(s)), nil
	case s == "":
		return plumbing.ZeroHash, badPin(nil, "%s: no commit: pin a full 40-hex commit", what)
	case len(s) < 40 && hexRE.MatchString(s):
		return plumbing.ZeroHash, badPin(nil, "%s: commit %q is a short SHA: a full 40-hex commit is required (git rev-parse %s prints it)", what, s, s)
	}
	return plumbing.ZeroHash, badPin(nil, "%s: %q is not a commit id: a full 40-hex commit is required (a tag or branch goes in ref, next to the commit)", what, s)
}

// checkRefName applies git's rules for ref names (git check-ref-format), enough to keep a
// name from escaping the refs directory.
func checkRefName(what, name string) error {
	bad := name == "" || name == "@" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") ||
		strings.HasSuffix(name, ".") || strings.Contains(name, "..") || strings.Contains(name, "//") ||
		strings.Contains(name, "@{") || strings.ContainsAny(name, " ~^:?*[\\\x7f")
	for _, c := range name {
		if c < 0x20 {
			bad = true
		}
	}
	for _, part := range strings.Split(name, "/") {
		if strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
			bad = true
		}
	}
	if bad {
		return badPin(nil, "%s: %q is not a valid ref name", what, name)
	}
	return nil
}

// candidates are the full names a given ref name may mean, in git's order of preference.
func candidates(name string) []plumbing.ReferenceName {
	if strings.HasPrefix(name, "refs/") {
		return []plumbing.ReferenceName{plumbing.ReferenceName(name)}
	}
	return []plumbing.ReferenceName{
		plumbing.ReferenceName("refs/tags/" + name),
		plumbing.ReferenceName("refs/heads/" + name),
	}
}

func parseGit(g Git) (*gitPin, error) {
	key, err := RepoKey(g.URL)
	if err != nil {
		return nil, err
	}
	p := &gitPin{url: g.URL, key: key}
	if p.commit, err = parseCommit("git source "+g.URL, g.Commit); err != nil {
		return nil, err
	}
	if g.Ref != "" {
		if err := checkRefName("git source "+g.URL, g.Ref); err != nil {
			return nil, err
		}
		p.refs = append(p.refs, refPin{name: g.Ref, want: p.commit})
	}
	for _, e := range g.ExtraRefs {
		name, sha, hasSHA := strings.Cut(e, "=")
		if err := checkRefName("git source "+g.URL+": extra ref", name); err != nil {
			return nil, err
		}
		want := p.commit
		if hasSHA {
			if want, err = parseCommit("git source "+g.URL+": extra ref "+name, sha); err != nil {
				return nil, err
			}
		}
		p.refs = append(p.refs, refPin{name: name, want: want})
	}
	return p, nil
}

// FetchGit brings the pinned commit (and the refs the source names) into the cache: from
// the mirror when one is set, else shallowly by SHA from the URL. A second call finds it
// there and touches nothing else.
func (f *Fetcher) FetchGit(ctx context.Context, g Git) error {
	p, err := parseGit(g)
	if err != nil {
		return err
	}
	unlock, err := f.cache.Lock(ctx, cache.KindGit, p.key)
	if err != nil {
		return fetchErr(err, "fetch %s", p)
	}
	defer unlock()
	return f.fetchGitLocked(ctx, p)
}

// fetchGitLocked is FetchGit with the repository's lock held.
func (f *Fetcher) fetchGitLocked(ctx context.Context, p *gitPin) error {
	_, err := f.fetchGitInto(ctx, p, "")
	return err
}

// fetchGitInto is fetchGitLocked that, given root and copying from a mirror, also writes
// the tree of p's commit into root from the same reads (see copyCheckout) and returns what
// it wrote; nil when it wrote nothing, and the caller checks out from the cache.
func (f *Fetcher) fetchGitInto(ctx context.Context, p *gitPin, root string) (*worktree, error) {
	dir := f.cache.GitDir(p.key)
	if f.haveGit(dir, p) {
		return nil, f.cache.Touch(cache.KindGit, p.key, p.url)
	}
	tmp, err := f.cache.TempDir(cache.KindGit, p.key)
	if err != nil {
		return nil, fetchErr(err, "fetch %s", p)
	}
	defer os.RemoveAll(tmp)
	// What the cache holds already (a pull request's base, fetched before its head) is not
	// copied again.
	cached, err := openPacks(filepath.Join(dir, "objects", "pack"))
	if err != nil {
		return nil, fetchErr(err, "fetch %s: read the cache %s", p, dir)
	}
	defer cached.Close()
	// A fetch from the mirror writes one pack straight into tmp; go-git's fetch wants a
	// repository there.
	packDir := tmp
	var shallow []plumbing.Hash
	var w *worktree
	if f.mirror != "" {
		shallow, w, err = f.fetchFromMirror(ctx, p, tmp, cached, root)
	} else {
		packDir = filepath.Join(tmp, "objects", "pack")
		if err := writeBareSkeleton(tmp); err != nil {
			return nil, fetchErr(err, "fetch %s", p)
		}
		dst := openStorage(tmp)
		shallow, err = f.fetchFromRemote(ctx, p, dst)
		dst.Close()
	}
	if err != nil {
		return nil, err
	}
	if err := checkCommits(packDir, cached, p); err != nil {
		return nil, err
	}
	// The cache repository is made only now, so that a failed fetch leaves nothing.
	if err := f.ensureBare(p.key, dir); err != nil {
		return nil, fetchErr(err, "fetch %s: prepare the cache repository %s", p, dir)
	}
	if err := publish(packDir, dir, shallow, p); err != nil {
		return nil, fetchErr(err, "fetch %s: store into the cache %s", p, dir)
	}
	f.log.Debug("fetched", "source", p.String(), "cache", dir)
	return w, f.cache.Touch(cache.KindGit, p.key, p.url)
}

// haveGit says whether the cache already holds everything p needs. A ref that has moved
// since it was cached is a miss, not an error: the source decides.
func (f *Fetcher) haveGit(dir string, p *gitPin) bool {
	for _, c := range p.commits() {
		b, err := os.ReadFile(filepath.Join(dir, pinRef+c.String()))
		if err != nil || strings.TrimSpace(string(b)) != c.String() {
			return false
		}
	}
	if len(p.refs) == 0 {
		return true
	}
	st := openStorage(dir)
	defer st.Close()
	db, err := openObjectDB(filepath.Join(dir, "objects"))
	if err != nil {
		return false
	}
	defer db.Close()
	for i := range p.refs {
		if err := resolveRef(st, db, &p.refs[i]); err != nil {
			return false
		}
	}
	return true
}

// openStorage opens a repository's object and ref storage (dir is the git directory). The
// fetch and checkout read objects through objectDB; go-git reads refs, and objects for
// diffs and remote fetches.
func openStorage(dir string) *filesystem.Storage {
	return filesystem.NewStorageWithOptions(osfs.New(dir), gitcache.NewObjectLRU(16*gitcache.MiByte),
		filesystem.Options{KeepDescriptors: true, LargeObjectThreshold: 4 << 20})
}

// resolveRef finds r in refs and checks that it peels to r.want (tags read from db).
func resolveRef(refs storer.ReferenceStorer, db *objectDB, r *refPin) error {
	for _, name := range candidates(r.name) {
		ref, err := storer.ResolveReference(refs, name)
		if err != nil {
			continue
		}
		peeled, err := peel(db, ref.Hash())
		if err != nil {
			return err
		}
		if peeled != r.want {
			return badPin(nil, "%s points at %s, not at the pinned commit %s", name, peeled, r.want)
		}
		r.full, r.obj = name, ref.Hash()
		return nil
	}
	return errRefNotFound
}

var errRefNotFound = errors.New("ref not found")

// peel follows annotated tags to what they finally name.
func peel(db *objectDB, h plumbing.Hash) (plumbing.Hash, error) {
	r := db.reader()
	for i := 0; i < 10; i++ {
		t, data, err := r.read(h)
		if err != nil {
			return h, err
		}
		if t != plumbing.TagObject {
			return h, nil
		}
		tgt, err := tagTarget(data)
		if err != nil {
			return h, fmt.Errorf("tag %s: %w", h, err)
		}
		h = tgt
	}
	return h, fmt.Errorf("tag %s: more than 10 levels of tags", h)
}

// fetchFromRemote fetches p's objects from its URL into dst, shallow and by SHA, and
// returns the shallow commits.
func (f *Fetcher) fetchFromRemote(ctx context.Context, p *gitPin, dst *filesystem.Storage) ([]plumbing.Hash, error) {
	rem := git.NewRemote(dst, &config.RemoteConfig{Name: "origin", URLs: []string{p.url}})
	if len(p.refs) > 0 {
		refs, err := rem.ListContext(ctx, &git.ListOptions{PeelingOption: git.AppendPeeled})
		if err != nil {
			return nil, fetchErr(err, "fetch %s: list refs", p)
		}
		adv := make(map[plumbing.ReferenceName]plumbing.Hash, len(refs))
		for _, r := range refs {
			if r.Type() == plumbing.HashReference {
				adv[r.Name()] = r.Hash()
			}
		}
		for i := range p.refs {
			if err := resolveAdvertised(adv, &p.refs[i], p); err != nil {
				return nil, err
			}
		}
	}
	var specs []config.RefSpec
	var wants []plumbing.Hash
	for _, h := range p.commits() {
		wants = append(wants, h)
	}
	for _, r := range p.refs {
		if !containsHash(wants, r.obj) {
			wants = append(wants, r.obj)
		}
	}
	for _, h := range wants {
		specs = append(specs, config.RefSpec(h.String()+":"+pinRef+h.String()))
	}
	m := newMeter(f.progress, f.log, p.url, "objects", 0)
	err := rem.FetchContext(ctx, &git.FetchOptions{
		RefSpecs: specs, Depth: 1, Tags: git.NoTags, Progress: &sidebandMeter{m: m},
	})
	m.done()
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		if ctx.Err() != nil {
			return nil, fetchErr(ctx.Err(), "fetch %s", p)
		}
		msg := err.Error()
		if strings.Contains(msg, "not our ref") || strings.Contains(msg, "not found") && !strings.Contains(msg, "repository not found") {
			return nil, fetchErr(err, "fetch %s: the server does not have commit %s (check the pin, or whether it was force-pushed away)", p, p.commit)
		}
		return nil, fetchErr(err, "fetch %s", p)
	}
	sh, err := dst.Shallow()
	if err != nil {
		return nil, fetchErr(err, "fetch %s: read shallow commits", p)
	}
	return sh, nil
}

func resolveAdvertised(adv map[plumbing.ReferenceName]plumbing.Hash, r *refPin, p *gitPin) error {
	var tried []string
	for _, name := range candidates(r.name) {
		tried = append(tried, name.String())
		h, ok := adv[name]
		if !ok {
			continue
		}
		peeled := h
		if ph, ok := adv[plumbing.ReferenceName(name.String()+"^{}")]; ok {
			peeled = ph
		}
		if peeled != r.want {
			return badPin(nil, "fetch %s: ref %s points at %s there, not at the pinned commit %s: fix the commit or the ref", p, name, peeled, r.want)
		}
		r.full, r.obj = name, h
		return nil
	}
	return badPin(nil, "fetch %s: ref %q not found there (looked for %s)", p, r.name, strings.Join(tried, ", "))
}

// sidebandMeter turns git's "Receiving objects:  45% (135/300)" progress into a meter.
type sidebandMeter struct {
	m   *meter
	buf []byte
}

var countRE = regexp.MustCompile(`\((\d+)/(\d+)\)`)

func (s *sidebandMeter) Write(b []byte) (int, error) {
	s.buf = append(s.buf, b...)
	for {
		i := strings.IndexAny(string(s.buf), "\r\n")
		if i < 0 {
			break
		}
		if m := countRE.FindSubmatch(s.buf[:i]); m != nil {
			cur, _ := strconv.ParseInt(string(m[1]), 10, 64)
			tot, _ := strconv.ParseInt(string(m[2]), 10, 64)
			s.m.set(cur, tot)
		}
		s.buf = s.buf[i+1:]
	}
	return len(b), nil
}

// mirrorDir is where the mirror keeps p's repository.
func (f *Fetcher) mirrorDir(key string) string {
	return filepath.Join(f.mirror, filepath.FromSlash(key))
}

// fetchFromMirror copies p's objects from the mirror's bare repository into a new pack in
// packDir, in process: the objects of each pinned commit (its whole tree, no history) are
// read straight from the mirror's packs, but for those cached has. Given root, it writes
// the tree of p's commit there in the same pass (copyCheckout).
func (f *Fetcher) fetchFromMirror(ctx context.Context, p *gitPin, packDir string, cached *objectDB, root string) ([]plumbing.Hash, *worktree, error) {
	mdir := f.mirrorDir(p.key)
	if _, err := os.Stat(filepath.Join(mdir, "objects")); err != nil {
		return nil, nil, fetchErr(nil, "fetch %s: no mirror entry for %s: looked for the bare repository %s (write one with `epbuild mirror`)", p, p.url, mdir)
	}
	db, err := openObjectDB(filepath.Join(mdir, "objects"))
	if err != nil {
		return nil, nil, fetchErr(err, "fetch %s: open the mirror %s", p, mdir)
	}
	defer db.Close()
	if len(p.refs) > 0 {
		src := openStorage(mdir)
		defer src.Close()
		for i := range p.refs {
			err := resolveRef(src, db, &p.refs[i])
			if errors.Is(err, errRefNotFound) {
				return nil, nil, fetchErr(nil, "fetch %s: ref %q not in the mirror %s", p, p.refs[i].name, mdir)
			}
			if err != nil {
				var e *Error
				if errors.As(err, &e) {
					return nil, nil, badPin(nil, "fetch %s: in the mirror %s: %s", p, mdir, e.Msg)
				}
				return nil, nil, fetchErr(err, "fetch %s: ref %q in the mirror %s", p, p.refs[i].name, mdir)
			}
		}
	}
	roots := p.commits()
	for _, h := range roots {
		if !db.has(h) {
			return nil, nil, fetchErr(nil, "fetch %s: commit %s not in the mirror %s", p, h, mdir)
		}
	}
	for _, r := range p.refs {
		if !containsHash(roots, r.obj) {
			roots = append(roots, r.obj)
		}
	}
	m := newMeter(f.progress, f.log, p.url, "objects", 0)
	var shallow []plumbing.Hash
	var w *worktree
	if root == "" {
		shallow, err = copyObjects(ctx, db, packDir, roots, nil, cached.packed, m)
	} else {
		shallow, w, err = copyCheckout(ctx, db, cached, packDir, roots, p.commit, root, m)
	}
	if err != nil {
		return nil, nil, fetchErr(err, "fetch %s: copy from the mirror %s", p, mdir)
	}
	return shallow, w, nil
}

// copyObjects packs the closure of roots (tags, commits with their whole trees but no
// parents) from src into a new pack in packDir and returns the commits, which are the
// shallow boundary of the repository the pack goes to. Tags and commits for which skip is
// true are taken as present already, closure included; so are trees and blobs for which
// have is true (the destination holds whole closures: the cache does, a partial clone
// serving as a mirror does not).
//
// Objects stored whole in src's packs are copied as they are packed there (their content
// inflated and hashed to check it, but not compressed again); others (deltas, loose
// objects) are written whole. This goroutine walks the trees and hands the blobs it finds
// to copyReaders goroutines as it goes; one writer appends to the pack what they send,
// holding it until the walk has counted the objects for the pack's header.
func copyObjects(ctx context.Context, src *objectDB, packDir string, roots []plumbing.Hash, skip, have func(plumbing.Hash) bool, m *meter) ([]plumbing.Hash, error) {
	defer m.done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan packJob, 64)
	walked := make(chan walkResult, 1)
	var pw *packWriter // the writer's until werr is received
	werr := make(chan error, 1)
	go func() {
		var err error
		var held []packJob // what the readers sent before the walk ended
		heldBytes := 0
		add := func(j packJob) { // or drop it, once the walk has failed
			if err == nil && pw != nil {
				err = pw.addJob(j)
				m.set(m.cur.Load()+1, -1)
			}
			if j.done != nil {
				close(j.done) // a reader waits on it, whether j was written or not
			}
		}
		open, walkc := true, walked
		for open || walkc != nil {
			var in chan packJob // nil, not read, while enough is held and the walk goes on
			if open && (walkc == nil || heldBytes <= copyHoldBytes) {
				in = jobs
			}
			select {
			case w := <-walkc:
				walkc = nil
				if w.total > 0 {
					if pw, err = newPackWriter(packDir, w.total); err != nil {
						cancel()
					}
				}
				for _, j := range append(w.head, held...) {
					add(j)
				}
				held = nil
			case j, ok := <-in:
				switch {
				case !ok:
					open = false
				case walkc != nil:
					held = append(held, j)
					heldBytes += len(j.raw)
				default:
					add(j)
				}
			}
		}
		werr <- err
	}()
	blobs := newHashQueue()
	rerrs := make([]error, copyReaders)
	var wg sync.WaitGroup
	for i := 0; i < copyReaders; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if rerrs[i] = readBlobs(ctx, src.reader(), blobs, jobs); rerrs[i] != nil {
				cancel()
			}
		}(i)
	}
	w, err := walkObjects(ctx, src.reader(), roots, skip, have, blobs)
	blobs.close()
	if err != nil {
		cancel()
		w = walkResult{}
	}
	m.set(0, int64(w.total))
	walked <- w
	wg.Wait()
	close(jobs)
	if err := firstErr(append([]error{<-werr, err}, rerrs...)); err != nil {
		if pw != nil {
			pw.abort()
		}
		return nil, err
	}
	if pw == nil {
		return nil, nil
	}
	if _, _, err := pw.finish(); err != nil {
		return nil, err
	}
	return w.commits, nil
}

// copyHoldBytes bounds what a copy's writer holds in memory while the walk goes on.
const copyHoldBytes = 32 << 20

// walkResult is what walkObjects found: the tags, commits and trees to pack, the commits,
// and how many objects in all (blobs included).
type walkResult struct {
	head    []packJob
	commits []plumbing.Hash
	total   int
	had     int // objects left out: the destination has them
}

// firstErr returns the first error that is not a cancellation, or else the first error:
// one goroutine's failure cancels the others.
func firstErr(errs []error) error {
	var first error
	for _, e := range errs {
		if e != nil && !errors.Is(e, context.Canceled) {
			return e
		}
		if first == nil {
			first = e
		}
	}
	return first
}

// walkObjects reads the tags, commits and trees of the closure of roots (see copyObjects)
// and hands their blobs to blobs.
func walkObjects(ctx context.Context, r *objReader, roots []plumbing.Hash, skip, have func(plumbing.Hash) bool, blobs *hashQueue) (walkResult, error) {
	var w walkResult
	seen := make(map[plumbing.Hash]bool)
	var walkTree func(h plumbing.Hash) error
	walkTree = func(h plumbing.Hash) error {
		if seen[h] {
			return nil
		}
		seen[h] = true
		if have != nil && have(h) {
			w.had++
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		j, data, err := r.packJob(h)
		if err == nil && j.t != plumbing.TreeObject {
			err = fmt.Errorf("a %s, not a tree", j.t)
		}
		if err != nil {
			return fmt.Errorf("tree %s: %w", h, err)
		}
		w.head = append(w.head, j)
		entries, err := parseTree(data)
		if err != nil {
			return fmt.Errorf("tree %s: %w", h, err)
		}
		for _, e := range entries {
			switch e.mode {
			case filemode.Dir:
				if err := walkTree(e.hash); err != nil {
					return err
				}
			case filemode.Submodule: // a commit of another repository
			default:
				if !seen[e.hash] {
					seen[e.hash] = true
					if have != nil && have(e.hash) {
						w.had++
						continue
					}
					blobs.push(e.hash)
				}
			}
		}
		return nil
	}
	for _, h := range roots {
		for i := 0; ; i++ {
			if skip != nil && skip(h) {
				break
			}
			j, data, err := r.packJob(h)
			if err != nil {
				return walkResult{}, fmt.Errorf("object %s: %w", h, err)
			}
			if j.t == plumbing.TagObject && i < 10 {
				if !seen[h] {
					seen[h] = true
					w.head = append(w.head, j)
				}
				tgt, err := tagTarget(data)
				if err != nil {
					return walkResult{}, fmt.Errorf("tag %s: %w", h, err)
				}
				h = tgt
				continue
			}
			if j.t != plumbing.CommitObject {
				return walkResult{}, fmt.Errorf("object %s is a %s, not a commit", h, j.t)
			}
			if seen[h] {
				break
			}
			seen[h] = true
			w.head = append(w.head, j)
			tree, err := commitTree(data)
			if err != nil {
				return walkResult{}, fmt.Errorf("commit %s: %w", h, err)
			}
			w.commits = append(w.commits, h)
			if err := walkTree(tree); err != nil {
				return walkResult{}, err
			}
			break
		}
	}
	w.total = len(seen) - w.had
	return w, nil
}

// hashQueue hands object ids from one producer to several consumers; pushing never blocks.
type hashQueue struct {
	mu     sync.Mutex
	cond   sync.Cond
	items  []plumbing.Hash
	closed bool
}

func newHashQueue() *hashQueue {
	q := &hashQueue{}
	q.cond.L = &q.mu
	return q
}

func (q *hashQueue) push(h plumbing.Hash) {
	q.mu.Lock()
	q.items = append(q.items, h)
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *hashQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

// pop waits for the next id; false once the queue is closed and empty.
func (q *hashQueue) pop() (plumbing.Hash, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return plumbing.ZeroHash, false
	}
	h := q.items[0]
	q.items = q.items[1:]
	return h, true
}

// copyReaders is how many goroutines read blobs for a copy.
const copyReaders = 2

// packJob is one object on its way into a pack: its packed bytes in raw or, when large,
// its content in r (then done is closed once r has been read, before the reader goes on).
type packJob struct {
	h    plumbing.Hash
	t    plumbing.ObjectType
	size int64
	raw  []byte
	r    io.Reader
	done chan struct{}
}

// addJob appends j to the pack; streamed content is hashed as it goes and checked.
func (w *packWriter) addJob(j packJob) error {
	if j.r == nil {
		w.addRaw(j.h, j.raw)
		return nil
	}
	return w.add(j.h, j.t, j.size, j.r)
}

// packJob reads h for a copy, and returns its content too (valid until the next call on r).
func (r *objReader) packJob(h plumbing.Hash) (packJob, []byte, error) {
	t, data, raw, err := r.rawObject(h)
	if err != nil {
		return packJob{}, nil, err
	}
	return packJob{h: h, t: t, size: int64(len(data)), raw: raw}, data, nil
}

// readBlobs reads the blobs the queue hands it until it is closed and sends them on.
func readBlobs(ctx context.Context, r *objReader, blobs *hashQueue, jobs chan<- packJob) error {
	for {
		h, ok := blobs.pop()
		if !ok {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if size, ok := r.wholeSize(h); ok && size > inlineLimit {
			// Large: streamed into the writer, which hashes it on the way.
			t, size, rd, err := r.stream(h)
			if err != nil {
				return fmt.Errorf("object %s: %w", h, err)
			}
			j := packJob{h: h, t: t, size: size, r: rd, done: make(chan struct{})}
			jobs <- j
			<-j.done
			continue
		}
		j, _, err := r.packJob(h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		jobs <- j
	}
}

// checkCommits makes sure the fetched packs (in packDir) hold each pinned commit, and they
// or the cached ones its tree.
func checkCommits(packDir string, cached *objectDB, p *gitPin) error {
	db, err := openPacks(packDir)
	if err != nil {
		return fetchErr(err, "fetch %s: read the fetched objects", p)
	}
	defer db.Close()
	// A tree may be in the cache already, from another commit.
	all := &objectDB{packs: append(slices.Clone(db.packs), cached.packs...), bases: db.bases}
	r := all.reader()
	for _, h := range p.commits() {
		t, data, err := r.read(h)
		if err != nil {
			return fetchErr(err, "fetch %s: commit %s missing after the fetch", p, h)
		}
		if t != plumbing.CommitObject {
			return badPin(nil, "fetch %s: %s is a %s, not a commit: pin the commit it names", p, h, t)
		}
		tree, err := commitTree(data)
		if err != nil {
			return fetchErr(err, "fetch %s: commit %s is corrupt", p, h)
		}
		if !all.has(tree) {
			return fetchErr(nil, "fetch %s: the tree of commit %s is missing", p, h)
		}
	}
	return nil
}

// ensureBare creates the cache's bare repository dir if it does not exist yet, atomically.
func (f *Fetcher) ensureBare(key, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "HEAD")); err == nil {
		return nil
	}
	tmp, err := f.cache.TempDir(cache.KindGit, key)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := writeBareSkeleton(tmp); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	os.RemoveAll(dir) // an empty or broken leftover without HEAD
	// No fsync: if the new directory is lost in a crash, the next fetch makes it again;
	// nothing refers to it before a ref inside it is written, durably.
	return os.Rename(tmp, dir)
}

// writeBareSkeleton writes the files that make dir a bare git repository (git makes the
// other directories it wants as it needs them).
func writeBareSkeleton(dir string) error {
	for _, d := range []string{"objects/pack", "refs"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"HEAD":   "ref: refs/heads/main\n",
		"config": "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// publish moves the packs a fetch wrote into packDir into the repository dir, so that a process
// killed at any moment leaves nothing visible that is incomplete: each pack's index is
// renamed in before its pack (git and go-git both ignore an index without its pack), the
// shallow file is replaced next, and the refs that make the commits visible come last.
// Each step's fsyncs run at once: a crash-safe publish costs three fsync waits, not one
// per file.
func publish(tmpPacks, dir string, shallow []plumbing.Hash, p *gitPin) error {
	packs, err := filepath.Glob(filepath.Join(tmpPacks, "pack-*.pack"))
	if err != nil {
		return err
	}
	var files []string // index first, then its pack
	for _, pack := range packs {
		files = append(files, strings.TrimSuffix(pack, ".pack")+".idx", pack)
	}
	newShallow, err := shallowFile(dir, shallow)
	if err != nil {
		return err
	}
	// 1. The new files' data.
	var steps []func() error
	for _, f := range files {
		steps = append(steps, func() error { return cache.SyncFile(f) })
	}
	if newShallow != "" {
		steps = append(steps, func() error { return cache.SyncFile(newShallow) })
	}
	if err := parallel(steps...); err != nil {
		return err
	}
	// 2. Their names.
	packDir := filepath.Join(dir, "objects", "pack")
	for _, f := range files {
		if err := os.Rename(f, filepath.Join(packDir, filepath.Base(f))); err != nil {
			return err
		}
	}
	if newShallow != "" {
		if err := os.Rename(newShallow, filepath.Join(dir, "shallow")); err != nil {
			os.Remove(newShallow)
			return err
		}
	}
	steps = steps[:0]
	if len(packs) > 0 {
		steps = append(steps, func() error { return cache.SyncDir(packDir) })
	}
	if newShallow != "" {
		steps = append(steps, func() error { return cache.SyncDir(dir) })
	}
	if err := parallel(steps...); err != nil {
		return err
	}
	// 3. The refs.
	steps = steps[:0]
	for _, r := range p.refs {
		steps = append(steps, func() error { return writeRef(dir, r.full, r.obj) })
	}
	for _, h := range p.commits() {
		steps = append(steps, func() error { return writeRef(dir, plumbing.ReferenceName(pinRef+h.String()), h) })
	}
	return parallel(steps...)
}

// parallel runs fns at once and returns their errors.
func parallel(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, f := range fns {
		wg.Go(func() { errs[i] = f() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeRef writes a loose ref atomically, its content durable before it is visible. The
// directory is not fsynced after: losing the rename in a crash only means a refetch.
func writeRef(dir string, name plumbing.ReferenceName, h plumbing.Hash) error {
	p := filepath.Join(dir, filepath.FromSlash(name.String()))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-ref-")
	if err != nil {
		return err
	}
	if _, err := f.WriteString(h.String() + "\n"); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// readShallow reads a repository's shallow file (absent: none).
func readShallow(dir string) ([]plumbing.Hash, error) {
	f, err := os.Open(filepath.Join(dir, "shallow"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []plumbing.Hash
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); len(l) == 40 {
			out = append(out, plumbing.NewHash(l))
		}
	}
	return out, sc.Err()
}

// shallowFile writes, next to dir's shallow file, a new one that adds commits to it, and
// returns its name; "" when it would not change.
func shallowFile(dir string, add []plumbing.Hash) (string, error) {
	have, err := readShallow(dir)
	if err != nil {
		return "", err
	}
	all := append([]plumbing.Hash(nil), have...)
	for _, h := range add {
		if !containsHash(all, h) {
			all = append(all, h)
		}
	}
	if len(all) == len(have) {
		return "", nil
	}
	lines := make([]string, len(all))
	for i, h := range all {
		lines[i] = h.String() + "\n"
	}
	sort.Strings(lines)
	f, err := os.CreateTemp(dir, ".tmp-shallow-")
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(strings.Join(lines, ""))
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

func containsHash(hs []plumbing.Hash, h plumbing.Hash) bool {
	for _, x := range hs {
		if x == h {
			return true
		}
	}
	return false
}

// copyFile copies src to a new file dst (used where a hard link crosses file systems).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
