package cachegc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/embedded"
	"github.com/epbuild/epbuild/builder/store"
)

// What is under the cache directory, by kind. One cache directory holds the fetched
// sources (cache package), the stage store (stages/, its locks and the records of the
// runs in progress), the temporary directories both write in (tmp/), the build logs
// (logs/) and small records (compat/ findings, toolchain/ probes).
const (
	KindSources   = "sources"   // git/, archives/, meta/, embedded/
	KindStages    = "stages"    // stages/<stage>/<key>
	KindTemporary = "temporary" // tmp/
	KindLogs      = "logs"      // logs/<stage>-<key>: a failed step's whole log
	KindMetadata  = "metadata"  // compat/, toolchain/, locks/, runs/ and anything else
)

// cacheKinds is the order kinds are reported in.
var cacheKinds = []string{KindSources, KindStages, KindTemporary, KindLogs, KindMetadata}

// kindOf is the kind of a top-level entry of the cache directory.
func kindOf(name string) string {
	switch name {
	case "git", "archives", "meta", "embedded":
		return KindSources
	case "stages":
		return KindStages
	case "tmp":
		return KindTemporary
	case "logs":
		return KindLogs
	}
	return KindMetadata
}

// KindUsage is what one kind takes.
type KindUsage struct {
	Kind string `json:"kind"`
	// Bytes is the size of the files; Disk what they and their directories take on
	// disk (allocated blocks, each inode once: what du counts).
	Bytes int64 `json:"bytes"`
	Disk  int64 `json:"disk"`
	Files int   `json:"files"`
	// Entries are what cache ls and gc count: a repository, an archive, a stage output,
	// a temporary directory, a log directory.
	Entries int `json:"entries"`
}

// CacheUsage is everything under a cache directory, by kind.
type CacheUsage struct {
	Dir   string      `json:"dir"`
	Kinds []KindUsage `json:"kinds"`
	Total KindUsage   `json:"total"`
}

// CacheDU counts everything under the cache directory dir by kind.
func CacheDU(dir string) (*CacheUsage, error) {
	if _, _, err := cache.Look(dir); err != nil {
		return nil, err
	}
	u := &CacheUsage{Dir: dir}
	by := map[string]*KindUsage{}
	for _, k := range cacheKinds {
		by[k] = &KindUsage{Kind: k}
	}
	seen := map[[2]uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walk: a run finished (or no cache yet)
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		parts := strings.Split(filepath.ToSlash(rel), "/")
		kind := KindMetadata
		if rel != "." {
			kind = kindOf(parts[0])
		}
		k := by[kind]
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
			if st.Nlink > 1 && !fi.IsDir() {
				if seen[id] {
					return nil
				}
				seen[id] = true
			}
			k.Disk += int64(st.Blocks) * 512
		}
		if !fi.IsDir() {
			k.Files++
			if fi.Mode().IsRegular() || fi.Mode()&fs.ModeSymlink != 0 {
				k.Bytes += fi.Size()
			}
		}
		if isEntry(parts, d.IsDir()) {
			k.Entries++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("cache du %s: %w", dir, err)
	}
	for _, k := range cacheKinds {
		x := by[k]
		u.Kinds = append(u.Kinds, *x)
		u.Total.Bytes += x.Bytes
		u.Total.Disk += x.Disk
		u.Total.Files += x.Files
		u.Total.Entries += x.Entries
	}
	u.Total.Kind = "total"
	return u, nil
}

// isEntry says whether the path (split, relative to the cache) is one entry of its kind.
func isEntry(parts []string, dir bool) bool {
	switch {
	case len(parts) == 2 && (parts[0] == "tmp" || parts[0] == "logs" || parts[0] == "embedded"):
		return true
	case len(parts) == 3 && parts[0] == "stages" && dir:
		return true
	case len(parts) == 3 && parts[0] == "archives" && !dir:
		return true
	case len(parts) >= 2 && parts[0] == "git" && dir && strings.HasSuffix(parts[len(parts)-1], ".git"):
		return !slices.ContainsFunc(parts[1:len(parts)-1], func(s string) bool { return strings.HasSuffix(s, ".git") })
	}
	return false
}

