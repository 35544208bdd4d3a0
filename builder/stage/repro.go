package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/compat"
)

// Reproducible builds: the same plan gives the same bytes wherever the cache is, wherever
// the build trees are (EPBUILD_BUILD_ROOT) and whichever machine (of one toolchain) runs
// the build.
//
// Compilers write the paths they are given into what they build: __FILE__ in assertion
// messages, debug information, RUNPATHs, install-time paths in generated files. And nvcc
// names each translation unit's registration symbols (__fatbinwrap_<hash>_…,
// __cudaRegisterLinkedBinary_<hash>_…) with a hash of the source file's real path:
// measured with CUDA 13.0, the hash follows the file's resolved path whatever form it is
// given in (absolute, relative, through a symbolic link) and whatever the working
// directory, the output's directory or the seed, and no flag maps it. So the sources are
// always compiled from one real path that depends on the build key alone:
// /tmp/epbuild-<component>-<key12>/src (the source directory), never on the cache's
// location, the build root or a random suffix. That directory also holds the staging
// prefix's path (prefix; the files themselves land in the stage's DESTDIR), the links to
// the dependencies' prefixes and trees (deps/<name>/prefix, src) and the nvcc wrappers.
// It must be a real directory, not a link to one: setup.py makes its sources absolute
// from the working directory, and the kernel resolves links in that.
//
// The build trees (CMake's, setup.py's build and temporary directories, TMPDIR), which
// take the room, go to <root>/epbuild-<component>-<key12> (the build directory): the
// same directory when the root is /tmp (the default), another when EPBUILD_BUILD_ROOT
// names one. Nothing of the root reaches the bytes: every host compiler maps both
// directories away (-ffile-prefix-map, through CFLAGS/CXXFLAGS, the CMake flags and
// NVCC_APPEND_FLAGS' -Xcompiler), nvcc runs with a seed derived from the output's path
// inside its directory (the names it would make up at random) and its temporary files
// beside the object (their names end up in it), and every step gets SOURCE_DATE_EPOCH,
// TZ=UTC, LC_ALL=C.UTF-8, PYTHONHASHSEED=0 and no user git config (setup.py's `git
// rev-parse --short` honours core.abbrev). The root is not part of any key: caches and
// registries filled from builds under different roots share their stages.
//
// Builds of one key run one at a time on a machine: a user's builds (any cache, any root)
// through a lock in their own /tmp/epbuild-locks-<uid>/, another user's because the
// directories are theirs (refused, never removed); different keys run side by side. A
// build killed midway leaves its directories behind; the next build of that key by its
// user removes them.

// DefaultBuildRoot holds the build directories unless EPBUILD_BUILD_ROOT names another,
// and always the source directories. /tmp is on every Linux machine, and its sticky bit
// keeps other users from renaming a build directory away.
const DefaultBuildRoot = "/tmp"

// reproFormat names the measures: a change in them changes the build keys.
// 3: the root left the key; the sources compile from /tmp whatever the root.
const reproFormat = "repro/3"

// Repro says how builds are kept reproducible.
type Repro struct {
	// Off turns every measure off (EPBUILD_REPRO=off): builds run in the cache as they
	// used to. For measuring what the measures cost only; such builds get keys of their own.
	Off bool
	// Root holds the build directories ("": DefaultBuildRoot). It is not written into
	// what is built, and is no part of a key.
	Root string
}

var rootRe = regexp.MustCompile(`^/[A-Za-z0-9._/+-]*$`)

// ParseRepro reads EPBUILD_REPRO and EPBUILD_BUILD_ROOT; a bad value is bad input.
func ParseRepro(getenv func(string) string) (Repro, error) {
	var r Repro
	switch v := getenv("EPBUILD_REPRO"); v {
	case "", "on":
	case "off":
		r.Off = true
	default:
		return r, &plan.UsageError{Err: fmt.Errorf("EPBUILD_REPRO=%q: give off (to measure what the reproducibility measures cost) or leave it unset", v)}
	}
	r.Root = getenv("EPBUILD_BUILD_ROOT")
	if r.Root != "" && (!rootRe.MatchString(r.Root) || filepath.Clean(r.Root) != r.Root) {
		return r, &plan.UsageError{Err: fmt.Errorf("EPBUILD_BUILD_ROOT=%q: give a clean absolute path of letters, digits and ._/+- (it goes into compiler flags)", r.Root)}
	}
	return r, nil
}

func (r Repro) root() string {
	if r.Root == "" {
		return DefaultBuildRoot
	}
	return r.Root
}

// key is what the measures add to a build key: their format, not the root.
func (r Repro) key() string {
	if r.Off {
		return "off"
	}
	return reproFormat
}

