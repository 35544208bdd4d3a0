package source

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
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
	"github.com/go-git/go-git/v5/plumbing/object"
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
}

func (p *gitPin) String() string { return p.url + "@" + p.commit.String() }

// commits are the commits that the fetch brings: the pin and those of name=sha extra refs.
func (p *gitPin) commits() []plumbing.Hash {
	out := []plumbing.Hash{p.commit}
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
	dir := f.cache.GitDir(p.key)
	if f.haveGit(dir, p) {
		return f.cache.Touch(cache.KindGit, p.key, p.url)
	}
	tmp, err := f.cache.TempDir(cache.KindGit, p.key)
	if err != nil {
		return fetchErr(err, "fetch %s", p)
	}
	defer os.RemoveAll(tmp)
	if err := writeBareSkeleton(tmp); err != nil {
		return fetchErr(err, "fetch %s", p)
	}
	dst := openStorage(tmp)
	defer dst.Close()
	var shallow []plumbing.Hash
	if f.mirror != "" {
		shallow, err = f.fetchFromMirror(ctx, p, tmp)
	} else {
		shallow, err = f.fetchFromRemote(ctx, p, dst)
	}
	if err != nil {
		return err
	}
	if err := checkCommits(dst, p); err != nil {
		return err
	}
	// The cache repository is made only now, so that a failed fetch leaves nothing.
	if err := f.ensureBare(p.key, dir); err != nil {
		return fetchErr(err, "fetch %s: prepare the cache repository %s", p, dir)
	}
	if err := publish(tmp, dir, shallow, p); err != nil {
		return fetchErr(err, "fetch %s: store into the cache %s", p, dir)
	}
	f.log.Debug("fetched", "source", p.String(), "cache", dir)
	return f.cache.Touch(cache.KindGit, p.key, p.url)
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
	for i := range p.refs {
		if err := resolveRef(st, &p.refs[i]); err != nil {
			return false
		}
	}
	return true
}

// openStorage opens a repository's object and ref storage (dir is the git directory).
func openStorage(dir string) *filesystem.Storage {
	return filesystem.NewStorageWithOptions(osfs.New(dir), gitcache.NewObjectLRU(16*gitcache.MiByte),
		filesystem.Options{KeepDescriptors: true, LargeObjectThreshold: 4 << 20})
}