// CacheEntry is one source, stage output or log directory in the cache.
type CacheEntry struct {
	Kind string `json:"kind"` // git, archive, stage, log
	// Key is the source's key, stage/key for a stage output, stage-key for a log.
	Key      string    `json:"key"`
	URL      string    `json:"url,omitempty"`
	Path     string    `json:"path"`
	Bytes    int64     `json:"bytes"`
	LastUsed time.Time `json:"last_used"`
}

// CacheList lists the sources, the stage outputs and the kept logs under dir.
func CacheList(dir string) ([]CacheEntry, error) {
	c, _, err := cache.Look(dir)
	if err != nil {
		return nil, err
	}
	srcs, err := c.List()
	if err != nil {
		return nil, err
	}
	var out []CacheEntry
	for _, e := range srcs {
		out = append(out, CacheEntry{Kind: string(e.Kind), Key: e.Key, URL: e.URL, Path: e.Path, Bytes: e.Size, LastUsed: e.LastUsed})
	}
	outs, err := stageOutputs(dir)
	if err != nil {
		return nil, err
	}
	for _, o := range outs {
		size, _ := dirBytes(o.path)
		out = append(out, CacheEntry{Kind: "stage", Key: o.stage + "/" + o.key, Path: o.path, Bytes: size, LastUsed: o.lastUsed()})
	}
	logs, _ := os.ReadDir(filepath.Join(dir, "logs"))
	for _, l := range logs {
		p := filepath.Join(dir, "logs", l.Name())
		size, mtime := dirBytes(p)
		out = append(out, CacheEntry{Kind: "log", Key: l.Name(), Path: p, Bytes: size, LastUsed: mtime})
	}
	return out, nil
}

type stageOutput struct{ stage, key, path string }

// lastUsed is when a run last used the output (or made it).
func (o stageOutput) lastUsed() time.Time {
	var t time.Time
	for _, n := range []string{store.UsedName, ".done"} {
		if st, err := os.Stat(filepath.Join(o.path, n)); err == nil && st.ModTime().After(t) {
			t = st.ModTime()
		}
	}
	if t.IsZero() { // never completed (an epbuild older than the .done marker): its own time
		if st, err := os.Stat(o.path); err == nil {
			t = st.ModTime()
		}
	}
	return t
}

func stageOutputs(dir string) ([]stageOutput, error) {
	var out []stageOutput
	stages, err := os.ReadDir(filepath.Join(dir, "stages"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("list the stage outputs in %s: %w", dir, err)
	}
	for _, st := range stages {
		keys, err := os.ReadDir(filepath.Join(dir, "stages", st.Name()))
		if err != nil {
			continue
		}
		for _, k := range keys {
			if slices.Contains(store.StageOrder, st.Name()) && isKey(k.Name()) && k.IsDir() {
				out = append(out, stageOutput{st.Name(), k.Name(), filepath.Join(dir, "stages", st.Name(), k.Name())})
			}
		}
	}
	return out, nil
}

// dirBytes is the size of the files under p and their newest mtime.
func dirBytes(p string) (int64, time.Time) {
	var n int64
	var newest time.Time
	_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if fi.Mode().IsRegular() {
				n += fi.Size()
			}
			if fi.ModTime().After(newest) {
				newest = fi.ModTime()
			}
		}
		return nil
	})
	return n, newest
}

// GCOptions say what cache gc removes.
type GCOptions struct {
	// OlderThan: sources, stage outputs, logs and records not used for this long.
	OlderThan time.Duration
	// Now is the time ages are measured from (default time.Now()).
	Now time.Time
}

// GCItem is one thing cache gc removed, or kept although it is old enough.
type GCItem struct {
	Kind  string `json:"kind"` // sources, stages, temporary, logs, metadata
	Name  string `json:"name"` // the source key, stage/key, or the name under tmp/, logs/, ...
	Bytes int64  `json:"bytes"`
	Why   string `json:"why,omitempty"`
}

