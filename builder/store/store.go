package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/disk"
)

// Store keeps each stage's output under stages/<stage>/<key>/: a directory that appears
// whole (built in a temporary sibling, then renamed) or not at all. A rerun with nothing
// changed finds every key present and does no work; a run killed midway leaves only
// temporary directories, which the next run ignores and replaces.
//
// Runs share a store. Two locks per key keep them apart: the produce lock lets one run
// do the work while the others wait for its output, and the use lock is held shared by
// every run while one of its stages works (its inputs are outputs of the stages before)
// and exclusively, for a moment, by a forced rerun that exchanges a new output for the
// old one. So an output never changes under a stage that reads it.
type Store struct {
	dir    string
	opened time.Time
	// readOnly: the cache may not be written here (a shared cache mounted read-only): it
	// serves the outputs it holds, without locks (nothing changes through this mount),
	// use times or run records.
	readOnly bool

	mu   sync.Mutex
	used map[string]bool // stage/key of the outputs this store handed out
	redo map[string]bool // stage/key marked by Forget: the next Produce makes it again
	run  *runRecord      // what this run uses, for cache gc (made on first use)
}

// OpenStore opens (creating) the stage store under dir.
func OpenStore(dir string) (*Store, error) {
	s := &Store{dir: dir, opened: time.Now(), used: map[string]bool{}, redo: map[string]bool{}}
	if _, err := os.Stat(filepath.Join(dir, "stages")); err == nil && !cache.Writable(dir) {
		s.readOnly = true
		return s, nil
	}
	for _, d := range []string{"stages", "locks", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			if cache.IsAccess(err) {
				return nil, cache.AccessError(dir, "open the stage store", err)
			}
			return nil, disk.NoSpaceOr(fmt.Errorf("open stage store %s: %w", dir, err), "open the stage store", dir, 0, FixCacheSpace)
		}
	}
	s.sweepDead()
	return s, nil
}

// sweepDead removes what killed runs left under tmp/: the entries whose owners' locks
// (a stage's produce lock, a source's lock) are free, so that no run of theirs is alive.
// Entries no lock names are cache gc's (a run in progress may own them).
func (s *Store) sweepDead() {
	tmp := filepath.Join(s.dir, "tmp")
	des, _ := os.ReadDir(tmp)
	var locks []string
	if ls, err := os.ReadDir(filepath.Join(s.dir, "locks")); err == nil {
		for _, l := range ls {
			locks = append(locks, l.Name())
		}
	}
	for _, d := range des {
		if !IsTemp(d.Name()) {
			continue
		}
		owned := TempLocks(s.dir, d.Name(), locks)
		var held []func()
		for _, l := range owned {
			if u, ok, err := TryLock(l); err == nil && ok {
				held = append(held, u)
			}
		}
		if len(owned) > 0 && len(held) == len(owned) {
			p := filepath.Join(tmp, d.Name())
			_ = disk.MakeWritable(p)
			_ = os.RemoveAll(p)
		}
		for _, u := range held {
			u()
		}
	}
}

// ReadOnly reports whether the store only serves what it holds (see Store.readOnly).
func (s *Store) ReadOnly() bool { return s.readOnly }

const FixCacheSpace = "free space there or point EPBUILD_CACHE at a larger file system, then rerun (finished stages are kept)"

// Dir is the cache directory the store lives in.
func (s *Store) Dir() string { return s.dir }

// Path is where a stage's output for key lives (whether or not it exists yet).
func (s *Store) Path(stage, key string) string { return filepath.Join(s.dir, "stages", stage, key) }

// stepLogs makes an empty directory for the logs of the stage output key while it is
// made (the produce lock is held): <cache>/logs/<stage>-<key>. A failed attempt's logs
// stay there until the next attempt or `cache gc`.
func (s *Store) StepLogs(stage, key string) (string, error) {
	d := filepath.Join(s.dir, "logs", stage+"-"+key)
	if err := os.RemoveAll(d); err != nil {
		return "", fmt.Errorf("remove the logs of an earlier attempt: %w", err)
	}
	if err := os.MkdirAll(d, 0o755); err != nil {
		return "", disk.NoSpaceOr(fmt.Errorf("make the log directory: %w", err), "make the log directory", s.dir, 0, FixCacheSpace)
	}
	return d, nil
}

