package builder

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/host"
	"github.com/epbuild/epbuild/builder/inspect"
	"github.com/epbuild/epbuild/patches/effect"
)

// VerifyCheck is one verify-install check: a stable ID that fleets can compare across
// nodes, what was read, why it matters and how to fix it.
type VerifyCheck struct {
	ID       string `json:"id"`
	Status   string `json:"status"` // pass, warn, fail or skip (inspect.Status*)
	Read     string `json:"read"`
	Expected string `json:"expected,omitempty"`
	Found    string `json:"found,omitempty"`
	Why      string `json:"why,omitempty"`
	Fix      string `json:"fix,omitempty"`
}

// VerifyReport is everything verify-install found about one prefix.
type VerifyReport struct {
	Prefix   string        `json:"prefix"`
	Recipe   string        `json:"recipe,omitempty"`
	PlanKey  string        `json:"plan_key,omitempty"`
	Artifact string        `json:"artifact,omitempty"`
	Checks   []VerifyCheck `json:"checks"`
	// Pairs and MappingLine come from the host checks: the GPU↔NIC pairing and the
	// DEEP_EP_DEVICE_TO_HCA_MAPPING line it implies.
	Pairs       []host.Pair         `json:"pairs,omitempty"`
	MappingLine string              `json:"mapping_line,omitempty"`
	Traffic     *host.TrafficReport `json:"traffic,omitempty"`
}

// Failed reports whether any check failed.
func (r *VerifyReport) Failed() bool {
	return slices.ContainsFunc(r.Checks, func(c VerifyCheck) bool { return c.Status == inspect.StatusFail })
}

// Check returns the check with that ID.
func (r *VerifyReport) Check(id string) (VerifyCheck, bool) {
	for _, c := range r.Checks {
		if c.ID == id {
			return c, true
		}
	}
	return VerifyCheck{}, false
}

// Counts returns how many checks have each status.
func (r *VerifyReport) Counts() map[string]int {
	n := map[string]int{}
	for _, c := range r.Checks {
		n[c.Status]++
	}
	return n
}

func (r *VerifyReport) add(c VerifyCheck) { r.Checks = append(r.Checks, c) }

// VerifyOptions says what to verify and with what.
type VerifyOptions struct {
	Prefix string
	// Python runs the import checks; "" means the interpreter the build used when this
	// host has it at the same path, else python3 from PATH.
	Python string
	// Environ is the base environment of the Python checks, before the runtime env is
	// added; nil means CleanEnviron(os.Getenv). A clean base keeps a stale PYTHONPATH or
	// LD_LIBRARY_PATH of the calling shell from passing (or failing) the checks.
	Environ []string
	// FilesOnly stops after the manifest, receipt and file checks (no Python, no env.sh).
	FilesOnly bool
	// Host adds builder/host's checks, reading /sys, /proc and /dev under Sysroot.
	Host    bool
	Sysroot host.Sysroot
	// Traffic, when set, is run while the NIC counters under Sysroot are sampled
	// (host.SampleTraffic), with or without Host.
	Traffic func(context.Context) error
}

// PrefixError is a prefix that cannot be verified at all (absent, not a directory): bad
// input, exit 2.
type PrefixError struct {
	Prefix string
	Err    error
}

func (e *PrefixError) Error() string {
	return fmt.Sprintf("verify %s: %v", e.Prefix, e.Err)
}
func (e *PrefixError) Unwrap() error { return e.Err }

// ExitCode: bad input.
func (e *PrefixError) ExitCode() int { return 2 }

// CleanEnviron is the base environment for verify's Python checks: what it keeps from
// the caller's is enough to find and run the interpreter, nothing that changes what it
// imports or loads.
func CleanEnviron(getenv func(string) string) []string {
	var out []string
	for _, k := range []string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LC_ALL", "PYENV_ROOT", "PYENV_VERSION"} {
		if v := getenv(k); v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// Why and fix texts shared by several checks.
const (
	whyFiles = "the installed copy must be the one that was built and checked: a file changed after install, " +
		"or another copy installed over it, is how an unpatched deep_ep/buffer.py sent every GPU through one NIC"
	fixReinstall = "reinstall the artifact: epbuild install ARTIFACT --prefix PREFIX (the receipt names the artifact)"
)

// fix is how to reinstall this prefix, naming the artifact when the receipt does.
func (v *verifier) fix() string {
	if v.rep.Artifact == "" {
		return strings.Replace(fixReinstall, "PREFIX", v.prefix, 1)
	}
	return fmt.Sprintf("reinstall the artifact: epbuild install %s --prefix %s", v.rep.Artifact, v.prefix)
}

// Verify checks an installed prefix against the manifest it carries and, with Host, the
// host it runs on. The error is for a prefix that is not there or a cancelled context;
// everything else is a check in the report.
func Verify(ctx context.Context, opts VerifyOptions) (*VerifyReport, error) {
	prefix, err := filepath.Abs(opts.Prefix)
	if err != nil {
		return nil, &PrefixError{Prefix: opts.Prefix, Err: err}
	}
	if st, err := os.Stat(prefix); err != nil {
		return nil, &PrefixError{Prefix: prefix, Err: err}
	} else if !st.IsDir() {
		return nil, &PrefixError{Prefix: prefix, Err: errors.New("not a directory")}
	}
	rep := &VerifyReport{Prefix: prefix}
	v := &verifier{opts: opts, prefix: prefix, rep: rep}
	if opts.Environ == nil {
		v.opts.Environ = CleanEnviron(os.Getenv)
	}
	if !v.manifest() {
		if opts.Host {
			v.host(ctx, nil)
		}
		v.traffic(ctx)
		return rep, ctx.Err()
	}
	v.receipt()
	if err := v.files(ctx); err != nil {
		return rep, err
	}
	if opts.FilesOnly {
		return rep, ctx.Err()
	}
	v.envScript()
	v.recipeChecks(ctx)
	v.singleNVSHMEM(ctx)
	if opts.Host {
		v.host(ctx, v.m)
	}
	v.traffic(ctx)
	return rep, ctx.Err()
}

type verifier struct {
	opts   VerifyOptions
	prefix string
	rep    *VerifyReport
	m      *Manifest
	raw    []byte
	// prefixes maps each component the install carries to its directory.
	prefixes map[string]string
	env      []string
	envErr   error
}

// ReadInstalledManifest reads and decodes dir/manifest.json, returning its bytes too.
func ReadInstalledManifest(dir string) (*Manifest, []byte, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, nil, fmt.Errorf("read the manifest of %s: %w", dir, err)
	}
	var m Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, raw, fmt.Errorf("decode %s: %w", filepath.Join(dir, ManifestName), err)
	}
	switch {
	case m.Format != ManifestFormat:
		return nil, raw, fmt.Errorf("%s: format %d; this epbuild reads format %d (use the epbuild that built it, or a newer one)", filepath.Join(dir, ManifestName), m.Format, ManifestFormat)
	case m.Plan == nil || m.Recipe == "" || m.PlanKey == "" || len(m.Files) == 0:
		return nil, raw, fmt.Errorf("%s: no recipe, plan or file list: not written by epbuild", filepath.Join(dir, ManifestName))
	}
	return &m, raw, nil
}

