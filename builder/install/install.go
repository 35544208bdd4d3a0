package install

import (
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/epbuild/epbuild/builder/store"
	"github.com/epbuild/epbuild/builder/verify"

	"github.com/charmbracelet/log"
	"github.com/gofrs/flock"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/envsh"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/builder/toolchain"
)

// InstallOptions says what to install where.
type InstallOptions struct {
	Artifact string
	Prefix   string
	// KeepPrevious keeps the install that was at Prefix as Prefix.prev (one previous
	// copy: an older Prefix.prev is replaced); otherwise it is removed once the new one
	// is in place.
	KeepPrevious bool
	// Version is this epbuild's version, for the receipt.
	Version string
	// Self is this epbuild's executable (os.Executable), copied to PREFIX/bin/epbuild
	// when it is a static ELF (runs on any node); "": none.
	Self string
	// Verify configures the check of the new tree before it is put in place (Prefix is
	// set by Install; host checks are not run).
	Verify verify.VerifyOptions
	// PythonWheels installs the wheels the artifact has beside it that take the place of a
	// package of the Python environment (python-wheel), with pip, before the new install
	// is verified; without it install refuses while the environment lacks them.
	PythonWheels bool
	Log          *log.Logger
}

// InstallResult is a finished install.
type InstallResult struct {
	Prefix  string           `json:"prefix"`
	Receipt manifest.Receipt `json:"receipt"`
	// Previous is where the install that was at Prefix is kept ("" when there was none
	// or it was removed).
	Previous string               `json:"previous,omitempty"`
	Report   *verify.VerifyReport `json:"report"`
	// Notes say what install did not do and why (bin/epbuild not copied).
	Notes []string `json:"notes,omitempty"`
}

// InstallVerifyError is a new install that failed verify-install before it was put in
// place: the prefix is as it was. Exit 1.
type InstallVerifyError struct {
	Prefix string
	Report *verify.VerifyReport
	Err    error
}

func (e *InstallVerifyError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("install into %s: verify the new install: %v; nothing was put in place, %s is as it was", e.Prefix, e.Err, e.Prefix)
	}
	var failed []string
	for _, c := range e.Report.Checks {
		if c.Status == "fail" {
			failed = append(failed, fmt.Sprintf("%s: %s", c.ID, c.Found))
		}
	}
	return fmt.Sprintf("install into %s: the new install failed verify; nothing was put in place, %s is as it was:\n  - %s", e.Prefix, e.Prefix, strings.Join(failed, "\n  - "))
}
func (e *InstallVerifyError) Unwrap() error { return e.Err }

// ExitCode: the job failed.
func (e *InstallVerifyError) ExitCode() int { return 1 }

// PrefixRefusedError is a prefix install will not replace: what is there is not an
// epbuild install it may move away (user data, a hand-made copy, an edited install).
// Nothing was moved. Bad input, exit 2.
type PrefixRefusedError struct {
	Prefix string
	Found  string // what is there
	Fix    string
}

func (e *PrefixRefusedError) Error() string {
	return fmt.Sprintf("install into %s: refused, nothing was moved: %s; %s", e.Prefix, e.Found, e.Fix)
}

// ExitCode: bad input.
func (e *PrefixRefusedError) ExitCode() int { return 2 }

// Names of install's siblings of the prefix. The lock file stays (flock's rule: never
// delete a lock file); staging directories of a killed install are removed by the next.
const (
	stageInfix = ".epbuild-install-"
	lockSuffix = ".epbuild-lock"
	prevSuffix = ".prev"
)

