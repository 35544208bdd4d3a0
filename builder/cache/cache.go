// Package cache is epbuild's content-addressed store of fetched sources: one bare git
// repository per upstream URL (fetched commits kept under refs/epbuild/<sha>) and archives
// named by their sha256. Every write is atomic, so a killed process leaves nothing visible
// that is half-written, and processes share the store through one lock file per key.
package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Kind is the kind of a cache entry.
type Kind string

// The entry kinds.
const (
	KindGit     Kind = "git"     // key: host/path.git of the upstream URL
	KindArchive Kind = "archive" // key: the archive's sha256, lower-case hex
)

// Cache is an opened store directory.
type Cache struct {
	dir      string
	readOnly bool
}

// Layout below the store directory.
const (
	gitDir     = "git"
	archiveDir = "archives/sha256"
	metaDir    = "meta"
	lockDir    = "locks"
	tmpDir     = "tmp"
)

// DefaultDir is $EPBUILD_CACHE, else $XDG_CACHE_HOME/epbuild, else ~/.cache/epbuild, else
// (no home directory: HOME unset, a batch job) epbuild-cache-<uid> in the temporary
// directory: made mode 0700 for this user, refused if anyone else owns it.
func DefaultDir() (string, error) {
	if d := os.Getenv("EPBUILD_CACHE"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "epbuild"), nil
	}
	if home, err := os.UserHomeDir(); err == nil {
		return filepath.Join(home, ".cache", "epbuild"), nil
	}
	return PrivateDir(filepath.Join(os.TempDir(), fmt.Sprintf("epbuild-cache-%d", os.Getuid())))
}

// PrivateDir makes dir (mode 0700) if it is not there and checks that it is a real
// directory of this user's (or root's) that nobody else may write: in a shared directory
// such as /tmp another user could have made it first.
func PrivateDir(dir string) (string, error) {
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", AccessError(dir, "make it", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return "", AccessError(dir, "look at it", err)
	}
	uid := -1
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		uid = int(s.Uid)
	}
	var why string
	switch {
	case !st.IsDir():
		why = "it is not a directory (a link or file someone else may have put there)"
	case uid != os.Getuid() && uid != 0:
		why = "it is " + userName(uid) + "'s, not yours"
	case st.Mode().Perm()&0o022 != 0:
		why = "others may write to it"
	}
	if why != "" {
		return "", &DirError{Dir: dir, Why: why, Code: 3,
			Fix: "set EPBUILD_CACHE (or HOME, or XDG_CACHE_HOME) to a directory of yours, or remove it if it is yours"}
	}
	return dir, nil
}

// OpenDefault opens the store at DefaultDir.
func OpenDefault() (*Cache, error) {
	dir, err := DefaultDir()
	if err != nil {
		return nil, err
	}
	return Open(dir)
}

// Open opens the store at dir for a run, making it (and marking it epbuild's) where it is
// missing or empty and adopting an older epbuild's cache. A cache this process may not
// write (a read-only mount) is opened read-only: it serves what it holds.
func Open(dir string) (*Cache, error) {
	c, state, err := Look(dir)
	if err != nil {
		return nil, err
	}
	if c.readOnly && (state == Marked || state == Legacy) {
		return c, nil
	}
	c.readOnly = false // or making it says why not
	if state == Missing {
		if err := os.MkdirAll(c.dir, 0o755); err != nil {
			return nil, AccessError(c.dir, "make it", err)
		}
	}
	if state != Marked && state != Legacy {
		if err := writeMarker(c.dir); err != nil {
			return nil, AccessError(c.dir, "mark it as epbuild's cache", err)
		}
	}
	for _, d := range []string{gitDir, archiveDir, metaDir, lockDir, tmpDir} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			return nil, AccessError(c.dir, "make "+d, err)
		}
	}
	return c, nil
}

