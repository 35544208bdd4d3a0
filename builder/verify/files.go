package verify

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/epbuild/epbuild/builder/store"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/check"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/inspect"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/quote"
)

// The manifest and the files of an install: the manifest read first (nothing else can be
// checked without it), then the kinds of the files target: the receipt, and every entry
// against the manifest.

// installKinds are the kinds of an install's files and env script.
func installKinds() []check.Kind[*Subject] {
	files := []check.Target{check.Files}
	env := []check.Target{check.Env}
	return []check.Kind[*Subject]{
		{Name: "install.receipt", Targets: files, Run: onInstall((*verifier).receipt),
			Explain: "the install receipt names the artifact installed here and pins manifest.json; a missing receipt, one that does " +
				"not match the manifest, and a receipt or manifest that is not a regular file (a link to a copy elsewhere) fail"},
		{Name: "install.epbuild", Targets: files, Run: onInstall((*verifier).installedEpbuild),
			Explain: "the epbuild running verify-install against the one install copied to PREFIX/bin/epbuild (env.sh puts it on PATH): " +
				"warn when they differ, as another epbuild checks by other rules"},
		{Name: "files", Targets: files, Run: onInstall((*verifier).files),
			Explain: "every file's sha256, type and mode against the manifest (manifest.json and the receipt: regular, 0644), and every " +
				".pyc in __pycache__ against the source it claims (the code compiling it gives); each changed, missing, extra or " +
				"re-moded path and each foreign bytecode file as its own check. Nothing is imported from a prefix whose files fail"},
		{Name: "env.script", Targets: env, Run: onInstall((*verifier).envScript),
			Explain: "env.sh exports what the plan says and nothing else, names the prefix it is installed at (env.prefix: sh cannot find it), the paths it names in the prefix exist, and LD_PRELOAD (if any) " +
				"loads a file the artifact carries: the NVSHMEM the install was built with (R9, R10)"},
	}
}

// onInstall runs a verifier method as a kind; a subject without an install has none.
func onInstall(f func(*verifier, context.Context) []CheckResult) func(context.Context, *Subject) []CheckResult {
	return func(ctx context.Context, s *Subject) []CheckResult {
		if s.inst == nil || s.inst.m == nil {
			return nil
		}
		return f(s.inst, ctx)
	}
}

func (v *verifier) manifest() bool {
	c := VerifyCheck{ID: "install.manifest", Read: filepath.Join(v.prefix, manifest.ManifestName),
		Why: "the manifest records every file's hash and the plan the install was built from; nothing else can be checked without it"}
	m, raw, err := manifest.ReadInstalledManifest(v.prefix)
	if err != nil {
		c.Status, c.Found = check.Fail, err.Error()
		c.Fix = "install with epbuild install ARTIFACT --prefix PREFIX; a prefix copied by hand has no manifest"
		if st, lerr := os.Lstat(c.Read); lerr == nil && !st.Mode().IsRegular() {
			c.Expected = "a regular file " + manifest.ManifestName + ", mode 0644, as the artifact carries it"
			c.Fix = "reinstall: " + manifest.InstallCommand("", v.prefix) + " (install writes " + manifest.ManifestName + " itself; a link to a copy elsewhere lets whoever owns the copy rewrite the record)"
		}
		v.rep.add(c)
		return false
	}
	v.m, v.raw = m, raw
	v.rep.Recipe, v.rep.PlanKey = m.Recipe, m.PlanKey
	c.Status = check.Pass
	c.Found = fmt.Sprintf("recipe %s, plan %s, %d entries", m.Recipe, store.ShortKey(m.PlanKey), len(m.Files))
	if m.Epbuild != "" { // artifacts of manifest format 1 made before epbuild's version left the bytes
		c.Found += ", built by epbuild " + m.Epbuild
	}
	v.rep.add(c)
	v.prefixes = manifest.InstalledPrefixes(m, v.prefix)
	v.env, v.envErr = envsh.RuntimeEnv(m.Plan, v.prefixes, v.opts.Environ)
	return true
}