// Install checks an artifact and installs it at opts.Prefix atomically:
//
//  1. the artifact's sha256 against ARTIFACT.sha256 when there is one, then its manifest,
//     read without writing anything;
//  2. what is at the prefix: nothing, an empty directory, or an epbuild install (a receipt
//     that pins the manifest beside it) with nothing foreign in it; anything else is
//     refused, and nothing is moved;
//  3. the free space beside the prefix against the sizes the manifest declares;
//  4. extraction into a staging directory beside the prefix, stopped as soon as it
//     exceeds what the manifest declares; every file's sha256 and mode against the
//     manifest; the receipt; then verify-install on the staged tree — the prefix is
//     untouched until all of this passed, and a failure leaves nothing behind;
//  5. an atomic swap (renameat2 RENAME_EXCHANGE on Linux): the prefix is at every moment
//     either the old install or the new one, whole. The old one is removed, or with
//     KeepPrevious kept as Prefix.prev.
//
// A killed install leaves its staging directory, which the next install into the same
// prefix removes.
func Install(ctx context.Context, opts InstallOptions) (*InstallResult, error) {
	art, err := filepath.Abs(opts.Artifact)
	if err != nil {
		return nil, &manifest.BadArtifactError{Artifact: opts.Artifact, Err: err}
	}
	prefix, err := filepath.Abs(opts.Prefix)
	if err != nil {
		return nil, &verify.PrefixError{Prefix: opts.Prefix, Err: err}
	}
	parent, base := filepath.Dir(prefix), filepath.Base(prefix)
	if parent == prefix {
		return nil, &verify.PrefixError{Prefix: prefix, Err: errors.New("the root cannot be an install prefix")}
	}
	st, err := os.Stat(art)
	if err != nil {
		return nil, &manifest.BadArtifactError{Artifact: art, Err: err}
	} else if !st.Mode().IsRegular() {
		return nil, &manifest.BadArtifactError{Artifact: art, Err: errors.New("not a regular file")}
	}
	sum, err := CheckArtifactSum(art)
	if err != nil {
		return nil, err
	}
	m, raw, err := ReadArtifactManifest(ctx, art, st.Size())
	if err != nil {
		return nil, err
	}
	if err := listablePrefix(prefix, m); err != nil {
		return nil, err
	}
	if err := replaceable(prefix, opts.KeepPrevious); err != nil {
		return nil, err
	}
	env := opts.Verify.Environ
	if env == nil {
		env = verify.CleanEnviron(os.Getenv)
	}
	wheelNotes, err := pythonWheels(ctx, verify.Interpreter(opts.Verify.Python, m), env, m, art, opts.PythonWheels)
	for _, n := range wheelNotes {
		logInfo(opts.Log, "python environment", "wheel", n)
	}
	if err != nil {
		return nil, err
	}
	op := "install " + filepath.Base(art) + " into " + prefix
	need := installSize(m, raw)
	// before anything is written (the lock file included), and again under the lock
	if err := checkSpace(disk.ExistingDir(parent), need, len(m.Files), op); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, disk.NoSpaceOr(fmt.Errorf("install into %s: %w", prefix, err), op, parent, 0, fixInstallSpace)
	}
	unlock, err := lockPrefix(ctx, parent, base, opts.Log)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cleanStale(parent, base, opts.Log)
	// again under the lock: another install may have run meanwhile
	if err := replaceable(prefix, opts.KeepPrevious); err != nil {
		return nil, err
	}
	if opts.KeepPrevious {
		if err := replaceable(prefix+prevSuffix, false); err != nil {
			var re *PrefixRefusedError
			if errors.As(err, &re) {
				re.Fix = "--keep-previous replaces " + prefix + prevSuffix + ", which is not a previous install it may remove: move it away first"
			}
			return nil, err
		}
	}
	if err := checkSpace(parent, need, len(m.Files), op); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp(parent, "."+base+stageInfix)
	if err != nil {
		return nil, disk.NoSpaceOr(fmt.Errorf("install into %s: staging directory: %w", prefix, err), op, parent, need, fixInstallSpace)
	}
	defer func() { _ = disk.MakeWritable(stage); _ = os.RemoveAll(stage) }()

	tree := filepath.Join(stage, "tree")
	hashed, err := stageArtifact(ctx, art, tree, m, raw)
	if err != nil {
		return nil, disk.NoSpaceOr(err, op, parent, need, fixInstallSpace)
	}
	// env.sh learns where it is installed: sh cannot find out by itself
	if err := envsh.BakeEnvScript(tree, prefix); err != nil {
		return nil, disk.NoSpaceOr(fmt.Errorf("install into %s: %w", prefix, err), op, parent, need, fixInstallSpace)
	}
	added, notes, err := addEpbuild(tree, m, opts.Self)
	if err != nil {
		return nil, disk.NoSpaceOr(fmt.Errorf("install into %s: %w", prefix, err), op, parent, need, fixInstallSpace)
	}
	rc := manifest.Receipt{
		Artifact: filepath.Base(art), ArtifactPath: art, SHA256: sum, ManifestSHA256: manifest.SHA256Hex(raw), Recipe: m.Recipe, PlanKey: m.PlanKey,
		InstalledAt: time.Now().UTC().Truncate(time.Second), Epbuild: opts.Version, BuiltBy: m.Epbuild, Prefix: prefix, Added: added,
	}
	rb, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("install into %s: encode receipt: %w", prefix, err)
	}
	if err := writeReceipt(filepath.Join(tree, manifest.ReceiptName), append(rb, '\n')); err != nil {
		return nil, disk.NoSpaceOr(fmt.Errorf("install into %s: write receipt: %w", prefix, err), op, parent, need, fixInstallSpace)
	}
	logInfo(opts.Log, "artifact checked", "artifact", rc.Artifact, "files", len(m.Files))

	// verify the tree where it is staged, as the install it will be at prefix: a tree
	// that fails never reaches the prefix
	vo := opts.Verify
	vo.Prefix, vo.Final, vo.Host, vo.Traffic = tree, prefix, false, nil
	// the extraction hashed every file as it wrote it: the verify does not read them again
	vo.Hashed = hashed
	rep, verr := verify.Verify(ctx, vo)
	if rep != nil {
		relocateReport(rep, tree, prefix)
	}
	res := &InstallResult{Prefix: prefix, Receipt: rc, Report: rep, Notes: append(wheelNotes, notes...)}
	if verr != nil || rep.Failed() {
		return res, &InstallVerifyError{Prefix: prefix, Report: rep, Err: verr}
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("install into %s: %w; nothing was put in place", prefix, err)
	}
	prev, err := putInPlace(tree, prefix, stage, opts.KeepPrevious)
	if err != nil {
		return res, err
	}
	res.Previous = prev
	logInfo(opts.Log, "installed", "dir", prefix, "recipe", m.Recipe, "plan", store.ShortKey(m.PlanKey))
	return res, nil
}

