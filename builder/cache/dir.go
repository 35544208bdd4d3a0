package cache

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/epbuild/epbuild/builder/quote"
)

// A cache directory is epbuild's only when it says so: MarkerName, written when epbuild
// makes the directory (or adopts one an older epbuild made). Commands that create or
// remove anything in a cache refuse a directory that is neither empty nor marked, so that
// EPBUILD_CACHE pointed at the wrong place ($HOME, a project) harms nothing.
const (
	MarkerName = "EPBUILD-CACHE"
	// markerFormat is the layout's version; a newer one is refused (an older epbuild
	// must not remove what it does not know).
	markerFormat = 1
	markerHead   = "epbuild cache"
)

func markerText() string {
	return markerHead + "\nformat: " + strconv.Itoa(markerFormat) + "\n" +
		"This directory is epbuild's cache: `epbuild cache gc` removes what epbuild made in it.\n"
}

// Layout is every top-level name epbuild makes in a cache directory: this package's
// (git, archives, meta, locks, tmp) and the stage store's. A directory that holds these
// only, and at least one of legacyProof, is a cache an epbuild older than the marker made.
var layout = []string{gitDir, "archives", metaDir, lockDir, tmpDir,
	"stages", "runs", "logs", "compat", "toolchain", "embedded", MarkerName}

// legacyProof are the names only an epbuild cache has (tmp/ and logs/ are everyone's).
// compat/ is one: a rule check keeps its findings there before any run makes the rest.
var legacyProof = []string{gitDir, "archives", metaDir, lockDir, "stages", "runs", "compat", "toolchain", "embedded"}

// IsLayoutName reports whether name is one epbuild makes at the top of a cache.
func IsLayoutName(name string) bool {
	// the marker's temp name, left by a process killed while it wrote the marker
	return slices.Contains(layout, name) || strings.HasPrefix(name, ".tmp-"+MarkerName+"-")
}

// isMarkerTemp is the marker's temporary file (WriteFile's name), left by a process
// killed while it wrote the marker.
func isMarkerTemp(d fs.DirEntry) bool {
	return d.Type().IsRegular() && strings.HasPrefix(d.Name(), ".tmp-"+MarkerName+"-")
}

// DirState is what a directory is, as a cache.
type DirState int

// The states.
const (
	Missing DirState = iota // not there
	Empty                   // an empty directory: epbuild may make a cache in it
	Marked                  // holds MarkerName: a cache
	Legacy                  // an older epbuild's cache (its layout, no marker): adopted
)

// DirError is a cache directory epbuild cannot use, with why and the fix.
type DirError struct {
	Dir  string
	Why  string
	Fix  string
	Code int // 2: not a cache (bad input); 3: not writable, read-only
	Err  error
}

func (e *DirError) Error() string {
	return fmt.Sprintf("cache %s: %s; fix: %s", e.Dir, e.Why, e.Fix)
}

// ExitCode is 2 for a directory that is not a cache, 3 for one epbuild may not write.
func (e *DirError) ExitCode() int { return e.Code }

func (e *DirError) Unwrap() error { return e.Err }

// FixWritable is what to do about a cache this user may not write.
const FixWritable = "set EPBUILD_CACHE to a directory you can write (a new or empty one), or take the artifact from a shared build cache with --cache-from"