// Has reports whether the stage output for key is complete.
func (s *Store) Has(stage, key string) bool {
	_, err := os.Stat(filepath.Join(s.Path(stage, key), ".done"))
	return err == nil
}

// madeSince reports whether the output for key was completed at or after t.
func (s *Store) madeSince(stage, key string, t time.Time) bool {
	st, err := os.Stat(filepath.Join(s.Path(stage, key), ".done"))
	return err == nil && !st.ModTime().Before(t)
}

// Produce runs make into a fresh temporary directory and publishes it as the stage's
// output for key, unless it is already there (or, after Forget, unless another run made
// it again since this store was opened). Concurrent processes wait for each other on a
// lock per key, so the work happens once. It reports whether it found the output
// cached. While make runs, every output this store handed out before is held in use.
func (s *Store) Produce(ctx context.Context, stage, key string, make func(dir string) error) (cached bool, err error) {
	id := stage + "/" + key
	// Recorded before it is looked at, so that cache gc, which reads the records of the
	// runs in progress, never removes it from under this run (see hit).
	if err := s.record(id); err != nil {
		return false, err
	}
	s.mu.Lock()
	redo := s.redo[id]
	delete(s.redo, id)
	s.mu.Unlock()
	if !redo {
		ok, err := s.hit(ctx, stage, key)
		if err != nil {
			return false, err
		}
		if ok {
			s.markUsed(id)
			return true, nil
		}
	}
	if s.readOnly {
		return false, &cache.DirError{Dir: s.dir, Code: 3, Why: fmt.Sprintf("it is read-only here, and the %s stage %s is not in it", stage, key[:12]),
			Fix: cache.FixWritable}
	}
	unlock, err := s.lock(ctx, stage+"-"+key+".lock", false)
	if err != nil {
		return false, err
	}
	defer unlock()
	if !redo && s.Has(stage, key) {
		s.markUsed(id)
		return true, nil
	}
	// what a run killed while making it left behind (only a holder of the lock writes it)
	s.removeTemps(stage + "-" + key + "-")
	if redo && s.madeSince(stage, key, s.opened) {
		// a run forced at the same time made it again while this one waited
		s.markUsed(id)
		return false, nil
	}
	final := s.Path(stage, key)
	what := fmt.Sprintf("%s stage %s", stage, key[:12])
	if err := os.MkdirAll(filepath.Dir(final), 0o755); err != nil {
		return false, disk.NoSpaceOr(fmt.Errorf("%s: %w", what, err), what, s.dir, 0, FixCacheSpace)
	}
	tmp, err := os.MkdirTemp(filepath.Join(s.dir, "tmp"), stage+"-"+key+"-")
	if err != nil {
		return false, disk.NoSpaceOr(fmt.Errorf("%s: %w", what, err), what, s.dir, 0, FixCacheSpace)
	}
	keep := false
	defer func() {
		if !keep {
			_ = disk.MakeWritable(tmp)
			_ = os.RemoveAll(tmp)
		}
	}()
	freeBefore, _, _ := disk.DiskFree(s.dir)
	release, err := s.holdUsed(ctx)
	if err != nil {
		return false, err
	}
	err = make(tmp)
	release()
	if err != nil {
		return false, s.noSpace(ctx, err, what, freeBefore)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".done"), []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		return false, s.noSpace(ctx, fmt.Errorf("%s: %w", what, err), what, freeBefore)
	}
	if err := s.publish(ctx, stage+"-"+key, tmp, final); err != nil {
		return false, s.noSpace(ctx, fmt.Errorf("%s: publish: %w", what, err), what, freeBefore)
	}
	keep = true
	s.markUsed(id)
	return false, nil
}