// listablePrefix refuses a prefix that cannot be an entry of the path lists env.sh and the
// modulefiles give the install's directories in: ':' separates the entries of PATH,
// PYTHONPATH and LD_LIBRARY_PATH (no escape exists), and ld.so splits LD_PRELOAD at ':'
// and at blanks. Every other byte a path can hold is fine.
func listablePrefix(prefix string, m *manifest.Manifest) error {
	fix := "install into a directory whose path has no ':'"
	if strings.Contains(prefix, ":") {
		return &PrefixRefusedError{Prefix: prefix, Fix: fix + " (a symlink to it does not help: env.sh writes the path it was installed at)",
			Found: "the path holds ':', which separates the entries of PATH, PYTHONPATH and LD_LIBRARY_PATH: the install's directories cannot be put in them"}
	}
	if m.Plan != nil && m.Plan.Env["LD_PRELOAD"] != "" && strings.Contains(prefix, " ") {
		return &PrefixRefusedError{Prefix: prefix, Fix: "install into a directory whose path has no blank",
			Found: "the path holds a blank and the recipe preloads a library: ld.so splits LD_PRELOAD at blanks and ':', so the install's library cannot be preloaded"}
	}
	return nil
}

// addEpbuild makes tree/bin (unless the artifact has one) and copies self there as
// bin/epbuild when it is a static ELF executable: one with an ELF interpreter (a dynamic
// build) may not run on the nodes, and is left out with a note saying so.
func addEpbuild(tree string, m *manifest.Manifest, self string) ([]archive.Entry, []string, error) {
	for _, e := range m.Files {
		if e.Path == manifest.BinDir || strings.HasPrefix(e.Path, manifest.BinDir+"/") {
			return nil, []string{"the artifact has its own " + manifest.BinDir + "/: epbuild was not copied into it"}, nil
		}
	}
	dir := filepath.Join(tree, manifest.BinDir)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, nil, err
	}
	added := []archive.Entry{{Path: manifest.BinDir, Type: archive.TypeDir, Mode: 0o755}}
	if self == "" {
		return added, nil, nil
	}
	if why := staticELF(self); why != "" {
		return added, []string{fmt.Sprintf("%s is not copied to %s: %s; for epbuild on the nodes, install with a static epbuild (CGO_ENABLED=0 go build ./cmd/epbuild)", self, manifest.BinEpbuild, why)}, nil
	}
	dst := filepath.Join(tree, filepath.FromSlash(manifest.BinEpbuild))
	sum, err := disk.CopyHashed(self, dst)
	if err == nil {
		err = os.Chmod(dst, 0o755)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("copy %s to %s: %w", self, manifest.BinEpbuild, err)
	}
	st, err := os.Stat(dst)
	if err != nil {
		return nil, nil, err
	}
	return append(added, archive.Entry{Path: manifest.BinEpbuild, Type: archive.TypeFile, Mode: 0o755, Size: st.Size(), SHA256: sum}), nil, nil
}

