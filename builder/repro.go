package builder

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

	"github.com/epbuild/epbuild/compat"
)

// Reproducible builds: the same plan gives the same bytes wherever the cache is and
// whichever machine (of one toolchain) runs the build.
//
// Compilers write the paths they are given into what they build: __FILE__ in assertion
// messages, debug information, RUNPATHs, install-time paths in generated files. A build
// therefore runs in a directory whose path depends on the build key alone,
// <root>/epbuild-<component>-<key12> (root /tmp unless EPBUILD_BUILD_ROOT says otherwise),
// never on the cache's location or a random suffix: nvcc writes the device side's
// __FILE__ as given and no flag maps it. That directory holds the source tree (src/), the
// build trees, the staging prefix's path (prefix; the files themselves land in the stage's
// DESTDIR) and links to the dependencies' prefixes and trees (deps/<name>/prefix, src).
// It must be a real directory, not a link to one: setup.py makes its sources absolute
// from the working directory, and the kernel resolves links in that.
//
// On top of that, every host compiler maps the directory away (-ffile-prefix-map, through
// CFLAGS/CXXFLAGS, the CMake flags and NVCC_APPEND_FLAGS' -Xcompiler), nvcc runs with a
// seed derived from the output's path (the names it would make up at random) and its
// temporary files beside the object (their names end up in it), and every step gets
// SOURCE_DATE_EPOCH, TZ=UTC, LC_ALL=C.UTF-8, PYTHONHASHSEED=0 and no user git config
// (setup.py's `git rev-parse --short` honours core.abbrev).
//
// Builds of one key run one at a time on a machine (a lock beside the directory, shared
// by every cache and user); different keys run side by side. A build killed midway
// leaves its directory behind; the next build of that key removes it.

// DefaultBuildRoot holds the build directories. /tmp is on every Linux machine, and its
// sticky bit keeps other users from renaming a build directory away.
const DefaultBuildRoot = "/tmp"

// reproFormat names the measures: a change in them changes the build keys.
const reproFormat = "repro/2"

// Repro says how builds are kept reproducible.
type Repro struct {
	// Off turns every measure off (EPBUILD_REPRO=off): builds run in the cache as they
	// used to. For measuring what the measures cost only; such builds get keys of their own.
	Off bool
	// Root holds the build directories ("": DefaultBuildRoot). Its path is written into
	// what nvcc builds: builds meant to agree need the same root.
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
		return r, &UsageError{Err: fmt.Errorf("EPBUILD_REPRO=%q: give off (to measure what the reproducibility measures cost) or leave it unset", v)}
	}
	r.Root = getenv("EPBUILD_BUILD_ROOT")
	if r.Root != "" && (!rootRe.MatchString(r.Root) || filepath.Clean(r.Root) != r.Root) {
		return r, &UsageError{Err: fmt.Errorf("EPBUILD_BUILD_ROOT=%q: give a clean absolute path of letters, digits and ._/+- (it goes into compiler flags)", r.Root)}
	}
	return r, nil
}

func (r Repro) root() string {
	if r.Root == "" {
		return DefaultBuildRoot
	}
	return r.Root
}

// key is what the measures add to a build key.
func (r Repro) key() string {
	if r.Off {
		return "off"
	}
	return reproFormat + " " + r.root()
}

// workDir is where one build runs, held until release.
type workDir struct {
	path    string
	release func()
	// keep lets go of the directory and leaves it (a failed build kept for reading).
	keep func()
}