// hit reports whether the output for key is there for this run to use, and marks it
// used now. It looks under the use lock, shared: cache gc removes an output only with
// that lock held exclusively and after reading the records of the runs in progress, so
// either gc sees this run's record (made before) and keeps the output, or this run
// looks after gc removed it, and makes it again.
func (s *Store) hit(ctx context.Context, stage, key string) (bool, error) {
	if !s.Has(stage, key) {
		return false, nil
	}
	if s.readOnly {
		return true, nil // nothing changes through this mount
	}
	unlock, err := s.lock(ctx, stage+"-"+key+".use", true)
	if err != nil {
		return false, err
	}
	defer unlock()
	if !s.Has(stage, key) {
		return false, nil
	}
	touch(filepath.Join(s.Path(stage, key), UsedName))
	return true, nil
}

// usedName is the file in a stage output whose mtime is its last use (cache gc removes
// outputs by it).
const UsedName = ".used"

// touch sets the mtime of path to now, creating it empty; a failure (a read-only cache)
// only makes the output look older to cache gc.
func touch(path string) {
	now := time.Now()
	if os.Chtimes(path, now, now) == nil {
		return
	}
	if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		f.Close()
	}
}

// removeTemps removes the entries of tmp/ that begin with prefix.
func (s *Store) removeTemps(prefix string) {
	des, _ := os.ReadDir(filepath.Join(s.dir, "tmp"))
	for _, d := range des {
		if strings.HasPrefix(d.Name(), prefix) {
			p := filepath.Join(s.dir, "tmp", d.Name())
			_ = disk.MakeWritable(p)
			_ = os.RemoveAll(p)
		}
	}
}

// publish puts tmp at final. Where an output is already there (a forced rerun, or an
// incomplete one an older epbuild left), the two are exchanged in one step once no run
// uses it, and the old one is removed.
func (s *Store) publish(ctx context.Context, name, tmp, final string) error {
	if err := disk.RenameNoReplace(tmp, final); err == nil || !errors.Is(err, fs.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY) {
		return err
	}
	unlock, err := s.lock(ctx, name+".use", false)
	if err != nil {
		return err
	}
	defer unlock()
	if err := disk.Swap(tmp, final, tmp+".old"); err != nil {
		return err
	}
	// tmp now holds the old output
	_ = disk.MakeWritable(tmp)
	_ = os.RemoveAll(tmp)
	return nil
}

// Forget makes the next Produce of key in this store make it again (for --force). The
// old output stays until the new one replaces it: other runs may be reading it.
func (s *Store) Forget(stage, key string) error {
	s.mu.Lock()
	s.redo[stage+"/"+key] = true
	s.mu.Unlock()
	return nil
}

// runRecord is this run's file under runs/: the stage/key of every output it uses, a
// line each, written before the output is looked at. The file is locked (flock,
// exclusive) from before its name appears until the run ends, with the process if it
// dies; cache gc keeps what the locked records name and removes the unlocked records.
type runRecord struct {
	f    *os.File
	path string
	seen map[string]bool
}

// record adds id to this run's record, making the record on first use.
func (s *Store) record(id string) error {
	if s.readOnly {
		return nil // gc cannot run on it here either
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		r, err := newRunRecord(filepath.Join(s.dir, "runs"))
		if err != nil {
			return disk.NoSpaceOr(fmt.Errorf("record this run in %s: %w", s.dir, err), "record this run", s.dir, 0, FixCacheSpace)
		}
		s.run = r
	}
	if s.run.seen[id] {
		return nil
	}
	if _, err := s.run.f.WriteString(id + "\n"); err != nil {
		return disk.NoSpaceOr(fmt.Errorf("record this run in %s: %w", s.run.path, err), "record this run", s.dir, 0, FixCacheSpace)
	}
	s.run.seen[id] = true
	return nil
}