// staticELF says why path is not a static ELF executable ("" when it is): no program
// interpreter (PT_INTERP), so it runs wherever the kernel does.
func staticELF(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return "not an ELF executable (" + err.Error() + ")"
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "it is dynamically linked (it has an ELF interpreter, PT_INTERP)"
		}
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "an ELF file that is not an executable"
	}
	return ""
}

// writeReceipt writes the receipt with the mode verify-install expects, whatever the umask.
func writeReceipt(p string, b []byte) error {
	if err := os.WriteFile(p, b, manifest.TopFileMode); err != nil {
		return err
	}
	return os.Chmod(p, manifest.TopFileMode)
}

const fixInstallSpace = "free that much space there, or install into a prefix on another file system; nothing was installed"

func logInfo(l *log.Logger, msg string, kv ...any) {
	if l != nil {
		l.Info(msg, kv...)
	}
}

// CheckArtifactSum hashes the artifact and compares it with ARTIFACT.sha256 when present.
func CheckArtifactSum(art string) (string, error) {
	want, err := manifest.SumBeside(art)
	if err != nil {
		return "", err
	}
	sum, err := disk.FileSHA256(art)
	if err != nil {
		return "", &manifest.BadArtifactError{Artifact: art, Err: err}
	}
	if want != "" && sum != want {
		return "", manifest.SumMismatch(art, sum, want)
	}
	return sum, nil
}

// replaceable refuses a prefix that install must not move away. It may replace nothing,
// an empty directory, or an epbuild install: a receipt (a regular file) that pins the
// manifest.json beside it, and nothing the manifest does not list (Python's bytecode
// caches aside: jobs write them). With keepExtra, foreign entries are allowed: the
// whole old install, them included, is kept as PREFIX.prev.
func replaceable(prefix string, keepExtra bool) error {
	refuse := func(found, fix string) error { return &PrefixRefusedError{Prefix: prefix, Found: found, Fix: fix} }
	const fixOther = "install into a new or empty directory; if what is there may go, move it away yourself first"
	st, err := os.Lstat(prefix)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return refuse(err.Error(), fixOther)
	case st.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(prefix)
		return refuse(fmt.Sprintf("a symlink (to %s)", target), "install to the directory it points to, or remove the link")
	case !st.IsDir():
		return refuse("a "+manifest.FileKind(st.Mode())+", not a directory", fixOther)
	}
	ents, err := os.ReadDir(prefix)
	if err != nil {
		return refuse(err.Error(), fixOther)
	}
	if len(ents) == 0 {
		return nil
	}
	fixE := "epbuild verify-install --prefix " + quote.Shell(prefix) + " shows what changed; if the install may go, remove it yourself first"
	r, err := manifest.ReadReceipt(prefix)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return refuse("a directory that is not an epbuild install (no "+manifest.ReceiptName+"), holding "+listNames(ents), fixOther)
	case err != nil:
		return refuse(err.Error(), fixE)
	}
	m, raw, err := manifest.ReadInstalledManifest(prefix)
	if raw != nil && manifest.SHA256Hex(raw) != r.ManifestSHA256 {
		return refuse(fmt.Sprintf("%s changed since install (sha256 %s, the receipt pins %s)", manifest.ManifestName, store.ShortKey(manifest.SHA256Hex(raw)), store.ShortKey(r.ManifestSHA256)), fixE)
	}
	if err != nil {
		return refuse(err.Error(), fixE)
	}
	if keepExtra {
		return nil
	}
	extra, err := foreignEntries(prefix, verify.InstalledEntries(prefix, m.Files))
	if err != nil {
		return refuse(err.Error(), fixE)
	}
	if len(extra) > 0 {
		return refuse(fmt.Sprintf("an epbuild install holding %d paths its manifest does not list (%s), which replacing it would delete", len(extra), clipList(extra, 5)),
			"move them out of "+prefix+", or install with --keep-previous: the old install, them included, is then kept whole as "+prefix+prevSuffix)
	}
	return nil
}