func (v *verifier) receipt(context.Context) []CheckResult {
	c := VerifyCheck{ID: "install.receipt", Read: filepath.Join(v.prefix, manifest.ReceiptName),
		Why: "the receipt names the artifact installed here and pins manifest.json: an edited manifest could hide any other change"}
	r, err := manifest.ReadReceipt(v.prefix)
	sum := manifest.SHA256Hex(v.raw)
	if err == nil {
		v.rep.Artifact = r.Artifact
	}
	// what the receipt says must be what the manifest beside it says
	var differs []string
	if err == nil {
		for _, f := range []struct{ name, receipt, manifest string }{
			{"manifest_sha256", r.ManifestSHA256, sum},
			{"plan_key", r.PlanKey, v.m.PlanKey},
			{"recipe", r.Recipe, v.m.Recipe},
			{"built_by", r.BuiltBy, v.m.Epbuild},
		} {
			if f.receipt != f.manifest {
				differs = append(differs, fmt.Sprintf("%s %q, the manifest's is %q", f.name, f.receipt, f.manifest))
			}
		}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		c.Status, c.Expected, c.Found = check.Fail, manifest.ReceiptName+", written by epbuild install", "no "+manifest.ReceiptName+" in "+v.prefix
		c.Why = "without the receipt nothing pins manifest.json, so an edited manifest would hide any other change: " +
			"the receipt was deleted, or the prefix was not made by epbuild install"
		c.Fix = fmt.Sprintf("reinstall the artifact of recipe %s, plan %s: %s (install checks the artifact before it touches the prefix, and writes the receipt)",
			quote.Term(v.m.Recipe), store.ShortKey(v.m.PlanKey), manifest.InstallCommand("", v.prefix))
	case err != nil:
		c.Status, c.Found, c.Fix = check.Fail, err.Error(), v.fix()
		c.Expected = "a regular file " + manifest.ReceiptName + ", mode 0644, as epbuild install writes it"
	case r.ManifestSHA256 != sum:
		c.Status, c.Expected, c.Found = check.Fail, "manifest.json sha256 "+r.ManifestSHA256, "sha256 "+sum
		c.Why = "manifest.json changed since install: " + c.Why
		c.Fix = v.fix()
	case len(differs) > 0:
		c.Status, c.Expected, c.Found = check.Fail, "the recipe, plan and epbuild of "+manifest.ManifestName, strings.Join(differs, "; ")
		c.Why = manifest.ReceiptName + " was edited after install, or belongs to another install: " + c.Why
		c.Fix = v.fix()
	default:
		c.Status = check.Pass
		c.Found = fmt.Sprintf("%s (sha256 %s), installed %s by epbuild %s", r.Artifact, store.ShortKey(r.SHA256), r.InstalledAt.Format("2006-01-02 15:04:05Z07:00"), r.Epbuild)
	}
	return []CheckResult{c}
}

// files checks every entry against the manifest: one summary check, then one check per
// problem so that each changed, missing, extra or re-moded path is listed with its own ID.
func (v *verifier) files(ctx context.Context) []CheckResult {
	problems, st, err := verifyFiles(ctx, v.prefix, InstalledEntries(v.prefix, v.m.Files), v.opts.Hashed)
	if err != nil {
		if ctx.Err() != nil {
			return nil // the caller reports the cancelled context
		}
		return []CheckResult{{ID: "files", Status: check.Fail, Read: v.prefix, Found: err.Error(), Why: whyFiles, Fix: v.fix()}}
	}
	if len(st.Bytecode) > 0 {
		problems = append(problems, v.bytecode(ctx, st.Bytecode)...)
		if ctx.Err() != nil {
			return nil
		}
		manifest.SortProblems(problems)
	}
	c := VerifyCheck{ID: "files", Read: fmt.Sprintf("%s: %d files (%s), %d directories, %d symlinks against %s",
		v.prefix, st.Files, disk.ByteCount(st.Bytes), st.Dirs, st.Symlinks, manifest.ManifestName), Why: whyFiles,
		Expected: fmt.Sprintf("the %d entries of the manifest, sha256 and mode", len(v.m.Files))}
	if n := len(st.Bytecode); n > 0 {
		c.Read += fmt.Sprintf(", and %d Python bytecode files in __pycache__ against the sources they were compiled from", n)
	}
	if len(problems) == 0 {
		c.Status, c.Found = check.Pass, "every entry matches"
		return []CheckResult{c}
	}
	kinds := map[string]int{}
	for _, p := range problems {
		kinds[p.Kind]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		parts = append(parts, fmt.Sprintf("%d %s", kinds[k], k))
	}
	c.Status, c.Found, c.Fix = check.Fail, strings.Join(parts, ", "), v.fix()
	out := []CheckResult{c}
	for _, p := range problems {
		out = append(out, problemCheck(v.prefix, p, v.fix()))
	}
	return out
}