func (v *verifier) manifest() bool {
	c := VerifyCheck{ID: "install.manifest", Read: filepath.Join(v.prefix, ManifestName),
		Why: "the manifest records every file's hash and the plan the install was built from; nothing else can be checked without it"}
	m, raw, err := ReadInstalledManifest(v.prefix)
	if err != nil {
		c.Status, c.Found = inspect.StatusFail, err.Error()
		c.Fix = "install with epbuild install ARTIFACT --prefix PREFIX; a prefix copied by hand has no manifest"
		v.rep.add(c)
		return false
	}
	v.m, v.raw = m, raw
	v.rep.Recipe, v.rep.PlanKey = m.Recipe, m.PlanKey
	c.Status = inspect.StatusPass
	c.Found = fmt.Sprintf("recipe %s, plan %s, %d entries, built by epbuild %s", m.Recipe, shortKey(m.PlanKey), len(m.Files), m.Epbuild)
	v.rep.add(c)
	v.prefixes = installedPrefixes(m, v.prefix)
	v.env, v.envErr = RuntimeEnv(m.Plan, v.prefixes, v.opts.Environ)
	return true
}

func shortKey(k string) string {
	if len(k) > 12 {
		return k[:12]
	}
	return k
}

// installedPrefixes maps the components whose files the install carries (a top-level
// directory of the manifest) to their directories.
func installedPrefixes(m *Manifest, prefix string) map[string]string {
	top := map[string]bool{}
	for _, e := range m.Files {
		if e.Type == archive.TypeDir && !strings.Contains(e.Path, "/") {
			top[e.Path] = true
		}
	}
	out := map[string]string{}
	for _, c := range m.Plan.Components {
		if c.Source.Python == nil && top[c.Name] {
			out[c.Name] = filepath.Join(prefix, c.Name)
		}
	}
	return out
}

func (v *verifier) receipt() {
	c := VerifyCheck{ID: "install.receipt", Read: filepath.Join(v.prefix, ReceiptName),
		Why: "the receipt names the artifact installed here and pins manifest.json: an edited manifest could hide any other change"}
	r, err := ReadReceipt(v.prefix)
	sum := sha256Hex(v.raw)
	if err == nil {
		v.rep.Artifact = r.Artifact
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.Status, c.Found = inspect.StatusWarn, "no receipt: not installed by epbuild install"
		c.Fix = "install with epbuild install ARTIFACT --prefix PREFIX, which checks the artifact before it touches the prefix"
	case err != nil:
		c.Status, c.Found, c.Fix = inspect.StatusFail, err.Error(), v.fix()
	case r.ManifestSHA256 != sum:
		c.Status, c.Expected, c.Found = inspect.StatusFail, "manifest.json sha256 "+r.ManifestSHA256, "sha256 "+sum
		c.Why = "manifest.json changed since install: " + c.Why
		c.Fix = v.fix()
	case r.PlanKey != v.m.PlanKey:
		c.Status, c.Expected, c.Found, c.Fix = inspect.StatusFail, "plan "+shortKey(r.PlanKey), "plan "+shortKey(v.m.PlanKey), v.fix()
	default:
		c.Status = inspect.StatusPass
		c.Found = fmt.Sprintf("%s (sha256 %s), installed %s by epbuild %s", r.Artifact, shortKey(r.SHA256), r.InstalledAt.Format("2006-01-02 15:04:05Z07:00"), r.Epbuild)
	}
	v.rep.add(c)
}