// foreignEntries lists the paths under dir that the manifest does not list (the receipt,
// the manifest and Python bytecode caches aside), without reading any file.
func foreignEntries(dir string, files []archive.Entry) ([]string, error) {
	known := make(map[string]bool, len(files))
	for _, e := range files {
		known[e.Path] = true
	}
	var extra []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if known[rel] || rel == manifest.ReceiptName || rel == manifest.ManifestName || verify.BytecodeCache(rel, d) {
			return nil
		}
		extra = append(extra, rel)
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	return extra, nil
}

// listNames names a directory's first entries (directories with a trailing slash).
func listNames(ents []fs.DirEntry) string {
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() {
			n += "/"
		}
		names = append(names, n)
	}
	return clipList(names, 5)
}

func clipList(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(s[:n], ", "), len(s)-n)
}

// lockPrefix serialises installs into one prefix (a sibling lock file; flock is released
// by the kernel when a holder dies).
func lockPrefix(ctx context.Context, parent, base string, l *log.Logger) (func(), error) {
	fl := flock.New(filepath.Join(parent, "."+base+lockSuffix))
	ok, err := fl.TryLock()
	if err == nil && !ok {
		logInfo(l, "waiting for another install into the same prefix", "lock", fl.Path())
		ok, err = fl.TryLockContext(ctx, 100*time.Millisecond)
	}
	if err != nil || !ok {
		return nil, fmt.Errorf("install into %s: lock %s: %w", filepath.Join(parent, base), fl.Path(), errors.Join(err, ctx.Err()))
	}
	return func() { _ = fl.Unlock() }, nil
}

// cleanStale removes the staging directories of installs that were killed (the lock is
// held, so none is in use). A kill between the two renames of the fallback swap (file
// systems without an atomic exchange) leaves the old install in the staging directory
// and no prefix: it is put back first.
func cleanStale(parent, base string, l *log.Logger) {
	prefix := filepath.Join(parent, base)
	stale, _ := filepath.Glob(filepath.Join(parent, "."+toolchain.GlobEscape(base)+stageInfix+"*"))
	for _, s := range stale {
		if _, err := os.Lstat(prefix); errors.Is(err, fs.ErrNotExist) {
			if old := filepath.Join(s, "old"); disk.RenameNoReplace(old, prefix) == nil {
				logInfo(l, "put back the install a killed install had moved aside", "dir", prefix)
			}
		}
		logInfo(l, "removing what a killed install left", "dir", s)
		_ = disk.MakeWritable(s)
		_ = os.RemoveAll(s)
	}
}

// ReadArtifactManifest reads the manifest an artifact carries without writing anything:
// the entries before it are decompressed and discarded, within a budget proportional
// to the artifact's size, so that a bomb is refused cheaply.
func ReadArtifactManifest(ctx context.Context, art string, size int64) (*manifest.Manifest, []byte, error) {
	raw, err := archive.ReadMember(ctx, art, manifest.ManifestName, manifest.MaxManifestSize, archive.ExtractOptions{Format: archive.FormatTarZst, MaxBytes: manifest.ManifestBudget(size)})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("not an epbuild artifact: it holds no %s", manifest.ManifestName)}
	case errors.Is(err, archive.ErrLimit):
		return nil, nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("%w; an epbuild artifact carries its manifest within %d times its own size", err, manifest.MaxManifestRatio)}
	case err != nil && ctx.Err() != nil:
		return nil, nil, fmt.Errorf("install %s: %w", art, ctx.Err())
	case err != nil:
		return nil, nil, &manifest.BadArtifactError{Artifact: art, Err: err}
	}
	m, err := manifest.DecodeManifest(raw, manifest.ManifestName)
	if err != nil {
		return nil, nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("not an epbuild artifact: %w", err)}
	}
	return m, raw, nil
}

// installSize is what an install of m takes on disk: the file bytes the manifest
// declares, each rounded up to a block, a block per directory and symlink, the manifest.
func installSize(m *manifest.Manifest, raw []byte) int64 {
	const block = 4096
	n := roundUp(int64(len(raw)), block) + block // the manifest and the receipt
	for _, e := range m.Files {
		if e.Type == archive.TypeFile {
			n += roundUp(max(e.Size, 0), block)
		} else {
			n += block
		}
	}
	return n
}

func roundUp(n, b int64) int64 { return (n + b - 1) / b * b }