// problemCheck explains one file problem.
func problemCheck(prefix string, p manifest.FileProblem, fix string) VerifyCheck {
	c := VerifyCheck{ID: "files." + p.Kind + ":" + p.Path, Status: check.Fail, Read: filepath.Join(prefix, filepath.FromSlash(p.Path)),
		Expected: p.Expected, Found: p.Found, Fix: fix}
	switch p.Kind {
	case manifest.ProblemChanged:
		c.Why = "its bytes are not what was built and checked"
	case manifest.ProblemMissing:
		c.Why = "the build installed it; whatever needs it fails, or finds another copy elsewhere"
	case manifest.ProblemExtra:
		c.Why = "the artifact does not carry it: a copy installed over this prefix by other means, or a leftover; Python may import it before the built module"
		c.Fix = "remove it, or reinstall into a fresh prefix"
	case manifest.ProblemMode:
		c.Why = "modes decide who can read and run the install: a lost exec or read bit breaks other users' jobs, an added write bit lets them change it"
		c.Fix = fmt.Sprintf("chmod %s %s, or reinstall", strings.TrimPrefix(p.Expected, "mode "), c.Read)
	case manifest.ProblemType:
		c.Why = "a different kind of entry (file, directory, symlink) than the build made"
	case manifest.ProblemUnreadable:
		c.Why = "it cannot be read, so it cannot be checked (and jobs cannot load it)"
		c.Fix = "check the permissions of " + c.Read + ", or reinstall"
	case manifest.ProblemBytecode:
		c.Why = "Python runs a __pycache__ file instead of its source when the header matches the source, and an unchecked-hash file " +
			"without reading the source at all: bytecode that is not the compiled source runs code that was never built or checked. " +
			"Only the install's sources compiled by the Python that imports them belong there"
		c.Fix = fmt.Sprintf("remove it: rm %s (Python compiles the source again); every cache at once: find %s -name __pycache__ -prune -exec rm -rf {} +",
			c.Read, prefix)
	}
	return c
}

// FileStats counts what VerifyFiles looked at.
type FileStats struct {
	Files, Dirs, Symlinks int
	Bytes                 int64
	// Bytecode lists the .pyc files in __pycache__ directories that the manifest does
	// not list, sorted: Python writes them beside any module it imports from a writable
	// prefix, and runs them instead of the source. VerifyFiles does not read them; the
	// files check compares each with its source (verifier.bytecode).
	Bytecode []string
}

type hashJob struct {
	path string
	want *archive.Entry
}

// VerifyFiles compares the tree at dir with the manifest's entries: content (size, then
// sha256), type, exact mode and symlink targets, and reports every entry that is missing
// or not in the manifest. manifest.json and the install receipt at the top are not
// entries: they are checked for type and mode only. Files are hashed while the walk goes on (archive.HashFiles); a file
// whose size differs is reported without reading it. The error is for a dir that
// cannot be walked or a cancelled context; an unreadable entry is a problem.
func VerifyFiles(ctx context.Context, dir string, want []archive.Entry) ([]manifest.FileProblem, FileStats, error) {
	return verifyFiles(ctx, dir, want, nil)
}