// files checks every entry against the manifest: one summary check, then one check per
// problem so that each changed, missing, extra or re-moded path is listed with its own ID.
func (v *verifier) files(ctx context.Context) error {
	problems, st, err := VerifyFiles(ctx, v.prefix, v.m.Files)
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		v.rep.add(VerifyCheck{ID: "files", Status: inspect.StatusFail, Read: v.prefix, Found: err.Error(), Why: whyFiles, Fix: v.fix()})
		return nil
	}
	c := VerifyCheck{ID: "files", Read: fmt.Sprintf("%s: %d files (%s), %d directories, %d symlinks against %s",
		v.prefix, st.Files, byteCount(st.Bytes), st.Dirs, st.Symlinks, ManifestName), Why: whyFiles,
		Expected: fmt.Sprintf("the %d entries of the manifest, sha256 and mode", len(v.m.Files))}
	if st.Ignored > 0 {
		c.Read += fmt.Sprintf(" (%d Python bytecode caches ignored)", st.Ignored)
	}
	if len(problems) == 0 {
		c.Status, c.Found = inspect.StatusPass, "every entry matches"
		v.rep.add(c)
		return nil
	}
	kinds := map[string]int{}
	for _, p := range problems {
		kinds[p.Kind]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		parts = append(parts, fmt.Sprintf("%d %s", kinds[k], k))
	}
	c.Status, c.Found, c.Fix = inspect.StatusFail, strings.Join(parts, ", "), v.fix()
	v.rep.add(c)
	for _, p := range problems {
		v.rep.add(problemCheck(v.prefix, p, v.fix()))
	}
	return nil
}

// problemCheck explains one file problem.
func problemCheck(prefix string, p FileProblem, fix string) VerifyCheck {
	c := VerifyCheck{ID: "files." + p.Kind + ":" + p.Path, Status: inspect.StatusFail, Read: filepath.Join(prefix, filepath.FromSlash(p.Path)),
		Expected: p.Expected, Found: p.Found, Fix: fix}
	switch p.Kind {
	case ProblemChanged:
		c.Why = "its bytes are not what was built and checked"
	case ProblemMissing:
		c.Why = "the build installed it; whatever needs it fails, or finds another copy elsewhere"
	case ProblemExtra:
		c.Why = "the artifact does not carry it: a copy installed over this prefix by other means, or a leftover; Python may import it before the built module"
		c.Fix = "remove it, or reinstall into a fresh prefix"
	case ProblemMode:
		c.Why = "modes decide who can read and run the install: a lost exec or read bit breaks other users' jobs, an added write bit lets them change it"
		c.Fix = fmt.Sprintf("chmod %s %s, or reinstall", strings.TrimPrefix(p.Expected, "mode "), c.Read)
	case ProblemType:
		c.Why = "a different kind of entry (file, directory, symlink) than the build made"
	case ProblemUnreadable:
		c.Why = "it cannot be read, so it cannot be checked (and jobs cannot load it)"
		c.Fix = "check the permissions of " + c.Read + ", or reinstall"
	}
	return c
}

func byteCount(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// File problem kinds, as they appear in check IDs (files.<kind>:<path>).
const (
	ProblemChanged    = "changed"
	ProblemMissing    = "missing"
	ProblemExtra      = "extra"
	ProblemMode       = "mode"
	ProblemType       = "type"
	ProblemUnreadable = "unreadable"
)

// FileProblem is one way an installed tree differs from its manifest.
type FileProblem struct {
	Path     string `json:"path"`
	Kind     string `json:"kind"`
	Expected string `json:"expected,omitempty"`
	Found    string `json:"found,omitempty"`
}

// FileStats counts what VerifyFiles looked at.
type FileStats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
	// Ignored counts __pycache__ directories and their .pyc files: Python writes them
	// beside any module it imports from a writable prefix, so they are no change.
	Ignored int
}

type hashJob struct {
	path string
	want *archive.Entry
}