func newRunRecord(dir string) (*runRecord, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".new-")
	if err != nil {
		return nil, err
	}
	// locked before it has its name: gc takes an unlocked record for a dead run's
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	path := filepath.Join(dir, fmt.Sprintf("%d-%s.run", os.Getpid(), strings.TrimPrefix(filepath.Base(f.Name()), ".new-")))
	if err := os.Rename(f.Name(), path); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	return &runRecord{f: f, path: path, seen: map[string]bool{}}, nil
}

// Close ends this run's record: cache gc no longer keeps what the run used for it.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.run == nil {
		return nil
	}
	err := os.Remove(s.run.path)
	if cerr := s.run.f.Close(); err == nil {
		err = cerr
	}
	s.run = nil
	return err
}

func (s *Store) markUsed(id string) {
	s.mu.Lock()
	s.used[id] = true
	s.mu.Unlock()
}

// holdUsed takes the use lock, shared, of every output this store handed out: a stage
// reads some of them, and a forced rerun elsewhere must not exchange them meanwhile.
func (s *Store) holdUsed(ctx context.Context) (func(), error) {
	s.mu.Lock()
	ids := slices.Sorted(maps.Keys(s.used))
	s.mu.Unlock()
	var held []func()
	release := func() {
		for _, u := range held {
			u()
		}
	}
	for _, id := range ids {
		if s.readOnly {
			break
		}
		u, err := s.lock(ctx, strings.Replace(id, "/", "-", 1)+".use", true)
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, u)
	}
	return release, nil
}

// stepFailure is a failed build step that kept a log (the runner's BuildError): the store
// reads the log for the compiler's "No space left on device".
type stepFailure interface {
	error
	StepLog() string
}

// noSpace turns a failed stage into a NoSpaceError when the cache's file system (or the
// temporary directory's) is full, or the step said so in its log.
func (s *Store) noSpace(ctx context.Context, err error, what string, freeBefore int64) error {
	var ns *disk.NoSpaceError
	if ctx.Err() != nil || errors.As(err, &ns) {
		return err
	}
	said := disk.IsNoSpace(err)
	var be stepFailure
	if errors.As(err, &be) && !said {
		if b, rerr := os.ReadFile(be.StepLog()); rerr == nil {
			said = disk.NoSpaceText(string(b))
		}
	}
	dir := s.dir
	free, full := disk.FullDisk(dir)
	if !full {
		if tfree, tfull := disk.FullDisk(os.TempDir()); tfull {
			dir, free, full, freeBefore = os.TempDir(), tfree, true, 0
		}
	}
	if !said && !full {
		return err
	}
	e := &disk.NoSpaceError{Op: what, Path: dir, Free: free, Fix: FixCacheSpace, Err: err}
	if freeBefore > 0 {
		e.Need, e.NeedAtLeast = freeBefore, true
	}
	return e
}

// WriteJSON writes v to dir/name atomically.
func WriteJSON(dir, name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	return disk.WriteFileAtomic(filepath.Join(dir, name), append(b, '\n'))
}

// ReadJSON reads dir/name into v.
func ReadJSON(dir, name string, v any) error {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("decode %s: %w", filepath.Join(dir, name), err)
	}
	return nil
}

// lock takes the lock file locks/name, exclusive or shared, waiting until ctx ends.
func (s *Store) lock(ctx context.Context, name string, shared bool) (func(), error) {
	l, err := cache.OpenLock(filepath.Join(s.dir, "locks", name), 0o644, cache.LockFix(s.dir))
	if err != nil {
		if cache.IsAccess(err) {
			return nil, cache.AccessError(s.dir, "lock "+name, err)
		}
		return nil, disk.NoSpaceOr(err, "lock "+name, s.dir, 0, FixCacheSpace)
	}
	if err := l.Wait(ctx, shared, 50*time.Millisecond, nil); err != nil {
		l.Close()
		return nil, err
	}
	return l.Close, nil
}