// verifyFiles is VerifyFiles, but for the files of hashed (VerifyOptions.Hashed).
func verifyFiles(ctx context.Context, dir string, want []archive.Entry, hashed map[string]string) ([]manifest.FileProblem, FileStats, error) {
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
		problems []manifest.FileProblem
		mu       sync.Mutex // guards problems and st.Bytes once the workers run
		wg       sync.WaitGroup
	)
	report := func(p manifest.FileProblem) {
		mu.Lock()
		problems = append(problems, p)
		mu.Unlock()
	}
	// The walk feeds the hashing as it goes; the hashing's end (ctx done) ends the walk.
	jobs := make(chan hashJob, 64)
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	wg.Go(func() {
		defer hcancel()
		_ = archive.HashFiles(hctx, jobs, func(j hashJob) string { return j.path }, func(j hashJob, r archive.FileSum) error {
			switch {
			case r.Err != nil && hctx.Err() != nil:
			case r.Err != nil:
				report(manifest.FileProblem{Path: j.want.Path, Kind: manifest.ProblemUnreadable, Found: r.Err.Error()})
			case r.N != j.want.Size || r.SHA256 != j.want.SHA256:
				report(manifest.FileProblem{Path: j.want.Path, Kind: manifest.ProblemChanged, Expected: manifest.DescribeContent(j.want.Size, j.want.SHA256), Found: manifest.DescribeContent(r.N, r.SHA256)})
			}
			mu.Lock()
			st.Bytes += r.N
			mu.Unlock()
			return nil
		})
	})
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
			report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemUnreadable, Found: err.Error()})
			return nil
		}
		if rel == manifest.ManifestName || rel == manifest.ReceiptName {
			// not entries (the receipt pins the manifest's bytes, the receipt is checked
			// against the manifest), but regular files of the mode install writes
			info, err := d.Info()
			if err != nil {
				report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemUnreadable, Found: err.Error()})
				return nil
			}
			switch typ, found := describeEntry(p, info); {
			case typ != archive.TypeFile:
				report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemType, Expected: string(archive.TypeFile), Found: found})
			case unixMode(info.Mode()) != uint32(manifest.TopFileMode):
				report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemMode, Expected: fmt.Sprintf("mode %04o", uint32(manifest.TopFileMode)), Found: fmt.Sprintf("mode %04o", unixMode(info.Mode()))})
			}
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		w := byPath[rel]
		if w == nil && BytecodeCache(rel, d) {
			if !d.IsDir() {
				st.Bytecode = append(st.Bytecode, rel)
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemUnreadable, Found: err.Error()})
			return nil
		}
		typ, found := describeEntry(p, info)
		if w == nil {
			report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemExtra, Found: found})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		seen[rel] = true
		if typ != w.Type {
			report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemType, Expected: string(w.Type), Found: found})
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if typ != archive.TypeSymlink {
			if got := unixMode(info.Mode()); got != uint32(w.Mode.Perm()) {
				report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemMode, Expected: fmt.Sprintf("mode %04o", uint32(w.Mode.Perm())), Found: fmt.Sprintf("mode %04o", got)})
			}
		}
		switch typ {
		case archive.TypeDir:
			st.Dirs++
		case archive.TypeSymlink:
			st.Symlinks++
			if target, _ := os.Readlink(p); target != w.Target {
				report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemChanged, Expected: "symlink to " + w.Target, Found: "symlink to " + target})
			}
		case archive.TypeFile:
			st.Files++
			if info.Size() != w.Size {
				// a changed size needs no hash, and says how it changed
				report(manifest.FileProblem{Path: rel, Kind: manifest.ProblemChanged, Expected: manifest.DescribeContent(w.Size, w.SHA256), Found: manifest.SizeChange(info.Size(), w.Size)})
				return nil
			}
			if sum, ok := hashed[rel]; ok && sum == w.SHA256 {
				mu.Lock()
				st.Bytes += w.Size
				mu.Unlock()
				return nil
			}
			select {
			case jobs <- hashJob{path: p, want: w}:
			case <-hctx.Done():
				if err := ctx.Err(); err != nil {
					return err
				}
				return errors.New("the hashing stopped before the walk ended")
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
			problems = append(problems, manifest.FileProblem{Path: e.Path, Kind: manifest.ProblemMissing, Expected: string(e.Type)})
		}
	}
	manifest.SortProblems(problems)
	return problems, st, nil
}

// bytecode checks the .pyc files of __pycache__ directories (rel paths from
// VerifyFiles): each must be named as Python names the bytecode of a source the
// manifest lists, and hold the code compiling that source gives (inspect.CheckBytecode,
// with the interpreter of the Python checks, isolated). A stale file, one of a name
// Python never reads, or one for another interpreter is a problem too: nothing else
// belongs there, and nothing else can be told apart from a planted one.
func (v *verifier) bytecode(ctx context.Context, rels []string) []manifest.FileProblem {
	sources := make(map[string]bool, len(v.m.Files))
	for _, e := range v.m.Files {
		if e.Type == archive.TypeFile {
			sources[e.Path] = true
		}
	}
	var (
		out     []manifest.FileProblem
		files   []inspect.BytecodeFile
		checked []manifest.FileProblem
	)
	for _, rel := range rels {
		src, tag, opt, ok := bytecodeSource(rel)
		p := manifest.FileProblem{Path: rel, Kind: manifest.ProblemBytecode, Expected: "the bytecode of " + src + ", compiled from it"}
		switch {
		case !ok:
			p.Expected = "MODULE.TAG.pyc or MODULE.TAG.opt-N.pyc: a name Python gives bytecode"
			p.Found = "a name Python never reads"
			out = append(out, p)
		case !sources[src]:
			p.Found = "no " + src + " in the manifest: bytecode of a module the install does not carry"
			out = append(out, p)
		default:
			files = append(files, inspect.BytecodeFile{Pyc: filepath.Join(v.prefix, filepath.FromSlash(rel)),
				Source: filepath.Join(v.prefix, filepath.FromSlash(src)), Tag: tag, Optimize: opt})
			checked = append(checked, p)
		}
	}
	vs, err := inspect.CheckBytecode(ctx, v.python(), v.opts.Environ, files)
	if ctx.Err() != nil {
		return nil
	}
	for i, p := range checked {
		switch {
		case err != nil:
			p.Found = "not checked: " + err.Error()
		case !vs[i].OK:
			p.Found = vs[i].Problem
			if strings.Contains(p.Found, "another interpreter") {
				p.Found += "; verify-install --python PYTHON checks it with the interpreter that wrote it"
			}
		default:
			continue
		}
		out = append(out, p)
	}
	return out
}