// workDir is where one build runs, held until release: path is the source directory
// (what the compilers see, the same for every root), out the build directory (path
// itself when the root is /tmp).
type workDir struct {
	path, out string
	release   func()
	// keep lets go of the directories and leaves them (a failed build kept for reading).
	keep func()
}

// acquireWorkDir makes the build directory of a component's build key: the stable one
// (locked for this build), or with the measures off a fresh one in the cache.
func (r *Runner) acquireWorkDir(ctx context.Context, comp, key string) (*workDir, error) {
	if r.Repro.Off {
		d, err := os.MkdirTemp(filepath.Join(r.Store.Dir(), "tmp"), "work-"+key[:12]+"-")
		if err != nil {
			return nil, err
		}
		return &workDir{path: d, out: d, release: func() { _ = disk.MakeWritable(d); _ = os.RemoveAll(d) }, keep: func() {}}, nil
	}
	root := r.Repro.root()
	if err := ensureBuildRoot(root); err != nil {
		return nil, err
	}
	srcRoot := DefaultBuildRoot
	if root != DefaultBuildRoot {
		if err := checkBuildRoot(DefaultBuildRoot); err != nil {
			// a noexec or foreign /tmp: the sources go with the build trees, and what nvcc
			// writes then depends on the root
			r.Log.Warn("the sources cannot compile from "+DefaultBuildRoot+": they go under the build root, and nvcc's output then differs from builds under other roots", "why", err)
			srcRoot = root
		}
	}
	name := "epbuild-" + comp + "-" + key[:12]
	dir, out := filepath.Join(srcRoot, name), filepath.Join(root, name)
	unlock, err := lockBuildDir(ctx, dir, r.Log.Info)
	if err != nil {
		return nil, err
	}
	remove := func() {
		for _, d := range []string{out, dir} {
			_ = disk.MakeWritable(d)
			_ = os.RemoveAll(d)
		}
	}
	// under the lock, anything there is what a killed build left
	for _, d := range []string{dir, out} {
		st, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if !st.IsDir() || !ownedByUs(st) {
			unlock()
			return nil, &toolchain.PreflightError{Recipe: comp, Missing: []toolchain.Missing{{What: "build directory " + d,
				Need: "a directory of this user's, or none", Found: "a " + manifest.FileKind(st.Mode()) + " of user " + ownerOf(st) + " (left by another user's interrupted build?)",
				Fix: "remove it, or set EPBUILD_BUILD_ROOT to another directory"}}}
		}
		_ = disk.MakeWritable(d)
		if err := os.RemoveAll(d); err != nil {
			unlock()
			return nil, fmt.Errorf("remove %s, left by an interrupted build: %w", d, err)
		}
	}
	// only this user may enter: the patched sources and the build are nobody else's
	// business, whatever the umask gives what lies inside
	for _, d := range []string{dir, out} {
		if err := os.Mkdir(d, 0o700); err != nil && !(d == out && out == dir && errors.Is(err, fs.ErrExist)) {
			remove()
			unlock()
			return nil, disk.NoSpaceOr(fmt.Errorf("make the build directory: %w", err), "make the build directory", filepath.Dir(d), 0, fixBuildRoot)
		}
	}
	return &workDir{path: dir, out: out, release: func() {
		remove()
		unlock()
	}, keep: unlock}, nil
}

// ensureBuildRoot makes a root that does not exist yet (this user's, 0700) and checks it.
func ensureBuildRoot(root string) error {
	if _, err := os.Lstat(root); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return &toolchain.PreflightError{Missing: []toolchain.Missing{{What: "build root " + root, Need: "a directory", Found: err.Error(),
				Fix: "create it, or set EPBUILD_BUILD_ROOT to a directory this user may create"}}}
		}
	}
	return checkBuildRoot(root)
}

const fixBuildRoot = "free space there or set EPBUILD_BUILD_ROOT to a directory with room"

// checkBuildRoot refuses a root where another user could move a build directory away and
// put one of theirs in its place: it must be a real directory, this user's or root's, and
// sticky if others may write to it (as /tmp is).
func checkBuildRoot(root string) error {
	st, err := os.Lstat(root)
	if err != nil {
		return &toolchain.PreflightError{Missing: []toolchain.Missing{{What: "build root " + root, Need: "a directory", Found: err.Error(),
			Fix: "create it, or set EPBUILD_BUILD_ROOT to one that exists"}}}
	}
	owner, uid := ownerUID(st)
	switch {
	case !st.IsDir():
		err = fmt.Errorf("a %s", manifest.FileKind(st.Mode()))
	case owner && uid != os.Getuid() && uid != 0:
		err = fmt.Errorf("owned by user %s, who could replace a build directory in it", ownerOf(st))
	case st.Mode().Perm()&0o022 != 0 && st.Mode()&fs.ModeSticky == 0:
		err = errors.New("writable by others and not sticky: another user could replace a build directory in it")
	case mountedNoexec(root):
		err = errors.New("on a file system mounted noexec: a build runs what it builds")
	}
	if err != nil {
		return &toolchain.PreflightError{Missing: []toolchain.Missing{{What: "build root " + root, Need: "a directory of this user's or root's (sticky if others may write to it), where programs may run",
			Found: err.Error(), Fix: "set EPBUILD_BUILD_ROOT to such a directory"}}}
	}
	return nil
}