// Key hashes its parts (JSON-encoded) into a hex key.
func Key(parts ...any) string {
	h := sha256.New()
	enc := json.NewEncoder(h)
	for _, p := range parts {
		_ = enc.Encode(p)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// tmp/: a stage being made, a build directory (measures off), a rebuild check, gc's
// trash; the sources' temp names are cache.TempOwner's
var tempRe = regexp.MustCompile(`^(?:(?:patch|build|check|package)-[0-9a-f]{64}|work-[0-9a-f]{12}|rebuild|gc-(?:git|archive)|gc-(?:patch|build|check|package)-[0-9a-f]{64})-[0-9]+$`)

// isTemp reports whether name under tmp/ is one epbuild gives.
func IsTemp(name string) bool {
	if _, _, ok := cache.TempOwner(name); ok {
		return true
	}
	return tempRe.MatchString(name)
}

// stageTempRe names the temporary entries of a stage being made: the store's
// <stage>-<key>-*, the build's work-<key prefix>-*.
var stageTempRe = regexp.MustCompile(`^(?:(patch|build|check|package)-([0-9a-f]{12,64})|work-([0-9a-f]{12}))-`)

// tempLocks are the lock files that guard the temporary entry name under tmp/: nil for a
// name no lock guards, or whose lock was never made.
func TempLocks(dir, name string, locks []string) []string {
	if kind, key, ok := cache.TempOwner(name); ok {
		p := filepath.Join(dir, "locks", cache.LockFile(kind, key))
		if _, err := os.Stat(p); err == nil {
			return []string{p}
		}
		return nil
	}
	m := stageTempRe.FindStringSubmatch(name)
	if m == nil {
		return nil
	}
	stage, key := m[1], m[2]
	if m[3] != "" {
		stage, key = "build", m[3]
	}
	var out []string
	for _, l := range locks {
		if strings.HasPrefix(l, stage+"-"+key) && strings.HasSuffix(l, ".lock") {
			out = append(out, filepath.Join(dir, "locks", l))
		}
	}
	return out
}

// tryLock takes the exclusive flock on path if it is free now (creating the file: lock
// files are never removed).
func TryLock(path string) (func(), bool, error) {
	l, err := cache.OpenLock(path, 0o644, cache.LockFix(filepath.Dir(filepath.Dir(path))))
	if err != nil {
		return nil, false, err
	}
	ok, err := l.TryLock(false)
	if err != nil || !ok {
		l.Close()
		return nil, false, err
	}
	return l.Close, true, nil
}

// The stages, in order; --force=STAGE reruns that stage and those after it.
var StageOrder = []string{"patch", "build", "check", "package"}

// runRe names the records under runs/: a run in progress, or one being written.
var runRe = regexp.MustCompile(`^(?:[0-9]+-[0-9]+\.run|\.new-[0-9]+)$`)

// liveRuns reads the records of the runs in progress under dir/runs: the stage/key of
// every output they use, and how many there are. The records of runs that ended (no
// process holds their lock) are removed.
func LiveRuns(dir string) (map[string]bool, int, error) {
	ids := map[string]bool{}
	rd := filepath.Join(dir, "runs")
	des, err := os.ReadDir(rd)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return ids, 0, nil
		}
		return nil, 0, fmt.Errorf("read the records of the runs in progress: %w", err)
	}
	alive := 0
	for _, d := range des {
		if !runRe.MatchString(d.Name()) {
			continue
		}
		p := filepath.Join(rd, d.Name())
		f, err := os.Open(p)
		if err != nil {
			continue // ended and removed meanwhile
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			// no process holds it: that run ended (or died)
			os.Remove(p)
			f.Close()
			continue
		}
		alive++
		b, _ := io.ReadAll(f)
		f.Close()
		// only whole lines: a run looks at an output after its line is written whole
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			for _, l := range strings.Split(string(b[:i]), "\n") {
				ids[l] = true
			}
		}
	}
	return ids, alive, nil
}