// resolveRef finds r in st and checks that it peels to r.want.
func resolveRef(st storer.Storer, r *refPin) error {
	for _, name := range candidates(r.name) {
		ref, err := storer.ResolveReference(st, name)
		if err != nil {
			continue
		}
		peeled, err := peel(st, ref.Hash())
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
func peel(st storer.EncodedObjectStorer, h plumbing.Hash) (plumbing.Hash, error) {
	for i := 0; i < 10; i++ {
		o, err := st.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return h, err
		}
		if o.Type() != plumbing.TagObject {
			return h, nil
		}
		t, err := object.DecodeTag(st, o)
		if err != nil {
			return h, err
		}
		h = t.Target
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

// fetchFromMirror copies p's objects from the mirror's bare repository into dst, in
// process: the mirror is read with go-git and the objects of each pinned commit (its whole
// tree, no history) are packed into dst.
func (f *Fetcher) fetchFromMirror(ctx context.Context, p *gitPin, dst string) ([]plumbing.Hash, error) {
	mdir := f.mirrorDir(p.key)
	if _, err := os.Stat(filepath.Join(mdir, "objects")); err != nil {
		return nil, fetchErr(nil, "fetch %s: no mirror entry for %s: looked for the bare repository %s (write one with `epbuild mirror`)", p, p.url, mdir)
	}
	src := openStorage(mdir)
	defer src.Close()
	for i := range p.refs {
		err := resolveRef(src, &p.refs[i])
		if errors.Is(err, errRefNotFound) {
			return nil, fetchErr(nil, "fetch %s: ref %q not in the mirror %s", p, p.refs[i].name, mdir)
		}
		if err != nil {
			var e *Error
			if errors.As(err, &e) {
				return nil, badPin(nil, "fetch %s: in the mirror %s: %s", p, mdir, e.Msg)
			}
			return nil, fetchErr(err, "fetch %s: ref %q in the mirror %s", p, p.refs[i].name, mdir)
		}
	}
	roots := p.commits()
	for _, h := range roots {
		if _, err := src.EncodedObject(plumbing.AnyObject, h); err != nil {
			if errors.Is(err, plumbing.ErrObjectNotFound) {
				return nil, fetchErr(nil, "fetch %s: commit %s not in the mirror %s", p, h, mdir)
			}
			return nil, fetchErr(err, "fetch %s: read commit %s in the mirror %s", p, h, mdir)
		}
	}
	for _, r := range p.refs {
		if !containsHash(roots, r.obj) {
			roots = append(roots, r.obj)
		}
	}
	shallow, err := copyObjects(ctx, src, mdir, dst, roots, nil, newMeter(f.progress, f.log, p.url, "objects", 0))
	if err != nil {
		return nil, fetchErr(err, "fetch %s: copy from the mirror %s", p, mdir)
	}
	return shallow, nil
}

// copyObjects packs the closure of roots (tags, commits with their whole trees but no
// parents) from src into a new pack in the git directory dst and returns the commits, which are dst's shallow boundary.
// Tags and commits for which skip is true are taken as present already, closure included.
// srcDir is src's git directory, opened again by the extra readers.
func copyObjects(ctx context.Context, src storer.EncodedObjectStorer, srcDir, dst string, roots []plumbing.Hash, skip func(plumbing.Hash) bool, m *meter) ([]plumbing.Hash, error) {
	defer m.done()
	var objs, commits []plumbing.Hash
	seen := make(map[plumbing.Hash]bool)
	add := func(h plumbing.Hash) bool {
		if seen[h] {
			return false
		}
		seen[h] = true
		objs = append(objs, h)
		return true
	}
	var walkTree func(h plumbing.Hash) error
	walkTree = func(h plumbing.Hash) error {
		if !add(h) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		t, err := object.GetTree(src, h)
		if err != nil {
			return fmt.Errorf("tree %s: %w", h, err)
		}
		for _, e := range t.Entries {
			switch e.Mode {
			case filemode.Dir:
				if err := walkTree(e.Hash); err != nil {
					return err
				}
			case filemode.Submodule: // a commit of another repository
			default:
				add(e.Hash)
			}
		}
		return nil
	}
	for _, h := range roots {
		for i := 0; ; i++ {
			if skip != nil && skip(h) {
				break
			}
			o, err := src.EncodedObject(plumbing.AnyObject, h)
			if err != nil {
				return nil, fmt.Errorf("object %s: %w", h, err)
			}
			if o.Type() == plumbing.TagObject && i < 10 {
				add(h)
				t, err := object.DecodeTag(src, o)
				if err != nil {
					return nil, fmt.Errorf("tag %s: %w", h, err)
				}
				h = t.Target
				continue
			}
			if o.Type() != plumbing.CommitObject {
				return nil, fmt.Errorf("object %s is a %s, not a commit", h, o.Type())
			}
			if !add(h) {
				break
			}
			c, err := object.DecodeCommit(src, o)
			if err != nil {
				return nil, fmt.Errorf("commit %s: %w", h, err)
			}
			commits = append(commits, h)
			if err := walkTree(c.TreeHash); err != nil {
				return nil, err
			}
			break
		}
	}
	m.set(0, int64(len(objs)))
	if len(objs) == 0 {
		return nil, nil
	}
	pw, err := newPackWriter(filepath.Join(dst, "objects", "pack"), len(objs))
	if err != nil {
		return nil, err
	}
	// Reading (inflating, resolving deltas: the slow part in go-git) is spread over
	// readers, each with its own storage since go-git's is not safe for concurrent use;
	// one writer compresses, hashes and writes what they send.
	jobs := make(chan packJob, 32)
	werr := make(chan error, 1)
	go func() {
		var err error
		for j := range jobs {
			if err == nil {
				var r io.Reader = bytes.NewReader(j.data)
				if j.r != nil {
					r = j.r
				}
				err = pw.add(j.h, j.t, j.size, r)
				m.set(m.cur.Load()+1, -1)
			}
			if j.done != nil {
				close(j.done)
			}
		}
		werr <- err
	}()
	rctx, cancel := context.WithCancel(ctx)
	rerrs := make([]error, copyReaders)
	var wg sync.WaitGroup
	for i := 0; i < copyReaders; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			st := src
			if i > 0 {
				s := openStorage(srcDir)
				defer s.Close()
				st = s
			}
			var part []plumbing.Hash
			for k := i; k < len(objs); k += copyReaders {
				part = append(part, objs[k])
			}
			if rerrs[i] = readObjects(rctx, st, part, jobs); rerrs[i] != nil {
				cancel()
			}
		}(i)
	}
	wg.Wait()
	cancel()
	close(jobs)
	if err := <-werr; err != nil || errors.Join(rerrs...) != nil {
		pw.abort()
		return nil, errors.Join(append(rerrs, err)...)
	}
	if _, _, err := pw.finish(); err != nil {
		return nil, err
	}
	return commits, nil
}

// copyReaders is how many goroutines read objects for a copy.
const copyReaders = 2

// packJob is one object on its way into a pack: its content in data, or, when large, in r
// (then done is closed once r has been read, before the reader goes on).
type packJob struct {
	h    plumbing.Hash
	t    plumbing.ObjectType
	size int64
	data []byte
	r    io.Reader
	done chan struct{}
}

func readObjects(ctx context.Context, src storer.EncodedObjectStorer, objs []plumbing.Hash, jobs chan<- packJob) error {
	for _, h := range objs {
		if err := ctx.Err(); err != nil {
			return err
		}
		o, err := src.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		r, err := o.Reader()
		if err != nil {
			return fmt.Errorf("object %s: %w", h, err)
		}
		j := packJob{h: h, t: o.Type(), size: o.Size()}
		if j.size <= inlineLimit {
			j.data, err = io.ReadAll(r)
			r.Close()
			if err != nil {
				return fmt.Errorf("object %s: %w", h, err)
			}
			jobs <- j
			continue
		}
		j.r, j.done = r, make(chan struct{})
		jobs <- j
		<-j.done
		r.Close()
	}
	return nil
}

// checkCommits makes sure the fetched repository holds each pinned commit and its tree.
func checkCommits(st storer.EncodedObjectStorer, p *gitPin) error {
	for _, h := range p.commits() {
		o, err := st.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			return fetchErr(err, "fetch %s: commit %s missing after the fetch", p, h)
		}
		if o.Type() != plumbing.CommitObject {
			return badPin(nil, "fetch %s: %s is a %s, not a commit: pin the commit it names", p, h, o.Type())
		}
		c, err := object.DecodeCommit(st, o)
		if err != nil {
			return fetchErr(err, "fetch %s: commit %s is corrupt", p, h)
		}
		if _, err := st.EncodedObject(plumbing.TreeObject, c.TreeHash); err != nil {
			return fetchErr(err, "fetch %s: the tree of commit %s is missing", p, h)
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

// writeBareSkeleton writes the files that make dir a bare git repository.
func writeBareSkeleton(dir string) error {
	for _, d := range []string{"objects/pack", "objects/info", "refs/heads", "refs/tags"} {
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

// publish moves what a fetch wrote into tmp into the repository dir, so that a process
// killed at any moment leaves nothing visible that is incomplete: each pack's index is
// renamed in before its pack (git and go-git both ignore an index without its pack), the
// shallow file is replaced next, and the refs that make the commits visible come last.
func publish(tmp, dir string, shallow []plumbing.Hash, p *gitPin) error {
	packs, err := filepath.Glob(filepath.Join(tmp, "objects", "pack", "pack-*.pack"))
	if err != nil {
		return err
	}
	packDir := filepath.Join(dir, "objects", "pack")
	for _, pack := range packs {
		idx := strings.TrimSuffix(pack, ".pack") + ".idx"
		for _, src := range []string{idx, pack} {
			if err := cache.SyncFile(src); err != nil {
				return err
			}
			if err := os.Rename(src, filepath.Join(packDir, filepath.Base(src))); err != nil {
				return err
			}
		}
	}
	if len(packs) > 0 {
		if err := cache.SyncDir(packDir); err != nil {
			return err
		}
	}
	if err := addShallow(dir, shallow); err != nil {
		return err
	}
	for _, r := range p.refs {
		if err := writeRef(dir, r.full, r.obj); err != nil {
			return err
		}
	}
	for _, h := range p.commits() {
		if err := writeRef(dir, plumbing.ReferenceName(pinRef+h.String()), h); err != nil {
			return err
		}
	}
	return nil
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

// addShallow adds commits to dir's shallow file, atomically and durably (before the refs
// of those commits are written).
func addShallow(dir string, add []plumbing.Hash) error {
	have, err := readShallow(dir)
	if err != nil {
		return err
	}
	all := append([]plumbing.Hash(nil), have...)
	for _, h := range add {
		if !containsHash(all, h) {
			all = append(all, h)
		}
	}
	if len(all) == len(have) {
		return nil
	}
	lines := make([]string, len(all))
	for i, h := range all {
		lines[i] = h.String() + "\n"
	}
	sort.Strings(lines)
	return cache.WriteFile(filepath.Join(dir, "shallow"), []byte(strings.Join(lines, "")), 0o644)
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