func ownerUID(st fs.FileInfo) (bool, int) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return true, int(s.Uid)
	}
	return false, -1
}

func ownedByUs(st fs.FileInfo) bool {
	known, uid := ownerUID(st)
	return !known || uid == os.Getuid()
}

func ownerOf(st fs.FileInfo) string {
	_, uid := ownerUID(st)
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// lockBuildDir takes the lock of the build directory dir (<root>/epbuild-<comp>-<key12>)
// for this user: a file in <root>/epbuild-locks-<uid>/, a directory only this user may
// write. A lock file in the shared root itself could be made first by anyone (or be a
// FIFO) and block every build of that key. Builds of other users are kept apart by the
// directory itself: one of theirs is refused, never removed. It waits, saying so once,
// until the lock is free or ctx ends.
func lockBuildDir(ctx context.Context, dir string, say func(msg any, kv ...any)) (func(), error) {
	fix := "remove it (no build of yours may be running), or set EPBUILD_BUILD_ROOT to a directory of yours"
	locks, err := cache.PrivateDir(filepath.Join(filepath.Dir(dir), fmt.Sprintf("epbuild-locks-%d", os.Getuid())))
	if err != nil {
		return nil, &toolchain.PreflightError{Missing: []toolchain.Missing{{What: "lock directory", Need: "a directory of this user's that nobody else may write",
			Found: err.Error(), Fix: "set EPBUILD_BUILD_ROOT to another directory (the same on every machine whose builds must agree)"}}}
	}
	path := filepath.Join(locks, filepath.Base(dir)+".lock")
	l, err := cache.OpenLock(path, 0o600, fix)
	if err != nil {
		return nil, &toolchain.PreflightError{Missing: []toolchain.Missing{{What: "lock " + path, Need: "a regular file of this user's", Found: err.Error(), Fix: fix}}}
	}
	wait := func(l *cache.FileLock, path string) error {
		err := l.Wait(ctx, false, 100*time.Millisecond, func() {
			say("waiting for another build of the same key (another cache)", "lock", path)
		})
		if err != nil {
			l.Close()
		}
		return err
	}
	if err := wait(l, path); err != nil {
		return nil, err
	}
	// Also the lock beside the directory, where an older epbuild locks it, when it is a
	// file of this user's or root's; anything else there is ignored: an older epbuild
	// would be stopped by it anyway, and this build keeps to its own lock.
	old, err := cache.OpenLock(dir+".lock", 0o644, fix)
	if err != nil {
		say("ignoring the lock file an older epbuild would use", "lock", dir+".lock", "why", err)
		return l.Close, nil
	}
	if err := wait(old, dir+".lock"); err != nil {
		l.Close()
		return nil, err
	}
	return func() { old.Close(); l.Close() }, nil
}

// reproEnv is what the measures add to a build step's environment, given the source and
// build directories and the toolchain; base is the environment it adds to.
func reproEnv(base []string, comp string, wd *workDir, sde int64, t *toolchain.Toolchain) map[string]string {
	env := map[string]string{
		"SOURCE_DATE_EPOCH": strconv.FormatInt(sde, 10),
		"TZ":                "UTC",
		"LC_ALL":            "C.UTF-8",
		"PYTHONHASHSEED":    "0",
		// no user or system git config: setup.py's `git rev-parse --short` follows core.abbrev
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		// temporary files (nvcc's, the compilers') go with the build directory
		"TMPDIR": filepath.Join(wd.out, "tmp"),
	}
	if flags := prefixMapFlags(comp, wd, t); flags != nil {
		for _, k := range []string{"CFLAGS", "CXXFLAGS"} {
			env[k] = strings.TrimSpace(toolchain.GetenvFrom(base, k) + " " + strings.Join(flags, " "))
		}
		if t.NVCC != "" {
			x := toolchain.GetenvFrom(base, "NVCC_APPEND_FLAGS")
			for _, f := range flags {
				x += " -Xcompiler=" + f
			}
			env["NVCC_APPEND_FLAGS"] = strings.TrimSpace(x)
		}
	}
	return env
}

// prefixMapFlags map the source and the build directory to the component's name in
// everything the host compiler writes (__FILE__, debug information): gcc 8 and later,
// clang 10 and later.
func prefixMapFlags(comp string, wd *workDir, t *toolchain.Toolchain) []string {
	if t.GCC == "" {
		return nil
	}
	v, err := compat.ParseVersion(t.GCC)
	if err != nil || v.Less(compat.MustVersion("8")) {
		return nil
	}
	flags := []string{"-ffile-prefix-map=" + wd.path + "=" + comp}
	if wd.out != wd.path {
		flags = append(flags, "-ffile-prefix-map="+wd.out+"="+comp)
	}
	return flags
}

// nvccWrappers are the scripts that run nvcc with a seed derived from the output's path
// in the build directory and its temporary files beside the object: one in nvcc's place
// (torch's cpp_extension runs it as PYTORCH_NVCC), one as CMake's CUDA compiler launcher
// (called with the compiler first; any other program runs as it is).
type nvccWrappers struct{ nvcc, launcher string }

// writeNVCCWrappers writes them into the source directory; none when this nvcc can do
// neither.
func writeNVCCWrappers(wd *workDir, t *toolchain.Toolchain) (nvccWrappers, error) {
	if t.NVCC == "" || !t.NVCCRandomSeed && !t.NVCCObjTemp {
		return nvccWrappers{}, nil
	}
	seed, objtemp := "", ""
	if t.NVCCRandomSeed {
		// the seed names the output inside the source or build directory: the same in
		// every build and under every root, and different for every object, as nvcc requires
		seed = `[ -n "$out" ] && { rel=${out#` + wd.out + `/}; rel=${rel#` + wd.path + `/}; set -- "--frandom-seed=$rel" "$@"; }`
	}
	if t.NVCCObjTemp {
		// only when it compiles (-c, -dc, -dw) an object; the temporary file's name is
		// written into the object
		objtemp = `[ -n "$compile" ] && [ -n "$out" ] && set -- -objtemp "$@"`
	}
	body := `out= prev= compile= only=
for a in "$@"; do
	case $prev in -o|--output-file) out=$a ;; esac
	case $a in
	--output-file=*) out=${a#--output-file=} ;;
	-c|--compile|-dc|--device-c|-dw|--device-w) compile=1 ;;
	-E|--preprocess|-M|-MM|--generate-dependencies|--generate-nonsystem-dependencies) only=1 ;;
	esac
	prev=$a
done
[ -n "$only" ] && compile=
` + seed + `
` + objtemp + `
exec "$nvcc" "$@"
`
	head := `#!/bin/sh
# Written by epbuild for one build (docs/reproducible.md): runs nvcc with a seed for the
# names it would make up at random, and its temporary files beside the object, so that
# two builds give the same bytes.
`
	dir := filepath.Join(wd.path, ".epbuild")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nvccWrappers{}, err
	}
	w := nvccWrappers{nvcc: filepath.Join(dir, "nvcc"), launcher: filepath.Join(dir, "nvcc-launcher")}
	scripts := map[string]string{
		w.nvcc: head + "nvcc=" + quote.ShellAlways(t.NVCC) + "\n" + body,
		w.launcher: head + `case "${1-}" in */nvcc|nvcc) nvcc=$1; shift ;; *) exec "$@" ;; esac
` + body,
	}
	for path, script := range scripts {
		if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
			return nvccWrappers{}, err
		}
	}
	return w, nil
}

