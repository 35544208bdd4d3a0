package builder

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/cachegc"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/store"
)

// cache du counts every byte under the cache: its disk total is what du -s counts, its
// file bytes what find lists, and each kind has its entries.
func TestCacheDUCountsEverything(t *testing.T) {
	dir := warmCache(t)
	if _, err := demoRun(t, dir, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(dir, "tmp", "work-0123456789ab-1")
	if err := os.MkdirAll(filepath.Join(leftover, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(leftover, "src", "big.c"), make([]byte, 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs", "build-0123"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "logs", "build-0123", "00-cmake.log"), []byte("error\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := cachegc.CacheDU(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("du", "-s", "-B1", dir).Output()
	if err != nil {
		t.Skipf("no GNU du: %v", err)
	}
	disk, _ := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	if u.Total.Disk != disk {
		t.Errorf("cache du counts %d bytes on disk, du -s %d", u.Total.Disk, disk)
	}
	// each file once: checkouts hardlink the cache's git packs
	out, err = exec.Command("find", dir, "(", "-type", "f", "-o", "-type", "l", ")", "-printf", "%D:%i %s\n").Output()
	if err != nil {
		t.Fatal(err)
	}
	var bytes int64
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if seen[f[0]] {
			continue
		}
		seen[f[0]] = true
		n, _ := strconv.ParseInt(f[1], 10, 64)
		bytes += n
	}
	if u.Total.Bytes != bytes {
		t.Errorf("cache du counts %d bytes of files, find %d", u.Total.Bytes, bytes)
	}
	kinds := map[string]cachegc.KindUsage{}
	var sum int64
	for _, k := range u.Kinds {
		kinds[k.Kind] = k
		sum += k.Disk
	}
	if sum != u.Total.Disk {
		t.Errorf("the kinds add up to %d, the total is %d", sum, u.Total.Disk)
	}
	// the demo: two git repositories and the embedded mirror; 2 patch, 2 build, 2 check
	// and 1 package outputs; the leftover; the log directory
	for kind, want := range map[string]int{cachegc.KindSources: 3, cachegc.KindStages: 7, cachegc.KindTemporary: 1, cachegc.KindLogs: 1} {
		if kinds[kind].Entries != want {
			t.Errorf("%s: %d entries, want %d (%+v)", kind, kinds[kind].Entries, want, kinds[kind])
		}
	}
	if kinds[cachegc.KindTemporary].Bytes != 100000 || kinds[cachegc.KindStages].Bytes < 10000 || kinds[cachegc.KindMetadata].Files == 0 {
		t.Errorf("kinds: %+v", u.Kinds)
	}
}

// cache gc --older-than 0s keeps what a run in progress uses (the outputs it recorded,
// the temporary directories of the stage it makes, those no lock names) and removes
// everything else; once that run ended, everything.
func TestCacheGCKeepsWhatARunUses(t *testing.T) {
	dir := warmCache(t)
	res, err := demoRun(t, dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var lib manifest.ComponentResult
	for _, c := range res.Components {
		if c.Name == "libdemo" {
			lib = c
		}
	}
	ctx := context.Background()
	// a run in progress: it found libdemo's patch output cached, and makes its build
	run, err := store.OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cached, err := run.Produce(ctx, "patch", lib.PatchKey, nil); err != nil || !cached {
		t.Fatalf("produce a cached output: %v %v", cached, err)
	}
	const making = "5555555555555555555555555555555555555555555555555555555555555555"
	unlock, err := holdLock(dir, "build-"+making+".lock")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(name string) string {
		p := filepath.Join(dir, "tmp", name)
		if err := os.MkdirAll(filepath.Join(p, "src"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	inProgress := []string{mk("build-" + making + "-1"), mk("work-" + making[:12] + "-2"), mk("rebuild-3")}
	logs := filepath.Join(dir, "logs", "build-"+making)
	err = os.MkdirAll(logs, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	// what a killed run left: its lock is free
	const killed = "6666666666666666666666666666666666666666666666666666666666666666"
	u2, err := holdLock(dir, "build-"+killed+".lock")
	if err != nil {
		t.Fatal(err)
	}
	u2()
	abandoned := []string{mk("build-" + killed + "-4"), mk("work-" + killed[:12] + "-5"), mk("gc-build-" + killed + "-6")}

	rep, err := cachegc.CacheGC(ctx, dir, cachegc.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(inProgress, logs, run.Path("patch", lib.PatchKey)) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("gc removed %s, which a run in progress uses", p)
		}
	}
	for _, p := range abandoned {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("gc left %s, which a killed run left", p)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, "stages", "*", "*"))
	if len(left) != 1 {
		t.Errorf("stage outputs left: %v", left)
	}
	if !slices.ContainsFunc(rep.Kept, func(it cachegc.GCItem) bool {
		return it.Name == "patch/"+lib.PatchKey && it.Why == "in use by a run in progress"
	}) {
		t.Errorf("kept: %+v", rep.Kept)
	}

	// the run ends
	unlock()
	if err := run.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cachegc.CacheGC(ctx, dir, cachegc.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := cachegc.CacheDU(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range u.Kinds {
		if k.Kind != cachegc.KindMetadata && k.Entries != 0 {
			t.Errorf("after the run ended, gc left %+v", k)
		}
	}
	if des, _ := os.ReadDir(filepath.Join(dir, "runs")); len(des) != 0 {
		t.Errorf("records left: %v", des)
	}
	// a plain run afterwards builds everything again, to the same bytes
	res2, err := demoRun(t, dir, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if res2.SHA256 != res.SHA256 {
		t.Errorf("after gc the artifact is %s, was %s", res2.SHA256, res.SHA256)
	}
}

// holdLock takes the lock file name under dir/locks the way a run making that output
// holds it, until the returned func is called.
func holdLock(dir, name string) (func(), error) {
	l, err := cache.OpenLock(filepath.Join(dir, "locks", name), 0o644, cache.LockFix(dir))
	if err != nil {
		return nil, err
	}
	if err := l.Wait(context.Background(), false, 50*time.Millisecond, nil); err != nil {
		l.Close()
		return nil, err
	}
	return l.Close, nil
}
