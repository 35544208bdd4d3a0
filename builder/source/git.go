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
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	gitcache "github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/source/gitobj"
	"github.com/epbuild/epbuild/recipes"
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

// checkRefName applies git's rules for ref names (recipes.CheckRefName, the one check
// validate makes too): a name can neither be misread by git nor escape refs/.
func checkRefName(what, name string) error {
	if err := recipes.CheckRefName(name); err != nil {
		return badPin(err, "%s", what)
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
	cached, err := gitobj.OpenPacks(filepath.Join(dir, "objects", "pack"))
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
	db, err := gitobj.Open(filepath.Join(dir, "objects"))
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
func resolveRef(refs storer.ReferenceStorer, db *gitobj.DB, r *refPin) error {
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
func peel(db *gitobj.DB, h plumbing.Hash) (plumbing.Hash, error) {
	r := db.Reader()
	for i := 0; i < 10; i++ {
		t, data, err := r.Read(h)
		if err != nil {
			return h, err
		}
		if t != plumbing.TagObject {
			return h, nil
		}
		tgt, err := gitobj.TagTarget(data)
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
func (f *Fetcher) fetchFromMirror(ctx context.Context, p *gitPin, packDir string, cached *gitobj.DB, root string) ([]plumbing.Hash, *worktree, error) {
	mdir := f.mirrorDir(p.key)
	if _, err := os.Stat(filepath.Join(mdir, "objects")); err != nil {
		return nil, nil, fetchErr(nil, "fetch %s: no mirror entry for %s: looked for the bare repository %s (write one with `epbuild mirror`)", p, p.url, mdir)
	}
	db, err := gitobj.Open(filepath.Join(mdir, "objects"))
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
		if !db.Has(h) {
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
		shallow, err = gitobj.Copy(ctx, db, packDir, roots, nil, cached.Packed, m.set)
		m.done()
	} else {
		shallow, w, err = copyCheckout(ctx, db, cached, packDir, roots, p.commit, root, m)
	}
	if err != nil {
		return nil, nil, fetchErr(err, "fetch %s: copy from the mirror %s", p, mdir)
	}
	return shallow, w, nil
}

// checkCommits makes sure the fetched packs (in packDir) hold each pinned commit, and they
// or the cached ones its tree.
func checkCommits(packDir string, cached *gitobj.DB, p *gitPin) error {
	db, err := gitobj.OpenPacks(packDir)
	if err != nil {
		return fetchErr(err, "fetch %s: read the fetched objects", p)
	}
	defer db.Close()
	// A tree may be in the cache already, from another commit.
	all := gitobj.Union(db, cached)
	r := all.Reader()
	for _, h := range p.commits() {
		t, data, err := r.Read(h)
		if err != nil {
			return fetchErr(err, "fetch %s: commit %s missing after the fetch", p, h)
		}
		if t != plumbing.CommitObject {
			return badPin(nil, "fetch %s: %s is a %s, not a commit: pin the commit it names", p, h, t)
		}
		tree, err := gitobj.CommitTree(data)
		if err != nil {
			return fetchErr(err, "fetch %s: commit %s is corrupt", p, h)
		}
		if !all.Has(tree) {
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