// GCReport is what cache gc did.
type GCReport struct {
	Dir     string   `json:"dir"`
	Removed []GCItem `json:"removed"`
	Kept    []GCItem `json:"kept"`
	Freed   int64    `json:"freed"`
}

// notOurs is why gc keeps what epbuild did not make (by its name and place).
const notOurs = "not epbuild's: left alone"

// Names epbuild gives what it makes in its cache, by place: gc removes nothing else.
var (
	keyRe   = regexp.MustCompile(`^[0-9a-f]{64}$`)
	logRe   = regexp.MustCompile(`^(?:patch|build|check|package)-[0-9a-f]{64}$`)
	recRe   = map[string]*regexp.Regexp{"compat": regexp.MustCompile(`^[0-9a-f]{64}\.json$`), "toolchain": regexp.MustCompile(`^probe-[0-9a-f]{16}\.json$`)}
	embedRe = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

func isKey(s string) bool { return keyRe.MatchString(s) }

// foreign reports what under dir epbuild did not make, by place: the top level's other
// names, and other names in the places gc removes from. gc leaves them alone.
func (g *gcRun) foreign() {
	add := func(kind, name, p string) {
		size, _ := dirBytes(p)
		g.rep.Kept = append(g.rep.Kept, GCItem{Kind: kind, Name: name, Bytes: size, Why: notOurs})
	}
	top, _ := os.ReadDir(g.dir)
	for _, d := range top {
		if !cache.IsLayoutName(d.Name()) {
			add(KindMetadata, d.Name(), filepath.Join(g.dir, d.Name()))
		}
	}
	check := func(sub string, ok func(fs.DirEntry) bool) {
		des, _ := os.ReadDir(filepath.Join(g.dir, sub))
		for _, d := range des {
			if !ok(d) {
				add(kindOf(sub), sub+"/"+d.Name(), filepath.Join(g.dir, sub, d.Name()))
			}
		}
	}
	check("tmp", func(d fs.DirEntry) bool { return store.IsTemp(d.Name()) })
	check("logs", func(d fs.DirEntry) bool { return d.IsDir() && logRe.MatchString(d.Name()) })
	check("embedded", func(d fs.DirEntry) bool { return d.IsDir() && embedRe.MatchString(d.Name()) })
	check("stages", func(d fs.DirEntry) bool { return d.IsDir() && slices.Contains(store.StageOrder, d.Name()) })
	for _, st := range store.StageOrder {
		check("stages/"+st, func(d fs.DirEntry) bool { return d.IsDir() && isKey(d.Name()) })
	}
	for sub, re := range recRe {
		check(sub, func(d fs.DirEntry) bool {
			return d.IsDir() || re.MatchString(d.Name()) || strings.HasPrefix(d.Name(), ".tmp-")
		})
	}
}

// staleTemp is how old a temporary entry that no lock names must be before gc removes
// it while a run is in progress (it may be that run's).
const staleTemp = 24 * time.Hour

// inUse is why gc keeps what a run in progress uses.
const inUse = "in use by a run in progress"

// CacheGC removes from the cache directory dir, never what a run in progress uses:
//
//   - sources not used for OlderThan, unless a fetch holds their lock;
//   - stage outputs not used for OlderThan, unless a run records them (or holds their
//     produce or use lock): a run records each output before it looks at it;
//   - temporary entries under tmp/ whose owner's lock is free (the run that made them
//     ended without removing them: killed); entries no lock names, when no run is in
//     progress or when older than a day;
//   - logs of failed steps not used for OlderThan, unless that stage is being made;
//   - rule findings, toolchain probes and the embedded repositories of other epbuild
//     versions not used for OlderThan (the last only while no run is in progress), and
//     the records of runs that ended.
func CacheGC(ctx context.Context, dir string, opts GCOptions) (*GCReport, error) {
	if opts.Now.IsZero() {
		opts.Now = time.Now()
	}
	old := func(t time.Time) bool { return opts.Now.Sub(t) >= opts.OlderThan }
	rep := &GCReport{Dir: dir, Removed: []GCItem{}, Kept: []GCItem{}}
	c, state, err := cache.Look(dir)
	if err != nil {
		return nil, err
	}
	if state == cache.Missing || state == cache.Empty {
		return rep, nil // nothing to remove, and nothing is made
	}
	if c.ReadOnly() {
		return nil, &cache.DirError{Dir: c.Dir(), Code: 3, Why: "it is read-only here (a read-only mount, or another user's), so gc cannot remove anything",
			Fix: "run cache gc where the cache is writable (as its owner, or on the machine that fills it)"}
	}
	removed, err := c.GC(ctx, func(e cache.Entry) bool { return !old(e.LastUsed) })
	for _, e := range removed {
		rep.add(GCItem{Kind: KindSources, Name: string(e.Kind) + " " + e.Key, Bytes: e.Size})
	}
	if err != nil {
		return rep, fmt.Errorf("cache gc %s: %w", dir, err)
	}
	_, alive, err := store.LiveRuns(dir)
	if err != nil {
		return rep, err
	}
	g := &gcRun{dir: dir, rep: rep, old: old, now: opts.Now, alive: alive}
	g.foreign()
	for _, step := range []func(context.Context) error{g.stages, g.temps, g.logs, g.metadata} {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if err := step(ctx); err != nil {
			return rep, fmt.Errorf("cache gc %s: %w", dir, err)
		}
	}
	return rep, nil
}

// gcRun is one cache gc over dir.
type gcRun struct {
	dir   string
	rep   *GCReport
	old   func(time.Time) bool
	now   time.Time
	alive int // runs in progress when gc began
}

func (r *GCReport) add(it GCItem) {
	r.Removed = append(r.Removed, it)
	r.Freed += it.Bytes
}

func (g *gcRun) stages(ctx context.Context) error {
	dir, rep, old := g.dir, g.rep, g.old
	outs, err := stageOutputs(dir)
	if err != nil {
		return err
	}
	for _, o := range outs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !old(o.lastUsed()) {
			continue
		}
		id := o.stage + "/" + o.key
		size, _ := dirBytes(o.path)
		gone, err := removeStageOutput(dir, o)
		if err != nil {
			return err
		}
		if !gone {
			rep.Kept = append(rep.Kept, GCItem{Kind: KindStages, Name: id, Bytes: size, Why: inUse})
			continue
		}
		rep.add(GCItem{Kind: KindStages, Name: id, Bytes: size})
	}
	return nil
}