// acquireWorkDir makes the build directory of a component's build key: the stable one
// (locked for this build), or with the measures off a fresh one in the cache.
func (r *Runner) acquireWorkDir(ctx context.Context, comp, key string) (*workDir, error) {
	if r.Repro.Off {
		d, err := os.MkdirTemp(filepath.Join(r.Store.dir, "tmp"), "work-"+key[:12]+"-")
		if err != nil {
			return nil, err
		}
		return &workDir{path: d, release: func() { _ = makeWritable(d); _ = os.RemoveAll(d) }, keep: func() {}}, nil
	}
	root := r.Repro.root()
	if err := checkBuildRoot(root); err != nil {
		return nil, err
	}
	dir := filepath.Join(root, "epbuild-"+comp+"-"+key[:12])
	unlock, err := lockShared(ctx, dir+".lock", r.Log.Info)
	if err != nil {
		return nil, err
	}
	// under the lock, anything there is what a killed build left
	if st, err := os.Lstat(dir); err == nil {
		if !st.IsDir() || !ownedByUs(st) {
			unlock()
			return nil, &PreflightError{Recipe: comp, Missing: []Missing{{What: "build directory " + dir,
				Need: "a directory of this user's, or none", Found: "a " + fileKind(st.Mode()) + " of user " + ownerOf(st) + " (left by another user's interrupted build?)",
				Fix: "remove it, or set EPBUILD_BUILD_ROOT to another directory (the same on every machine whose builds must agree)"}}}
		}
		_ = makeWritable(dir)
		if err := os.RemoveAll(dir); err != nil {
			unlock()
			return nil, fmt.Errorf("remove %s, left by an interrupted build: %w", dir, err)
		}
	}
	// only this user may enter: the patched sources and the build are nobody else's
	// business, whatever the umask gives what lies inside
	if err := os.Mkdir(dir, 0o700); err != nil {
		unlock()
		return nil, noSpaceOr(fmt.Errorf("make the build directory: %w", err), "make the build directory", root, 0, fixBuildRoot)
	}
	return &workDir{path: dir, release: func() {
		_ = makeWritable(dir)
		_ = os.RemoveAll(dir)
		unlock()
	}, keep: unlock}, nil
}

const fixBuildRoot = "free space there or set EPBUILD_BUILD_ROOT to a directory with room (the same on every machine whose builds must agree)"