// VerifyFiles compares the tree at dir with the manifest's entries: content (size, then
// sha256), type, exact mode and symlink targets, and reports every entry that is missing
// or not in the manifest. manifest.json and the install receipt at the top are not
// entries. Files are hashed on runtime.NumCPU() workers while the walk goes on; a file
// whose size differs is reported without reading it. The error is for a dir that
// cannot be walked or a cancelled context; an unreadable entry is a problem.
func VerifyFiles(ctx context.Context, dir string, want []archive.Entry) ([]FileProblem, FileStats, error) {
	var st FileStats
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, st, fmt.Errorf("verify files of %s: %w", dir, err)
	}
	byPath := make(map[string]*archive.Entry, len(want))
	for i := range want {
		byPath[want[i].Path] = &want[i]
	}
	seen := make(map[string]bool, len(want))
	var (
		problems []FileProblem
		mu       sync.Mutex // guards problems and st.Bytes once the workers run
		wg       sync.WaitGroup
	)
	report := func(p FileProblem) {
		mu.Lock()
		problems = append(problems, p)
		mu.Unlock()
	}
	jobs := make(chan hashJob, 64)
	for range max(1, runtime.NumCPU()) {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			h := sha256.New()
			for j := range jobs {
				sum, n, err := archive.HashFile(ctx, j.path, h, buf)
				switch {
				case err != nil && ctx.Err() != nil:
				case err != nil:
					report(FileProblem{Path: j.want.Path, Kind: ProblemUnreadable, Found: err.Error()})
				case n != j.want.Size || sum != j.want.SHA256:
					report(FileProblem{Path: j.want.Path, Kind: ProblemChanged, Expected: describeContent(j.want.Size, j.want.SHA256), Found: describeContent(n, sum)})
				}
				mu.Lock()
				st.Bytes += n
				mu.Unlock()
			}
		})
	}
	walkErr := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if p == root {
			return err
		}
		rel, rerr := filepath.Rel(root, p)
		if rerr != nil {
			return rerr
		}
		rel = filepath.ToSlash(rel)
		if err != nil {
			// an unreadable directory: its children are reported missing below
			seen[rel] = byPath[rel] != nil
			report(FileProblem{Path: rel, Kind: ProblemUnreadable, Found: err.Error()})
			return nil
		}
		if rel == ManifestName || rel == ReceiptName {
			return nil
		}
		w := byPath[rel]
		if w == nil && bytecodeCache(rel, d) {
			st.Ignored++
			return nil
		}
		info, err := d.Info()
		if err != nil {
			report(FileProblem{Path: rel, Kind: ProblemUnreadable, Found: err.Error()})
			return nil
		}
		typ, found := describeEntry(p, info)
		if w == nil {
			report(FileProblem{Path: rel, Kind: ProblemExtra, Found: found})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		seen[rel] = true
		if typ != w.Type {
			report(FileProblem{Path: rel, Kind: ProblemType, Expected: string(w.Type), Found: found})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if typ != archive.TypeSymlink {
			if got := unixMode(info.Mode()); got != uint32(w.Mode.Perm()) {
				report(FileProblem{Path: rel, Kind: ProblemMode, Expected: fmt.Sprintf("mode %04o", uint32(w.Mode.Perm())), Found: fmt.Sprintf("mode %04o", got)})
			}
		}
		switch typ {
		case archive.TypeDir:
			st.Dirs++
		case archive.TypeSymlink:
			st.Symlinks++
			if target, _ := os.Readlink(p); target != w.Target {
				report(FileProblem{Path: rel, Kind: ProblemChanged, Expected: "symlink to " + w.Target, Found: "symlink to " + target})
			}
		case archive.TypeFile:
			st.Files++
			if info.Size() != w.Size {
				// a changed size needs no hash, and says how it changed
				report(FileProblem{Path: rel, Kind: ProblemChanged, Expected: describeContent(w.Size, w.SHA256), Found: sizeChange(info.Size(), w.Size)})
				return nil
			}
			select {
			case jobs <- hashJob{path: p, want: w}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	close(jobs)
	wg.Wait()
	if walkErr != nil {
		return nil, st, fmt.Errorf("verify files of %s: %w", dir, walkErr)
	}
	if err := ctx.Err(); err != nil {
		return nil, st, fmt.Errorf("verify files of %s: %w", dir, err)
	}
	for _, e := range want {
		if !seen[e.Path] {
			problems = append(problems, FileProblem{Path: e.Path, Kind: ProblemMissing, Expected: string(e.Type)})
		}
	}
	sort.Slice(problems, func(i, j int) bool {
		if problems[i].Path != problems[j].Path {
			return problems[i].Path < problems[j].Path
		}
		return problems[i].Kind < problems[j].Kind
	})
	return problems, st, nil
}

// bytecodeCache reports whether rel is a __pycache__ directory or a .pyc file in one.
func bytecodeCache(rel string, d fs.DirEntry) bool {
	if d.IsDir() {
		return path.Base(rel) == "__pycache__"
	}
	return d.Type().IsRegular() && path.Base(path.Dir(rel)) == "__pycache__" && strings.HasSuffix(rel, ".pyc")
}

func describeEntry(p string, info fs.FileInfo) (archive.EntryType, string) {
	switch t := info.Mode().Type(); {
	case t == 0:
		return archive.TypeFile, fmt.Sprintf("file, %d bytes", info.Size())
	case t == fs.ModeDir:
		return archive.TypeDir, "directory"
	case t == fs.ModeSymlink:
		target, _ := os.Readlink(p)
		return archive.TypeSymlink, "symlink to " + target
	default:
		return archive.EntryType(t.String()), "special file " + t.String()
	}
}

// unixMode is the permission bits with setuid, setgid and sticky, as chmod takes them.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

func describeContent(size int64, sum string) string {
	return fmt.Sprintf("%d bytes, sha256 %s", size, sum)
}

func sizeChange(got, want int64) string {
	if got < want {
		return fmt.Sprintf("%d bytes: truncated (%d bytes short)", got, want-got)
	}
	return fmt.Sprintf("%d bytes: %d bytes longer", got, got-want)
}

// envScript checks env.sh: that it says what the plan says, that the paths it names
// exist, and that an LD_PRELOAD stays inside the install.
func (v *verifier) envScript() {
	script := filepath.Join(v.prefix, EnvName)
	parse := VerifyCheck{ID: "env.script", Read: script,
		Why:      "jobs get the install through env.sh: a PYTHONPATH or LD_LIBRARY_PATH that points elsewhere loads another copy",
		Expected: "export lines for the recipe's runtime env, PYTHONPATH and LD_LIBRARY_PATH into the prefix"}
	paths := VerifyCheck{ID: "env.paths", Read: script, Why: "a path env.sh names that does not exist makes the loader or Python fall back to another copy, silently"}
	preload := VerifyCheck{ID: "env.ld-preload", Read: script,
		Why: "LD_PRELOAD forces the NVSHMEM the install was built with; one from elsewhere (torch bundles its own) means two NVSHMEMs in one process (R9, R10)"}
	skipRest := func(why string) {
		paths.Status, paths.Found = inspect.StatusSkip, why
		preload.Status, preload.Found = inspect.StatusSkip, why
		v.rep.add(parse)
		v.rep.add(paths)
		v.rep.add(preload)
	}
	b, err := os.ReadFile(script)
	if err != nil {
		parse.Status, parse.Found, parse.Fix = inspect.StatusFail, err.Error(), v.fix()
		skipRest("env.sh cannot be read")
		return
	}
	vars, order, err := parseEnvScript(string(b), v.prefix)
	if err != nil {
		parse.Status, parse.Found, parse.Fix = inspect.StatusFail, err.Error(), v.fix()
		skipRest("env.sh cannot be parsed")
		return
	}
	parse.Found = fmt.Sprintf("%d exports: %s", len(order), strings.Join(order, ", "))
	if diffs := v.envDiffs(vars); len(diffs) > 0 {
		parse.Status, parse.Fix = inspect.StatusFail, v.fix()
		parse.Found += "; differs from the plan: " + strings.Join(diffs, "; ")
	} else {
		parse.Status = inspect.StatusPass
	}
	v.rep.add(parse)

	var named, missing []string
	for _, k := range order {
		for _, p := range splitPaths(k, vars[k]) {
			if !within(p, v.prefix) {
				continue
			}
			named = append(named, k+" "+p)
			if _, err := os.Stat(p); err != nil {
				missing = append(missing, k+": "+p)
			}
		}
	}
	switch {
	case len(missing) > 0:
		paths.Status, paths.Found, paths.Fix = inspect.StatusFail, "missing: "+strings.Join(missing, ", "), v.fix()
	case len(named) == 0:
		paths.Status, paths.Found = inspect.StatusSkip, "env.sh names no path in the prefix"
	default:
		paths.Status, paths.Found = inspect.StatusPass, fmt.Sprintf("%d paths exist: %s", len(named), strings.Join(named, ", "))
	}
	v.rep.add(paths)
	v.rep.add(v.checkPreload(preload, vars["LD_PRELOAD"]))
}

// envDiffs compares env.sh's exports with the runtime env the plan gives this prefix.
func (v *verifier) envDiffs(vars map[string]string) []string {
	if v.envErr != nil {
		return []string{v.envErr.Error()}
	}
	want, err := RuntimeEnv(v.m.Plan, v.prefixes, nil)
	if err != nil {
		return []string{err.Error()}
	}
	wm := map[string]string{}
	for _, kv := range want {
		k, val, _ := strings.Cut(kv, "=")
		wm[k] = val
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(wm)) {
		got, ok := vars[k]
		switch {
		case !ok:
			out = append(out, k+" not exported")
		case got != wm[k]:
			out = append(out, fmt.Sprintf("%s=%q, the plan says %q", k, got, wm[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(vars)) {
		if _, ok := wm[k]; !ok && k != "EPBUILD_PREFIX" {
			out = append(out, k+" is not in the plan")
		}
	}
	return out
}

func (v *verifier) checkPreload(c VerifyCheck, val string) VerifyCheck {
	if val == "" {
		c.Status, c.Found = inspect.StatusSkip, "env.sh sets no LD_PRELOAD"
		return c
	}
	entries := map[string]archive.Entry{}
	for _, e := range v.m.Files {
		entries[e.Path] = e
	}
	var bad, good []string
	for _, p := range splitPaths("LD_PRELOAD", val) {
		if !within(p, v.prefix) {
			bad = append(bad, p+" is outside the prefix")
			continue
		}
		rel, _ := filepath.Rel(v.prefix, p)
		final, ok := resolveInManifest(filepath.ToSlash(rel), entries)
		switch {
		case !ok:
			bad = append(bad, p+" is not a file the artifact carries")
		case !fileExists(p):
			bad = append(bad, p+" does not exist")
		default:
			good = append(good, fmt.Sprintf("%s (%s, sha256 %s)", p, final.Path, shortKey(final.SHA256)))
		}
	}
	if len(bad) > 0 {
		c.Status, c.Found, c.Fix = inspect.StatusFail, strings.Join(bad, "; "), "point LD_PRELOAD at the install's libnvshmem_host (reinstall to restore env.sh)"
		return c
	}
	c.Status, c.Found = inspect.StatusPass, "preloads "+strings.Join(good, ", ")
	return c
}

// resolveInManifest follows symlinks through the manifest's entries to a regular file.
func resolveInManifest(rel string, entries map[string]archive.Entry) (archive.Entry, bool) {
	for range 40 {
		e, ok := entries[rel]
		if !ok {
			return archive.Entry{}, false
		}
		if e.Type == archive.TypeFile {
			return e, true
		}
		if e.Type != archive.TypeSymlink || path.IsAbs(e.Target) {
			return archive.Entry{}, false
		}
		rel = path.Clean(path.Join(path.Dir(rel), e.Target))
	}
	return archive.Entry{}, false
}

// splitPaths splits a variable's value into the paths it lists (LD_PRELOAD also takes
// spaces).
func splitPaths(k, v string) []string {
	sep := func(r rune) bool { return r == ':' || (k == "LD_PRELOAD" && r == ' ') }
	return strings.FieldsFunc(v, sep)
}

// withinResolved is within with symlinks resolved on both sides.
func withinResolved(p, dir string) bool {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		p = r
	}
	if r, err := filepath.EvalSymlinks(dir); err == nil {
		dir = r
	}
	return within(p, dir)
}

// within reports whether the absolute path p lies in dir (lexically).
func within(p, dir string) bool {
	rel, err := filepath.Rel(dir, filepath.Clean(p))
	return err == nil && filepath.IsAbs(p) && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// parseEnvScript reads back what EnvScript writes, with EPBUILD_PREFIX = prefix and an
// empty inherited environment: it returns each export's value and the export order.
// Anything EnvScript does not write is an error, so a hand-edited env.sh shows.
func parseEnvScript(text, prefix string) (map[string]string, []string, error) {
	vars := map[string]string{"EPBUILD_PREFIX": prefix}
	var order []string
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"), line == "export EPBUILD_PREFIX":
			continue
		case strings.HasPrefix(line, `EPBUILD_PREFIX="$(cd "$(dirname `):
			continue
		}
		rest, ok := strings.CutPrefix(line, "export ")
		name, val, ok2 := strings.Cut(rest, "=")
		if !ok || !ok2 || !validEnvName(name) {
			return nil, nil, fmt.Errorf("env.sh line %d: %q is not an export EPBUILD writes", i+1, line)
		}
		v, err := shellValue(val, name, prefix)
		if err != nil {
			return nil, nil, fmt.Errorf("env.sh line %d: %s: %w", i+1, name, err)
		}
		if _, dup := vars[name]; !dup {
			order = append(order, name)
		}
		vars[name] = v
	}
	return vars, order, nil
}

func validEnvName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// shellPlain are the characters that mean themselves unquoted in sh.
const shellPlain = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:,+-=@%"

// shellValue evaluates a value made of the pieces EnvScript writes: "$EPBUILD_PREFIX",
// single-quoted literals, plain characters and "${NAME:+:$NAME}" (an inherited value:
// empty here). Anything else (a substitution, an unquoted $) is refused.
func shellValue(s, name, prefix string) (string, error) {
	var out strings.Builder
	inherit := `"${` + name + `:+:$` + name + `}"`
	for s != "" {
		switch {
		case strings.HasPrefix(s, `"$EPBUILD_PREFIX"`):
			out.WriteString(prefix)
			s = s[len(`"$EPBUILD_PREFIX"`):]
		case strings.HasPrefix(s, inherit):
			s = s[len(inherit):]
		case strings.HasPrefix(s, `\'`):
			out.WriteByte('\'')
			s = s[2:]
		case s[0] == '\'':
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				return "", errors.New("unterminated single quote")
			}
			out.WriteString(s[1 : 1+end])
			s = s[end+2:]
		case strings.IndexByte(shellPlain, s[0]) >= 0:
			// the separators EnvScript leaves unquoted: "$EPBUILD_PREFIX"/'lib':...
			out.WriteByte(s[0])
			s = s[1:]
		default:
			return "", fmt.Errorf("unexpected %q", s)
		}
	}
	return out.String(), nil
}

// python picks the interpreter for the Python checks.
func (v *verifier) python() string {
	if v.opts.Python != "" {
		return v.opts.Python
	}
	if v.m.Toolchain != nil && v.m.Toolchain.Python != "" && fileExists(v.m.Toolchain.Python) {
		return v.m.Toolchain.Python
	}
	return "python3"
}

// recipeChecks re-runs each installed component's recipe checks and its patch sets'
// effects on the installed copy, with the runtime env the install gives.
func (v *verifier) recipeChecks(ctx context.Context) {
	if v.envErr != nil {
		v.rep.add(VerifyCheck{ID: "env.runtime", Status: inspect.StatusFail, Read: filepath.Join(v.prefix, ManifestName),
			Found: v.envErr.Error(), Why: "the recipe checks run with the runtime env the plan gives this prefix", Fix: v.fix()})
		return
	}
	checker := &Checker{Python: v.python(), Env: v.env}
	for i := range v.m.Plan.Components {
		pc := &v.m.Plan.Components[i]
		pre, ok := v.prefixes[pc.Name]
		if !ok {
			continue // from the Python environment, or nothing to install
		}
		for _, r := range checker.Component(ctx, pc, pre) {
			v.rep.add(v.recipeCheck(r, pc, pre))
		}
	}
}

func (v *verifier) recipeCheck(r CheckResult, pc *PlanComponent, pre string) VerifyCheck {
	c := VerifyCheck{ID: r.ID, Status: r.Status, Read: pre, Expected: r.Expected, Found: r.Found, Why: r.Why}
	switch {
	case strings.HasPrefix(r.ID, "effect."):
		e, ok := effectOf(r.ID, pc)
		if ok && e.Installed != "" {
			c.Read = filepath.Join(pre, filepath.FromSlash(e.Installed))
		}
		if ok && e.Why != "" {
			c.Why = e.Why
		}
		if c.Why == "" {
			c.Why = "the patch set's effect must hold on the installed copy, not only on the patched source"
		}
		if !r.OK() {
			c.Why = "the installed copy lacks the patch (a patch applied to a source copy, an unpatched copy installed: the field failure); " + c.Why
			c.Fix = v.fix() + "; never install from a source copy by hand"
		}
	case strings.HasPrefix(r.ID, "python.import:"):
		if c.Why == "" {
			c.Why = "jobs must import the built module from this prefix, not another copy on sys.path"
		}
		if !r.OK() {
			mod := strings.TrimPrefix(r.ID, "python.import:")
			c.Fix = fmt.Sprintf("source %s in the job; remove other copies of %s from the Python environment (pip uninstall); if it still fails, %s",
				filepath.Join(v.prefix, EnvName), mod, v.fix())
		}
	default:
		if c.Why == "" {
			c.Why = "the recipe's check, passed on the staged prefix, must hold where jobs load the install"
		}
		if !r.OK() {
			c.Fix = v.fix() + "; if the artifact itself fails it, rebuild with epbuild recipe"
		}
	}
	return c
}

// effectOf finds the effect an effect check ID (effect.<set>.<index>) names, with its
// installed path as the checker resolved it.
func effectOf(id string, pc *PlanComponent) (effect.Effect, bool) {
	rest := strings.TrimPrefix(id, "effect.")
	dot := strings.LastIndexByte(rest, '.')
	if dot < 0 {
		return effect.Effect{}, false
	}
	i, err := strconv.Atoi(rest[dot+1:])
	if err != nil {
		return effect.Effect{}, false
	}
	for _, s := range pc.PatchSets {
		if s.Name == rest[:dot] && i >= 0 && i < len(s.Effects) {
			return installedUnder(s.Effects[i]), true
		}
	}
	return effect.Effect{}, false
}

// singleNVSHMEM imports torch and the recipe's modules in one process and counts the
// libnvshmem_host copies mapped: two means a device/host mismatch at run time (R9).
func (v *verifier) singleNVSHMEM(ctx context.Context) {
	c := VerifyCheck{ID: "process.single-nvshmem", Read: "/proc/self/maps of python after importing torch and the recipe's modules",
		Expected: "exactly one libnvshmem_host, the one the install was built with",
		Why:      "torch bundles its own NVSHMEM; two copies in one process fail at run time with a device/host mismatch (R9, R10)"}
	nv, ok := v.m.Plan.Component("nvshmem")
	if !ok {
		c.Status, c.Found = inspect.StatusSkip, "the recipe has no nvshmem component"
		v.rep.add(c)
		return
	}
	if v.envErr != nil {
		c.Status, c.Found = inspect.StatusSkip, "no runtime env: "+v.envErr.Error()
		v.rep.add(c)
		return
	}
	py := v.python()
	if _, err := inspect.PythonImport(ctx, py, "torch", v.env, ""); err != nil {
		c.Status, c.Found = inspect.StatusSkip, "torch is not importable here: "+err.Error()
		v.rep.add(c)
		return
	}
	modules := []string{"torch"}
	for _, pc := range v.m.Plan.Components {
		for _, ch := range pc.Checks {
			if ch.Import != "" && !slices.Contains(modules, ch.Import) {
				modules = append(modules, ch.Import)
			}
		}
	}
	c.Read = "/proc/self/maps of " + py + " after importing " + strings.Join(modules, ", ")
	paths, err := inspect.MappedLibs(ctx, py, modules, v.env, "libnvshmem_host")
	r := inspect.CheckSingleMapped(paths, err, "libnvshmem_host")
	c.Status, c.Found = r.Status, r.Found
	if r.Why != "" {
		c.Found = strings.TrimSpace(c.Found + " (" + r.Why + ")")
	}
	switch {
	case err != nil && strings.Contains(err.Error(), "libcuda"):
		c.Status, c.Found = inspect.StatusSkip, "no NVIDIA driver on this host (libcuda cannot be loaded): "+err.Error()
	case r.Status == inspect.StatusPass && nv.Source.Python == nil && v.prefixes[nv.Name] != "" && !withinResolved(paths[0], v.prefixes[nv.Name]):
		c.Status = inspect.StatusFail
		c.Found = paths[0] + ", not the install's NVSHMEM under " + v.prefixes[nv.Name]
	}
	// R9 is about a patched NVSHMEM, whose ABI differs from the copy torch loads by path:
	// with an unpatched one the extension still binds to the preloaded install (same
	// SONAME), so a second copy is a warning, not a broken process
	if c.Status == inspect.StatusFail && len(paths) > 1 && nv.Source.Python == nil && len(nv.Patches) == 0 && preloadsFrom(v.env, v.prefixes[nv.Name]) {
		c.Status = inspect.StatusWarn
		c.Found += "; this NVSHMEM is unpatched and preloaded, so DeepEP binds to the install's copy"
	}
	if c.Status == inspect.StatusFail {
		c.Fix = "source " + filepath.Join(v.prefix, EnvName) + " (its LD_PRELOAD loads the install's NVSHMEM first); do not mix the pip NVSHMEM with a source-built one"
	}
	v.rep.add(c)
}

// preloadsFrom reports whether env's LD_PRELOAD loads a library from dir.
func preloadsFrom(env []string, dir string) bool {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok && dir != "" {
			for _, lib := range strings.FieldsFunc(v, func(r rune) bool { return r == ':' || r == ' ' }) {
				if withinResolved(lib, dir) {
					return true
				}
			}
		}
	}
	return false
}

// HostConfig derives what the host checks ask of this host from a plan's runtime env
// and options. p may be nil (no recipe): then the transport is ibrc when the host has
// RDMA devices, else none. tc (may be nil) gives the version of a pip NVSHMEM.
func HostConfig(p *Plan, tc *Toolchain, sys host.Sysroot) (host.Config, error) {
	cfg := host.Config{Transport: host.TransportNone}
	if devs, err := sys.Names("/sys/class/infiniband"); err == nil && len(devs) > 0 {
		cfg.Transport = host.TransportIBRC
	}
	if p == nil {
		return cfg, nil
	}
	cfg.Recipe = p.Recipe
	env := p.Env
	switch {
	case env["NVSHMEM_IB_ENABLE_IBGDA"] == "1":
		cfg.Transport = host.TransportIBGDA
	case env["NVSHMEM_REMOTE_TRANSPORT"] == "libfabric":
		cfg.Transport = host.TransportEFA
	case env["NVSHMEM_REMOTE_TRANSPORT"] == "none":
		cfg.Transport = host.TransportNone
	}
	if s := env["NVSHMEM_IB_GID_INDEX"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return cfg, fmt.Errorf("host config of %s: NVSHMEM_IB_GID_INDEX=%q is not a GID index", p.Recipe, s)
		}
		cfg.GIDIndex = n
	}
	cfg.HCAPrefix = env["NVSHMEM_HCA_PREFIX"]
	cfg.Mapping = env["DEEP_EP_DEVICE_TO_HCA_MAPPING"]
	if cfg.Transport == host.TransportIBGDA && env["NVSHMEM_IBGDA_NIC_HANDLER"] == "gpu" {
		cfg.NeedPeerMem, cfg.NeedPeerMappingOverride = true, true
	}
	if nv, ok := p.Component("nvshmem"); ok {
		cfg.NVSHMEMVersion = nv.Version
		if nv.Source.Python != nil && tc != nil {
			cfg.NVSHMEMVersion = tc.PythonPackages[nv.Source.Python.Package].Version
		}
		for _, st := range nv.Build {
			if st.CMake != nil && truthy(st.CMake.Options["NVSHMEM_USE_GDRCOPY"]) {
				cfg.NeedGDRCopy = true
			}
		}
	}
	return cfg, cfg.Validate()
}

func truthy(s string) bool {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "1", "ON", "TRUE", "YES", "Y":
		return true
	}
	return false
}

// host runs builder/host's checks under the sysroot.
func (v *verifier) host(ctx context.Context, m *Manifest) {
	var p *Plan
	var tc *Toolchain
	if m != nil {
		p, tc = m.Plan, m.Toolchain
	}
	cfg, err := HostConfig(p, tc, v.opts.Sysroot)
	if err != nil {
		v.rep.add(VerifyCheck{ID: "host.config", Status: inspect.StatusFail, Read: filepath.Join(v.prefix, ManifestName), Found: err.Error(),
			Why: "the host checks depend on the recipe's runtime settings", Fix: "correct the recipe's runtime env and rebuild"})
		return
	}
	hr := host.Run(ctx, v.opts.Sysroot, cfg)
	for _, c := range hr.Checks {
		v.rep.add(HostCheck(c))
	}
	v.rep.Pairs, v.rep.MappingLine = hr.Pairs, host.MappingLine(hr)
}

func (v *verifier) traffic(ctx context.Context) {
	if v.opts.Traffic == nil {
		return
	}
	tr, checks := SampleTraffic(ctx, v.opts.Sysroot, v.opts.Traffic)
	v.rep.Traffic = tr
	v.rep.Checks = append(v.rep.Checks, checks...)
}

// HostCheck converts a host check to the verify shape.
func HostCheck(c host.Check) VerifyCheck {
	return VerifyCheck{ID: c.ID, Status: string(c.Status), Read: c.Read, Why: c.Why, Fix: c.Fix}
}

// SampleTraffic runs run while sampling the NIC counters and reports two checks:
// host.traffic.run (the command's outcome) and host.traffic.spread (how the bytes spread).
func SampleTraffic(ctx context.Context, sys host.Sysroot, run func(context.Context) error) (*host.TrafficReport, []VerifyCheck) {
	ran := false
	var runErr error
	tr, err := host.SampleTraffic(ctx, sys, func(ctx context.Context) error {
		ran = true
		runErr = run(ctx)
		return runErr
	})
	rc := VerifyCheck{ID: "host.traffic.run", Read: "the command run while the NIC counters were sampled",
		Why: "the spread is only meaningful for a run that finished"}
	switch {
	case !ran:
		rc.Status, rc.Found = inspect.StatusSkip, "not run: "+err.Error()
	case runErr != nil:
		rc.Status, rc.Found, rc.Fix = inspect.StatusFail, runErr.Error(), "make the command succeed on its own first"
	default:
		rc.Status, rc.Found = inspect.StatusPass, "the command succeeded"
	}
	spread := HostCheck(tr.Check)
	if tr.Check.ID == "" {
		spread = VerifyCheck{ID: "host.traffic.spread", Status: inspect.StatusFail, Read: "/sys/class/infiniband/*/ports/*/counters",
			Found: err.Error(), Why: "the NIC counters are how the spread is measured", Fix: "check that /sys/class/infiniband is readable"}
	}
	return &tr, []VerifyCheck{rc, spread}
}

// InstallEnv is the environment env.sh gives a job in the install at prefix: base with
// the runtime env of the install's plan and EPBUILD_PREFIX.
func InstallEnv(prefix string, base []string) ([]string, error) {
	abs, err := filepath.Abs(prefix)
	if err != nil {
		return nil, fmt.Errorf("environment of %s: %w", prefix, err)
	}
	m, _, err := ReadInstalledManifest(abs)
	if err != nil {
		return nil, err
	}
	env, err := RuntimeEnv(m.Plan, installedPrefixes(m, abs), base)
	if err != nil {
		return nil, err
	}
	return withEnv(env, map[string]string{"EPBUILD_PREFIX": abs}), nil
}