// Look opens the store at dir as it is, making nothing (for ls, du and gc): a missing
// or empty directory is an empty cache, one an older epbuild made is adopted (marked)
// when this process may write it. It refuses anything else (see Inspect).
func Look(dir string) (*Cache, DirState, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, Missing, fmt.Errorf("open cache %s: %w", dir, err)
	}
	state, err := Inspect(abs)
	if err != nil {
		return nil, state, err
	}
	c := &Cache{dir: abs}
	switch {
	case state == Missing:
		if !Writable(filepath.Dir(abs)) {
			c.readOnly = true
		}
	case !Writable(abs):
		c.readOnly = true
	case state == Legacy:
		if err := writeMarker(abs); err != nil {
			return nil, state, AccessError(abs, "mark it as epbuild's cache", err)
		}
	}
	return c, state, nil
}

// ReadOnly reports whether this process may not write the cache (a read-only mount,
// another user's directory): it serves what it holds, and records nothing.
func (c *Cache) ReadOnly() bool { return c.readOnly }

// Dir is the store's absolute directory.
func (c *Cache) Dir() string { return c.dir }

// CheckKey refuses keys that could name a path outside their place in the store.
func CheckKey(kind Kind, key string) error {
	switch kind {
	case KindArchive:
		if len(key) != 64 || strings.Trim(key, "0123456789abcdef") != "" {
			return fmt.Errorf("cache key %q: an archive key is a lower-case hex sha256", key)
		}
	case KindGit:
		if key == "" || path.IsAbs(key) || path.Clean(key) != key || strings.HasPrefix(key, "../") ||
			!strings.HasSuffix(key, ".git") || strings.Contains(key, "\\") {
			return fmt.Errorf("cache key %q: a git key is a clean relative path ending in .git", key)
		}
		for _, p := range strings.Split(key, "/") {
			if p == ".." || p == "." || p == ".git" {
				return fmt.Errorf("cache key %q: a git key may not contain %q", key, p)
			}
		}
	default:
		return fmt.Errorf("cache key %q: unknown kind %q", key, kind)
	}
	return nil
}

// Path is where the entry kind/key lives (it may not exist yet).
func (c *Cache) Path(kind Kind, key string) string {
	if kind == KindArchive {
		return filepath.Join(c.dir, archiveDir, key)
	}
	return filepath.Join(c.dir, gitDir, filepath.FromSlash(key))
}

// GitDir is the bare repository for a git key.
func (c *Cache) GitDir(key string) string { return c.Path(KindGit, key) }

// ArchivePath is the file for an archive's sha256.
func (c *Cache) ArchivePath(sha256 string) string { return c.Path(KindArchive, sha256) }

// tempPrefix names the temp files of kind/key. '#' never occurs in an escaped key, so one
// key's prefix is never another's.
func tempPrefix(kind Kind, key string) string {
	return string(kind) + "-" + url.PathEscape(key) + "#"
}

// TempDir makes a directory under the store's tmp/ for work on kind/key, on the same file
// system as the entries so that its contents can be renamed into place. Call it with the
// key's lock held: the next holder of the lock removes it if this process dies.
func (c *Cache) TempDir(kind Kind, key string) (string, error) {
	d, err := os.MkdirTemp(filepath.Join(c.dir, tmpDir), tempPrefix(kind, key))
	if err != nil {
		return "", fmt.Errorf("cache %s: make a temp directory: %w", c.dir, err)
	}
	return d, nil
}

// CreateTemp opens a new file under the store's tmp/ for work on kind/key (see TempDir).
func (c *Cache) CreateTemp(kind Kind, key string) (*os.File, error) {
	f, err := os.CreateTemp(filepath.Join(c.dir, tmpDir), tempPrefix(kind, key))
	if err != nil {
		return nil, fmt.Errorf("cache %s: make a temp file: %w", c.dir, err)
	}
	return f, nil
}