// removeStageOutput removes o unless a run is making it (its produce lock), reading it
// (its use lock) or has recorded it; the records are read with both locks held (see
// Store.hit for why that order keeps a run's outputs).
func removeStageOutput(dir string, o stageOutput) (bool, error) {
	locks := filepath.Join(dir, "locks")
	unlock, ok, err := store.TryLock(filepath.Join(locks, o.stage+"-"+o.key+".lock"))
	if err != nil || !ok {
		return false, err
	}
	defer unlock()
	unuse, ok, err := store.TryLock(filepath.Join(locks, o.stage+"-"+o.key+".use"))
	if err != nil || !ok {
		return false, err
	}
	defer unuse()
	ids, _, err := store.LiveRuns(dir)
	if err != nil {
		return false, err
	}
	if ids[o.stage+"/"+o.key] {
		return false, nil
	}
	// out of sight at once; the slow removal leaves only a leftover under tmp/ if killed
	trash := filepath.Join(dir, "tmp", fmt.Sprintf("gc-%s-%s-%d", o.stage, o.key, time.Now().UnixNano()))
	if err := os.Rename(o.path, trash); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("remove stage output %s/%s: %w", o.stage, o.key, err)
	}
	_ = disk.MakeWritable(trash)
	if err := os.RemoveAll(trash); err != nil {
		return true, fmt.Errorf("remove stage output %s/%s: %w", o.stage, o.key, err)
	}
	return true, nil
}