// BuildHost is what a build records about the machine that ran it, in its log and in
// the result, never in the artifact.
type BuildHost struct {
	Hostname  string `json:"hostname,omitempty"`
	User      string `json:"user,omitempty"`
	Jobs      int    `json:"jobs"`
	Python    string `json:"python,omitempty"` // the interpreter found on PATH
	Cache     string `json:"cache"`
	BuildRoot string `json:"build_root,omitempty"` // "" with the measures off
	GOOS      string `json:"goos"`
}

func (r *Runner) buildHost() *BuildHost {
	h := &BuildHost{Jobs: r.Toolchain.Jobs, Python: r.Toolchain.Python, Cache: r.Store.Dir(), GOOS: runtime.GOOS}
	h.Hostname, _ = os.Hostname()
	if u, err := user.Current(); err == nil {
		h.User = u.Username
	}
	if !r.Repro.Off {
		h.BuildRoot = r.Repro.root()
	}
	return h
}

// buildRecord is logs/build.json: the machine that ran a build, where, and the
// environment epbuild gave its steps on top of the caller's.
type buildRecord struct {
	Host *BuildHost        `json:"host"`
	Dir  string            `json:"dir"`           // the source directory
	Out  string            `json:"out,omitempty"` // the build directory, where it is another
	Env  map[string]string `json:"env"`
}

func writeBuildRecord(logs string, rec buildRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(logs, "build.json"), append(b, '\n'), 0o644)
}