// Lock takes the exclusive lock of kind/key, waiting until it is free or ctx is done, and
// removes the temp files of a holder that died (only a holder writes them). Lock files are
// never deleted: deleting one would let two processes hold "the" lock.
func (c *Cache) Lock(ctx context.Context, kind Kind, key string) (unlock func(), err error) {
	if err := CheckKey(kind, key); err != nil {
		return nil, err
	}
	if c.readOnly {
		// nothing can change through this mount, and nothing can be locked in it
		return func() {}, nil
	}
	l, err := OpenLock(filepath.Join(c.dir, lockDir, LockFile(kind, key)), 0o644, LockFix(c.dir))
	if err != nil {
		return nil, err
	}
	if err := l.Wait(ctx, false, 20*time.Millisecond, nil); err != nil {
		l.Close()
		return nil, fmt.Errorf("lock %s %s in cache %s: %w", kind, key, c.dir, err)
	}
	if err := c.removeTemps(tempPrefix(kind, key)); err != nil {
		l.Close()
		return nil, err
	}
	return l.Close, nil
}

// TempOwner names the entry whose lock guards the temp file or directory name under
// tmp/ (one TempDir or CreateTemp made), or reports false for another name.
func TempOwner(name string) (Kind, string, bool) {
	esc, _, ok := strings.Cut(name, "#")
	if !ok {
		return "", "", false
	}
	for _, k := range []Kind{KindGit, KindArchive} {
		if e, ok := strings.CutPrefix(esc, string(k)+"-"); ok {
			if key, err := url.PathUnescape(e); err == nil && CheckKey(k, key) == nil {
				return k, key, true
			}
		}
	}
	return "", "", false
}

// LockFile is the name, under the cache's locks/, of the lock of kind/key.
func LockFile(kind Kind, key string) string {
	return string(kind) + "-" + url.PathEscape(key) + ".lock"
}

func (c *Cache) removeTemps(prefix string) error {
	des, err := os.ReadDir(filepath.Join(c.dir, tmpDir))
	if err != nil {
		return fmt.Errorf("cache %s: %w", c.dir, err)
	}
	for _, d := range des {
		if strings.HasPrefix(d.Name(), prefix) {
			if err := os.RemoveAll(filepath.Join(c.dir, tmpDir, d.Name())); err != nil {
				return fmt.Errorf("cache %s: remove a dead fetch's leftovers: %w", c.dir, err)
			}
		}
	}
	return nil
}

type meta struct {
	Kind Kind   `json:"kind"`
	Key  string `json:"key"`
	URL  string `json:"url"`
}

func (c *Cache) metaPath(kind Kind, key string) string {
	return filepath.Join(c.dir, metaDir, string(kind), filepath.FromSlash(key)+".json")
}

// Touch records that kind/key (fetched from url) was used now. The last-use time is the
// mtime of its meta file, so a use costs one utimes call, not a rewrite.
func (c *Cache) Touch(kind Kind, key, url string) error {
	if c.readOnly {
		return nil // best effort: the entry only looks older to gc
	}
	p := c.metaPath(kind, key)
	now := time.Now()
	if err := os.Chtimes(p, now, now); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("record use of %s %s: %w", kind, key, err)
	}
	b, err := json.Marshal(meta{Kind: kind, Key: key, URL: url})
	if err != nil {
		return err
	}
	// Renamed into place but not fsynced: meta is advisory (List reads a damaged one as
	// "no URL"), and two fsyncs would cost a cold fetch more than the rest of its writes.
	if err := writeFileNoSync(p, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("record use of %s %s: %w", kind, key, err)
	}
	return nil
}

// Entry is one cached source.
type Entry struct {
	Kind     Kind      `json:"kind"`
	Key      string    `json:"key"`
	URL      string    `json:"url,omitempty"`
	Path     string    `json:"path"`
	Size     int64     `json:"size"`
	LastUsed time.Time `json:"last_used"`
}