// checkSpace refuses an install the file system under dir cannot hold, in bytes or in
// inodes, before anything is written (exit 3, with the space needed).
func checkSpace(dir string, need int64, entries int, op string) error {
	free, inodes, ok := disk.DiskFree(dir)
	if !ok {
		return nil
	}
	if free < need {
		return &disk.NoSpaceError{Op: op, Path: dir, Need: need, Free: free, Fix: fixInstallSpace}
	}
	if want := int64(entries) + 8; inodes >= 0 && inodes < want {
		return &disk.NoSpaceError{Op: op, Path: dir, Need: need, Free: free, Fix: fixInstallSpace,
			Err: fmt.Errorf("%d inodes free, %d needed", inodes, want)}
	}
	return nil
}

// stageArtifact extracts the artifact into tree (which must not exist), stopping once
// it holds more than m declares, and checks the tree against m as it is written (each
// file hashed in the extraction's one read of it, checkTree): the manifest extracted
// must be the one read before, every entry must match it. A failure leaves no tree. It
// returns the sha256 of each file written, by path (VerifyOptions.Hashed).
func stageArtifact(ctx context.Context, art, tree string, m *manifest.Manifest, raw []byte) (hashed map[string]string, err error) {
	defer func() {
		if err != nil {
			_ = disk.MakeWritable(tree)
			_ = os.RemoveAll(tree)
		}
	}()
	opts := archive.ExtractOptions{Format: archive.FormatTarZst, MaxBytes: manifest.DeclaredBytes(m, raw), MaxEntries: manifest.MaxEntries(m), Hash: true}
	rep, err := archive.ExtractFile(ctx, art, tree, opts)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("install %s: %w", art, ctx.Err())
		}
		return nil, manifest.ReadError(ctx, art, err, m, raw)
	}
	if err := manifest.CheckTree(art, m, raw, rep.Tree); err != nil {
		return nil, err
	}
	hashed = make(map[string]string, len(rep.Tree))
	for _, e := range rep.Tree {
		if e.Type == archive.TypeFile && e.SHA256 != "" {
			hashed[e.Path] = e.SHA256
		}
	}
	return hashed, nil
}

// relocateReport makes a report of the staged tree speak of the prefix it is going to.
func relocateReport(rep *verify.VerifyReport, from, to string) {
	fix := func(s string) string { return strings.ReplaceAll(s, from, to) }
	rep.Prefix = to
	for i := range rep.Checks {
		c := &rep.Checks[i]
		c.Read, c.Expected, c.Found, c.Fix = fix(c.Read), fix(c.Expected), fix(c.Found), fix(c.Fix)
	}
}

// putInPlace moves the checked tree to prefix. With an install already there, the two
// are exchanged in one step, so a kill at any moment leaves a whole install at prefix;
// the old one is removed, or with keep becomes prefix.prev (replacing an older one). It
// returns where the old install is kept ("" if nowhere).
func putInPlace(tree, prefix, stage string, keep bool) (string, error) {
	if _, err := os.Lstat(prefix); errors.Is(err, fs.ErrNotExist) {
		if err := disk.RenameNoReplace(tree, prefix); err != nil {
			return "", fmt.Errorf("install into %s: move the checked tree into place: %w", prefix, err)
		}
		return "", nil
	}
	if !keep {
		// after the exchange the old install is in the staging directory, removed with
		// it (or by the next install, after a kill)
		if err := disk.Swap(tree, prefix, filepath.Join(stage, "old")); err != nil {
			return "", fmt.Errorf("install into %s: swap the new install in: %w", prefix, err)
		}
		return "", nil
	}
	prev := prefix + prevSuffix
	if _, err := os.Lstat(prev); err == nil {
		if err := os.Rename(prev, filepath.Join(stage, "older")); err != nil {
			return "", fmt.Errorf("install into %s: remove the older previous install %s: %w", prefix, prev, err)
		}
	}
	// the tree goes to its final name for the old install first: after the exchange the
	// old install is there at once, never in the staging directory a later install
	// would clean up
	if err := disk.RenameNoReplace(tree, prev); err != nil {
		return "", fmt.Errorf("install into %s: %w", prefix, err)
	}
	if err := disk.Swap(prev, prefix, filepath.Join(stage, "old")); err != nil {
		_ = os.Rename(prev, tree)
		return "", fmt.Errorf("install into %s: swap the new install in: %w", prefix, err)
	}
	return prev, nil
}