// Inspect says what dir is as a cache, refusing (a *DirError, exit 2) a directory that
// holds anything epbuild did not make, or a marker of a newer format.
func Inspect(dir string) (DirState, error) {
	st, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Missing, nil
	}
	if err != nil {
		return Missing, AccessError(dir, "look at it", err)
	}
	if !st.IsDir() {
		// a link to a directory is followed: a cache on another disk is often linked
		if st.Mode()&fs.ModeSymlink == 0 {
			return Missing, notCache(dir, "it is not a directory")
		}
		if st, err = os.Stat(dir); err != nil || !st.IsDir() {
			return Missing, notCache(dir, "it is a link to something that is not a directory")
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, MarkerName)); err == nil {
		return Marked, checkMarker(dir, string(b))
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Missing, AccessError(dir, "read its "+MarkerName, err)
	}
	des, err := os.ReadDir(dir)
	if err != nil {
		return Missing, AccessError(dir, "list it", err)
	}
	if len(des) == 0 {
		return Empty, nil
	}
	var foreign []string
	proof, onlyMarkerTemps := false, true
	for _, d := range des {
		if isMarkerTemp(d) {
			continue
		}
		onlyMarkerTemps = false
		switch {
		case !IsLayoutName(d.Name()) || !d.IsDir():
			foreign = append(foreign, quote.Term(d.Name())) // anyone's names: shown safely
		case slices.Contains(legacyProof, d.Name()):
			proof = true
		}
	}
	if onlyMarkerTemps {
		return Empty, nil // a run killed while it wrote the marker of a new cache
	}
	if len(foreign) > 0 || !proof {
		why := "it is not empty and has no " + MarkerName + " file, so it is not a cache epbuild made"
		if len(foreign) > 0 {
			if len(foreign) > 3 {
				foreign = append(foreign[:3], "...")
			}
			why += " (it holds " + strings.Join(foreign, ", ") + ")"
		}
		return Missing, notCache(dir, why)
	}
	return Legacy, nil
}

func notCache(dir, why string) error {
	return &DirError{Dir: dir, Why: why, Code: 2,
		Fix: "point EPBUILD_CACHE at an epbuild cache or at an empty or new directory (epbuild never writes into or removes from anything else)"}
}

func checkMarker(dir, text string) error {
	sc := bufio.NewScanner(strings.NewReader(text))
	if !sc.Scan() || sc.Text() != markerHead || !sc.Scan() {
		return notCache(dir, "its "+MarkerName+" file is not one epbuild wrote")
	}
	v, ok := strings.CutPrefix(sc.Text(), "format: ")
	n, err := strconv.Atoi(v)
	if !ok || err != nil {
		return notCache(dir, "its "+MarkerName+" file is not one epbuild wrote")
	}
	if n > markerFormat {
		return &DirError{Dir: dir, Code: 2, Why: fmt.Sprintf("a newer epbuild made it (cache format %d; this epbuild knows %d)", n, markerFormat),
			Fix: "use that epbuild with it, or point EPBUILD_CACHE at another directory"}
	}
	return nil
}

// Writable reports whether this process may create files in dir (false on a read-only
// mount, for root too).
func Writable(dir string) bool { return unix.Access(dir, unix.W_OK) == nil }

// IsAccess reports whether err is a refusal to write: permission, or a read-only file
// system.
func IsAccess(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// AccessError turns a permission or read-only refusal met doing what in the cache dir
// into a *DirError (exit 3) that says whose the directory is and the fix; other errors
// are wrapped as they are.
func AccessError(dir, what string, err error) error {
	if !IsAccess(err) {
		return fmt.Errorf("cache %s: %s: %w", dir, what, err)
	}
	why := what + ": "
	if errors.Is(err, syscall.EROFS) {
		why += "it is on a read-only file system"
	} else {
		why += "permission denied"
		if p := ownerOf(dir); p != "" {
			why += " (it is " + p + "'s; you are " + currentUser() + ")"
		}
	}
	return &DirError{Dir: dir, Why: why, Fix: FixWritable, Code: 3, Err: err}
}

// ownerOf names the owner of dir, or of its nearest existing parent.
func ownerOf(dir string) string {
	for p := dir; ; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil {
			if s, ok := st.Sys().(*syscall.Stat_t); ok {
				return userName(int(s.Uid))
			}
			return ""
		}
		if p == filepath.Dir(p) {
			return ""
		}
	}
}

func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return "user " + u.Username
	}
	return "uid " + strconv.Itoa(uid)
}

func currentUser() string { return userName(os.Getuid()) }

// writeMarker marks dir as a cache.
func writeMarker(dir string) error {
	return WriteFile(filepath.Join(dir, MarkerName), []byte(markerText()), 0o644)
}