// checkBuildRoot refuses a root where another user could move a build directory away and
// put one of theirs in its place: it must be a real directory, this user's or root's, and
// sticky if others may write to it (as /tmp is).
func checkBuildRoot(root string) error {
	st, err := os.Lstat(root)
	if err != nil {
		return &PreflightError{Missing: []Missing{{What: "build root " + root, Need: "a directory", Found: err.Error(),
			Fix: "create it, or set EPBUILD_BUILD_ROOT to one that exists"}}}
	}
	owner, uid := ownerUID(st)
	switch {
	case !st.IsDir():
		err = fmt.Errorf("a %s", fileKind(st.Mode()))
	case owner && uid != os.Getuid() && uid != 0:
		err = fmt.Errorf("owned by user %s, who could replace a build directory in it", ownerOf(st))
	case st.Mode().Perm()&0o022 != 0 && st.Mode()&fs.ModeSticky == 0:
		err = errors.New("writable by others and not sticky: another user could replace a build directory in it")
	case mountedNoexec(root):
		err = errors.New("on a file system mounted noexec: a build runs what it builds")
	}
	if err != nil {
		return &PreflightError{Missing: []Missing{{What: "build root " + root, Need: "a directory of this user's or root's (sticky if others may write to it), where programs may run",
			Found: err.Error(), Fix: "set EPBUILD_BUILD_ROOT to such a directory (the same on every machine whose builds must agree)"}}}
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

// lockShared takes an exclusive lock on the file path, which every user may open: a
// lock file another user made (0644) is opened read-only rather than created, since a
// sticky directory refuses O_CREAT on another user's file (fs.protected_regular). It
// waits, saying so once, until the lock is free or ctx ends.
func lockShared(ctx context.Context, path string, say func(msg any, kv ...any)) (func(), error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		f, err = os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			_ = f.Chmod(0o644) // whatever the umask: other users' builds must open it
		} else if errors.Is(err, fs.ErrExist) {
			f, err = os.Open(path)
		}
	}
	if err != nil {
		return nil, &PreflightError{Missing: []Missing{{What: "lock " + path, Need: "a lock file every user can read", Found: err.Error(),
			Fix: "remove it (no build may be running), or set EPBUILD_BUILD_ROOT to another directory"}}}
	}
	said := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if !said {
			say("waiting for another build of the same key (another cache or user)", "lock", path)
			said = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// reproEnv is what the measures add to a build step's environment, given the build
// directory and the toolchain; base is the environment it adds to.
func reproEnv(base []string, comp, work string, sde int64, t *Toolchain) map[string]string {
	env := map[string]string{
		"SOURCE_DATE_EPOCH": strconv.FormatInt(sde, 10),
		"TZ":                "UTC",
		"LC_ALL":            "C.UTF-8",
		"PYTHONHASHSEED":    "0",
		// no user or system git config: setup.py's `git rev-parse --short` follows core.abbrev
		"GIT_CONFIG_NOSYSTEM": "1",
		"GIT_CONFIG_GLOBAL":   os.DevNull,
		// temporary files (nvcc's, the compilers') go with the build directory
		"TMPDIR": filepath.Join(work, "tmp"),
	}
	if flag := prefixMapFlag(comp, work, t); flag != "" {
		for _, k := range []string{"CFLAGS", "CXXFLAGS"} {
			env[k] = strings.TrimSpace(getenvFrom(base, k) + " " + flag)
		}
		if t.NVCC != "" {
			env["NVCC_APPEND_FLAGS"] = strings.TrimSpace(getenvFrom(base, "NVCC_APPEND_FLAGS") + " -Xcompiler=" + flag)
		}
	}
	return env
}

// prefixMapFlag maps the build directory to the component's name in everything the host
// compiler writes (__FILE__, debug information): gcc 8 and later, clang 10 and later.
func prefixMapFlag(comp, work string, t *Toolchain) string {
	if t.GCC == "" {
		return ""
	}
	v, err := compat.ParseVersion(t.GCC)
	if err != nil || v.Less(compat.MustVersion("8")) {
		return ""
	}
	return "-ffile-prefix-map=" + work + "=" + comp
}

// nvccWrappers are the scripts that run nvcc with a seed derived from the output's path
// in the build directory and its temporary files beside the object: one in nvcc's place
// (torch's cpp_extension runs it as PYTORCH_NVCC), one as CMake's CUDA compiler launcher
// (called with the compiler first; any other program runs as it is).
type nvccWrappers struct{ nvcc, launcher string }

// writeNVCCWrappers writes them into the build directory; none when this nvcc can do
// neither.
func writeNVCCWrappers(work string, t *Toolchain) (nvccWrappers, error) {
	if t.NVCC == "" || !t.NVCCRandomSeed && !t.NVCCObjTemp {
		return nvccWrappers{}, nil
	}
	seed, objtemp := "", ""
	if t.NVCCRandomSeed {
		// the seed names the output inside the build directory: the same in every build,
		// and different for every object, as nvcc requires
		seed = `[ -n "$out" ] && set -- "--frandom-seed=${out#` + work + `/}" "$@"`
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
	dir := filepath.Join(work, ".epbuild")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nvccWrappers{}, err
	}
	w := nvccWrappers{nvcc: filepath.Join(dir, "nvcc"), launcher: filepath.Join(dir, "nvcc-launcher")}
	scripts := map[string]string{
		w.nvcc: head + "nvcc=" + shellQuote(t.NVCC) + "\n" + body,
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
	h := &BuildHost{Jobs: r.Toolchain.Jobs, Python: r.Toolchain.Python, Cache: r.Store.dir, GOOS: runtime.GOOS}
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
	Dir  string            `json:"dir"`
	Env  map[string]string `json:"env"`
}

func writeBuildRecord(logs string, rec buildRecord) error {
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(logs, "build.json"), append(b, '\n'), 0o644)
}