// List returns every entry, git repositories first, each kind sorted by key.
func (c *Cache) List() ([]Entry, error) {
	var out []Entry
	root := filepath.Join(c.dir, gitDir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && errors.Is(err, fs.ErrNotExist) {
				return nil // a cache that fetched nothing yet
			}
			return err
		}
		if p == root || !d.IsDir() || !strings.HasSuffix(d.Name(), ".git") {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		e, err := c.entry(KindGit, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		out = append(out, e)
		return filepath.SkipDir
	})
	if err != nil {
		return nil, fmt.Errorf("list cache %s: %w", c.dir, err)
	}
	des, err := os.ReadDir(filepath.Join(c.dir, archiveDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list cache %s: %w", c.dir, err)
	}
	for _, d := range des {
		if CheckKey(KindArchive, d.Name()) != nil {
			continue
		}
		e, err := c.entry(KindArchive, d.Name())
		if err != nil {
			return nil, fmt.Errorf("list cache %s: %w", c.dir, err)
		}
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind == KindGit
		}
		return out[i].Key < out[j].Key
	})
	return out, nil
}

func (c *Cache) entry(kind Kind, key string) (Entry, error) {
	e := Entry{Kind: kind, Key: key, Path: c.Path(kind, key)}
	size, mtime, err := du(e.Path)
	if err != nil {
		return e, err
	}
	e.Size, e.LastUsed = size, mtime
	mp := c.metaPath(kind, key)
	if fi, err := os.Stat(mp); err == nil {
		e.LastUsed = fi.ModTime()
		if b, err := os.ReadFile(mp); err == nil {
			var m meta
			if json.Unmarshal(b, &m) == nil {
				e.URL = m.URL
			}
		}
	}
	return e, nil
}

// du sums the sizes of the regular files under p and returns the newest mtime.
func du(p string) (int64, time.Time, error) {
	var size int64
	var newest time.Time
	err := filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			size += fi.Size()
		}
		if fi.ModTime().After(newest) {
			newest = fi.ModTime()
		}
		return nil
	})
	return size, newest, err
}

// Usage is the total size of all entries in bytes.
func (c *Cache) Usage() (int64, error) {
	es, err := c.List()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range es {
		n += e.Size
	}
	return n, nil
}

// UnusedFor is a GC keep function: it keeps entries used within d.
func UnusedFor(d time.Duration, now time.Time) func(Entry) bool {
	return func(e Entry) bool { return now.Sub(e.LastUsed) < d }
}

// GC removes every entry for which keep returns false, skipping entries that another
// process holds locked (they are in use). It returns the removed entries. Leftovers
// under tmp/ are the caller's to sweep (TempOwner names their lock): tmp/ is shared
// with the stage store.
func (c *Cache) GC(ctx context.Context, keep func(Entry) bool) ([]Entry, error) {
	es, err := c.List()
	if err != nil {
		return nil, err
	}
	var removed []Entry
	for _, e := range es {
		if keep(e) {
			continue
		}
		ok, err := c.remove(ctx, e)
		if err != nil {
			return removed, err
		}
		if ok {
			removed = append(removed, e)
		}
	}
	return removed, nil
}

func (c *Cache) remove(ctx context.Context, e Entry) (bool, error) {
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	unlock, err := c.Lock(tctx, e.Kind, e.Key)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, nil // in use elsewhere: keep it
	}
	defer unlock()
	// Rename out of sight first, so that the entry vanishes at once and a crash during the
	// slow removal leaves only a leftover under tmp/, never half an entry.
	gone := filepath.Join(c.dir, tmpDir, fmt.Sprintf("gc-%s-%d", e.Kind, time.Now().UnixNano()))
	if err := os.Rename(e.Path, gone); err != nil {
		return false, fmt.Errorf("gc: remove %s %s: %w", e.Kind, e.Key, err)
	}
	if err := os.Remove(c.metaPath(e.Kind, e.Key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("gc: remove %s %s: %w", e.Kind, e.Key, err)
	}
	if err := os.RemoveAll(gone); err != nil {
		return false, fmt.Errorf("gc: remove %s: %w", gone, err)
	}
	return true, nil
}