// bytecodeSource is the source a __pycache__ file's name claims (Python's
// cache_from_source the other way round: DIR/__pycache__/MODULE.TAG[.opt-N].pyc is
// the bytecode of DIR/MODULE.py for interpreter TAG at optimization level N).
func bytecodeSource(rel string) (src, tag string, opt int, ok bool) {
	dir, name := path.Split(rel)
	parts := strings.Split(strings.TrimSuffix(name, ".pyc"), ".")
	switch {
	case len(parts) == 3 && strings.HasPrefix(parts[2], "opt-"):
		n, err := strconv.Atoi(strings.TrimPrefix(parts[2], "opt-"))
		if err != nil || n < 1 {
			return "", "", 0, false
		}
		opt = n
	case len(parts) != 2:
		return "", "", 0, false
	}
	if parts[0] == "" || parts[1] == "" {
		return "", "", 0, false
	}
	return path.Join(path.Dir(path.Clean(dir)), parts[0]+".py"), parts[1], opt, true
}

// bytecodeCache reports whether rel is a __pycache__ directory or a .pyc file in one.
func BytecodeCache(rel string, d fs.DirEntry) bool {
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

// installedEpbuild compares the epbuild running the check with the one in the prefix
// that install copied there (whose bytes the files check holds against the receipt).
func (v *verifier) installedEpbuild(context.Context) []CheckResult {
	c := VerifyCheck{ID: "install.epbuild", Read: filepath.Join(v.prefix, filepath.FromSlash(manifest.BinEpbuild)),
		Why: "env.sh puts PREFIX/bin on PATH, so jobs and nodes run the epbuild installed with the prefix; another epbuild checks it by other rules"}
	r, err := manifest.ReadReceipt(v.prefix)
	var inst *archive.Entry
	if err == nil {
		for i := range r.Added {
			if r.Added[i].Path == manifest.BinEpbuild {
				inst = &r.Added[i]
			}
		}
	}
	switch {
	case inst == nil:
		c.Status, c.Found = check.Skip, "install copied no epbuild into the prefix (its receipt lists none)"
		return []CheckResult{c}
	case v.opts.Self == "":
		c.Status, c.Found = check.Skip, "the running epbuild was not given to compare"
		return []CheckResult{c}
	}
	c.Expected = fmt.Sprintf("the epbuild running verify-install is the installed one (epbuild %s, sha256 %s as installed)", quote.Term(r.Epbuild), store.ShortKey(inst.SHA256))
	sum, err := disk.FileSHA256(v.opts.Self)
	have, herr := disk.FileSHA256(c.Read)
	switch {
	case err != nil:
		c.Status, c.Found = check.Warn, fmt.Sprintf("read the running epbuild %s: %v", v.opts.Self, err)
	case herr != nil:
		c.Status, c.Found, c.Fix = check.Warn, fmt.Sprintf("read the installed epbuild: %v", herr), v.fix()
	case sum == have:
		c.Status, c.Found = check.Pass, fmt.Sprintf("%s is the installed epbuild %s (sha256 %s)", v.opts.Self, quote.Term(r.Epbuild), store.ShortKey(sum))
	default:
		prefix := v.prefix
		if v.opts.Final != "" {
			prefix = v.opts.Final
		}
		c.Status = check.Warn
		c.Found = fmt.Sprintf("%s (epbuild %s, sha256 %s) is not the installed epbuild %s (sha256 %s)", v.opts.Self, quote.Term(v.opts.Version), store.ShortKey(sum), quote.Term(r.Epbuild), store.ShortKey(have))
		c.Fix = "run the installed one: " + quote.Shell(filepath.Join(prefix, filepath.FromSlash(manifest.BinEpbuild))) + " verify-install --prefix " + quote.Shell(prefix) + " (after . PREFIX/env.sh it is first on PATH)"
	}
	return []CheckResult{c}
}