func (g *gcRun) temps(ctx context.Context) error {
	dir, rep, old := g.dir, g.rep, g.old
	des, err := os.ReadDir(filepath.Join(dir, "tmp"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	var locks []string
	if ls, err := os.ReadDir(filepath.Join(dir, "locks")); err == nil {
		for _, l := range ls {
			locks = append(locks, l.Name())
		}
	}
	for _, d := range des {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !store.IsTemp(d.Name()) {
			continue // reported by foreign
		}
		p := filepath.Join(dir, "tmp", d.Name())
		fi, err := d.Info()
		if err != nil {
			continue
		}
		size, _ := dirBytes(p)
		it := GCItem{Kind: KindTemporary, Name: d.Name(), Bytes: size}
		var unlocks []func()
		owned := store.TempLocks(dir, d.Name(), locks)
		free := true
		for _, l := range owned {
			u, ok, err := store.TryLock(l)
			if err != nil || !ok {
				free = false
				break
			}
			unlocks = append(unlocks, u)
		}
		release := func() {
			for _, u := range unlocks {
				u()
			}
		}
		switch {
		case !free:
			// its run holds the lock: in progress
			release()
			if old(fi.ModTime()) {
				it.Why = inUse
				rep.Kept = append(rep.Kept, it)
			}
			continue
		case len(owned) == 0 && !strings.HasPrefix(d.Name(), "gc-") && g.alive > 0 && g.now.Sub(fi.ModTime()) < staleTemp:
			// no lock says whose it is, and a run is in progress: it may be that run's
			release()
			if old(fi.ModTime()) {
				it.Why = inUse
				rep.Kept = append(rep.Kept, it)
			}
			continue
		}
		_ = disk.MakeWritable(p)
		err = os.RemoveAll(p)
		release()
		if err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
		rep.add(it)
	}
	return nil
}

func (g *gcRun) logs(ctx context.Context) error {
	dir, rep, old := g.dir, g.rep, g.old
	des, err := os.ReadDir(filepath.Join(dir, "logs"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, d := range des {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.IsDir() || !logRe.MatchString(d.Name()) {
			continue // reported by foreign
		}
		p := filepath.Join(dir, "logs", d.Name())
		size, mtime := dirBytes(p)
		if !old(mtime) {
			continue
		}
		it := GCItem{Kind: KindLogs, Name: d.Name(), Bytes: size}
		// logs/<stage>-<key> is written under that stage's produce lock
		unlock, ok, err := store.TryLock(filepath.Join(dir, "locks", d.Name()+".lock"))
		if err != nil {
			return err
		}
		if !ok {
			it.Why = inUse
			rep.Kept = append(rep.Kept, it)
			continue
		}
		err = os.RemoveAll(p)
		unlock()
		if err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
		rep.add(it)
	}
	return nil
}

func (g *gcRun) metadata(ctx context.Context) error {
	dir, rep, old := g.dir, g.rep, g.old
	for _, sub := range []string{"compat", "toolchain"} {
		des, _ := os.ReadDir(filepath.Join(dir, sub))
		for _, d := range des {
			fi, err := d.Info()
			if err != nil || d.IsDir() || !recRe[sub].MatchString(d.Name()) || !old(fi.ModTime()) {
				continue
			}
			// written by rename, read whole: a run that loses one computes it again
			if err := os.Remove(filepath.Join(dir, sub, d.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			rep.add(GCItem{Kind: KindMetadata, Name: sub + "/" + d.Name(), Bytes: fi.Size()})
		}
	}
	if g.alive > 0 {
		return nil // a run in progress serves its embedded sources from there
	}
	des, _ := os.ReadDir(filepath.Join(dir, "embedded"))
	for _, d := range des {
		if !d.IsDir() || !embedRe.MatchString(d.Name()) {
			continue // reported by foreign
		}
		p := filepath.Join(dir, "embedded", d.Name())
		size, mtime := dirBytes(p)
		if !old(mtime) {
			continue
		}
		_ = disk.MakeWritable(p)
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
		name := "embedded/" + d.Name()
		if d.Name() == embedded.Digest() {
			name += " (this epbuild's; laid out again when used)"
		}
		rep.add(GCItem{Kind: KindSources, Name: name, Bytes: size})
	}
	return ctx.Err()
}
