package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/log"
	"github.com/gofrs/flock"

	"github.com/epbuild/epbuild/builder/archive"
)

// ReceiptName is the file install leaves at the top of the prefix.
const ReceiptName = ".epbuild-receipt.json"

// Receipt says what was installed in a prefix, from where and when. It pins
// manifest.json by hash, so an edited manifest cannot hide an edited file.
type Receipt struct {
	Artifact       string    `json:"artifact"`
	SHA256         string    `json:"sha256"`
	ManifestSHA256 string    `json:"manifest_sha256"`
	Recipe         string    `json:"recipe"`
	PlanKey        string    `json:"plan_key"`
	InstalledAt    time.Time `json:"installed_at"`
	Epbuild        string    `json:"epbuild"`  // the epbuild that installed it
	BuiltBy        string    `json:"built_by"` // the epbuild that built it (from the manifest)
	Prefix         string    `json:"prefix"`
}

// ReadReceipt reads dir's receipt; a missing one is an fs.ErrNotExist error.
func ReadReceipt(dir string) (*Receipt, error) {
	b, err := os.ReadFile(filepath.Join(dir, ReceiptName))
	if err != nil {
		return nil, err
	}
	var r Receipt
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode %s: %w", filepath.Join(dir, ReceiptName), err)
	}
	return &r, nil
}

// InstallOptions says what to install where.
type InstallOptions struct {
	Artifact string
	Prefix   string
	// KeepPrevious keeps the install that was at Prefix as Prefix.prev-<n> after the new
	// one verifies; otherwise it is removed then. It is always kept until then.
	KeepPrevious bool
	// Version is this epbuild's version, for the receipt.
	Version string
	// Verify configures the check of the new install in place (Prefix is set by Install;
	// host checks are not run).
	Verify VerifyOptions
	Log    *log.Logger
}

// InstallResult is a finished install.
type InstallResult struct {
	Prefix  string  `json:"prefix"`
	Receipt Receipt `json:"receipt"`
	// Previous is where the install that was at Prefix is kept ("" when there was none
	// or it was removed).
	Previous string        `json:"previous,omitempty"`
	Report   *VerifyReport `json:"report"`
}

// BadArtifactError is an artifact that failed its checks before anything was installed:
// damaged, truncated, not matching its manifest, or not an epbuild artifact. Bad input,
// exit 2; the prefix was not touched.
type BadArtifactError struct {
	Artifact string
	Err      error
}

func (e *BadArtifactError) Error() string {
	return fmt.Sprintf("install %s: the artifact is unusable, nothing was installed: %v", e.Artifact, e.Err)
}
func (e *BadArtifactError) Unwrap() error { return e.Err }

// ExitCode: bad input.
func (e *BadArtifactError) ExitCode() int { return 2 }

// InstallVerifyError is a new install that failed verify-install in place: it was rolled
// back, and the previous install (if any) is at the prefix again. Exit 1.
type InstallVerifyError struct {
	Prefix   string
	Report   *VerifyReport
	Restored bool // a previous install is back at Prefix
	Err      error
}

func (e *InstallVerifyError) Error() string {
	what := "the prefix is as before (empty)"
	if e.Restored {
		what = "the previous install is back in place"
	}
	if e.Err != nil {
		return fmt.Sprintf("install into %s: verify in place: %v; rolled back, %s", e.Prefix, e.Err, what)
	}
	var failed []string
	for _, c := range e.Report.Checks {
		if c.Status == "fail" {
			failed = append(failed, fmt.Sprintf("%s: %s", c.ID, c.Found))
		}
	}
	return fmt.Sprintf("install into %s: the new install failed verify in place; rolled back, %s:\n  - %s", e.Prefix, what, strings.Join(failed, "\n  - "))
}
func (e *InstallVerifyError) Unwrap() error { return e.Err }

// ExitCode: the job failed.
func (e *InstallVerifyError) ExitCode() int { return 1 }

// Names of install's siblings of the prefix. The lock file stays (flock's rule: never
// delete a lock file); staging directories of a killed install are removed by the next.
const (
	stageInfix = ".epbuild-install-"
	lockSuffix = ".epbuild-lock"
	prevInfix  = ".prev-"
)

// Install checks an artifact and installs it at opts.Prefix atomically:
//
//  1. the artifact's sha256 against ARTIFACT.sha256 when there is one;
//  2. extraction into a staging directory beside the prefix, then every file's sha256
//     and mode against the manifest it carries, and the receipt written — the prefix is
//     untouched until all of this passed, and a failure leaves nothing behind;
//  3. an atomic swap (renameat2 RENAME_EXCHANGE on Linux): the prefix is at every moment
//     either the old install or the new one, whole; the old one moves to Prefix.prev-<n>;
//  4. verify-install in place; on failure the old install is swapped back, on success
//     it is removed unless KeepPrevious.
func Install(ctx context.Context, opts InstallOptions) (*InstallResult, error) {
	art, err := filepath.Abs(opts.Artifact)
	if err != nil {
		return nil, &BadArtifactError{Artifact: opts.Artifact, Err: err}
	}
	prefix, err := filepath.Abs(opts.Prefix)
	if err != nil {
		return nil, &PrefixError{Prefix: opts.Prefix, Err: err}
	}
	parent, base := filepath.Dir(prefix), filepath.Base(prefix)
	if parent == prefix {
		return nil, &PrefixError{Prefix: prefix, Err: errors.New("the root cannot be an install prefix")}
	}
	if st, err := os.Stat(art); err != nil {
		return nil, &BadArtifactError{Artifact: art, Err: err}
	} else if !st.Mode().IsRegular() {
		return nil, &BadArtifactError{Artifact: art, Err: errors.New("not a regular file")}
	}
	sum, err := checkArtifactSum(art)
	if err != nil {
		return nil, err
	}
	if err := replaceable(prefix); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, fmt.Errorf("install into %s: %w", prefix, err)
	}
	unlock, err := lockPrefix(ctx, parent, base, opts.Log)
	if err != nil {
		return nil, err
	}
	defer unlock()
	cleanStale(parent, base, opts.Log)
	// again under the lock: another install may have run meanwhile
	if err := replaceable(prefix); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp(parent, "."+base+stageInfix)
	if err != nil {
		return nil, fmt.Errorf("install into %s: staging directory: %w", prefix, err)
	}
	defer func() { _ = makeWritable(stage); _ = os.RemoveAll(stage) }()

	tree := filepath.Join(stage, "tree")
	m, raw, err := stageArtifact(ctx, art, tree)
	if err != nil {
		return nil, err
	}
	rc := Receipt{
		Artifact: filepath.Base(art), SHA256: sum, ManifestSHA256: sha256Hex(raw), Recipe: m.Recipe, PlanKey: m.PlanKey,
		InstalledAt: time.Now().UTC().Truncate(time.Second), Epbuild: opts.Version, BuiltBy: m.Epbuild, Prefix: prefix,
	}
	rb, err := json.MarshalIndent(rc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("install into %s: encode receipt: %w", prefix, err)
	}
	if err := os.WriteFile(filepath.Join(tree, ReceiptName), append(rb, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("install into %s: write receipt: %w", prefix, err)
	}
	logInfo(opts.Log, "artifact checked", "artifact", rc.Artifact, "files", len(m.Files))

	prev, err := swapIn(tree, prefix)
	if err != nil {
		return nil, err
	}
	res := &InstallResult{Prefix: prefix, Receipt: rc, Previous: prev}
	vo := opts.Verify
	vo.Prefix, vo.Host, vo.Traffic = prefix, false, nil
	rep, verr := Verify(ctx, vo)
	res.Report = rep
	if verr != nil || rep.Failed() {
		// the verify may have been cancelled: the rollback must still happen
		if err := rollback(prefix, prev, stage); err != nil {
			return res, fmt.Errorf("install into %s: verify failed and the rollback failed too (%v); the previous install is at %s", prefix, err, prev)
		}
		return res, &InstallVerifyError{Prefix: prefix, Report: rep, Restored: prev != "", Err: verr}
	}
	if prev != "" && !opts.KeepPrevious {
		if err := discard(prev, stage); err != nil {
			return res, fmt.Errorf("install into %s: remove the previous install: %w", prefix, err)
		}
		res.Previous = ""
	}
	logInfo(opts.Log, "installed", "dir", prefix, "recipe", m.Recipe, "plan", shortKey(m.PlanKey))
	return res, nil
}

func logInfo(l *log.Logger, msg string, kv ...any) {
	if l != nil {
		l.Info(msg, kv...)
	}
}

// checkArtifactSum hashes the artifact and compares it with ARTIFACT.sha256 when present.
func checkArtifactSum(art string) (string, error) {
	sum, err := fileSHA256(art)
	if err != nil {
		return "", &BadArtifactError{Artifact: art, Err: err}
	}
	b, err := os.ReadFile(art + ".sha256")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return sum, nil
	case err != nil:
		return "", &BadArtifactError{Artifact: art, Err: err}
	}
	f := strings.Fields(string(b))
	if len(f) == 0 || len(f[0]) != 64 {
		return "", &BadArtifactError{Artifact: art, Err: fmt.Errorf("%s.sha256 holds no sha256", filepath.Base(art))}
	}
	if !strings.EqualFold(f[0], sum) {
		return "", &BadArtifactError{Artifact: art, Err: fmt.Errorf("its sha256 is %s, %s.sha256 says %s: truncated or damaged in transfer; copy it again",
			sum, filepath.Base(art), strings.ToLower(f[0]))}
	}
	return sum, nil
}

// replaceable refuses a prefix that install must not move away: a symlink, a file, or a
// directory with content that is not an epbuild install (its content would be removed).
func replaceable(prefix string) error {
	st, err := os.Lstat(prefix)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return &PrefixError{Prefix: prefix, Err: err}
	case st.Mode()&fs.ModeSymlink != 0:
		return &PrefixError{Prefix: prefix, Err: errors.New("is a symlink: install to the directory it points to, or remove the link")}
	case !st.IsDir():
		return &PrefixError{Prefix: prefix, Err: errors.New("exists and is not a directory")}
	}
	if _, err := os.Lstat(filepath.Join(prefix, ManifestName)); err == nil {
		return nil
	}
	ents, err := os.ReadDir(prefix)
	if err != nil {
		return &PrefixError{Prefix: prefix, Err: err}
	}
	if len(ents) > 0 {
		return &PrefixError{Prefix: prefix, Err: errors.New("exists, is not empty and is not an epbuild install (no manifest.json): remove it or choose another prefix")}
	}
	return nil
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
// held, so none is in use).
func cleanStale(parent, base string, l *log.Logger) {
	stale, _ := filepath.Glob(filepath.Join(parent, "."+globEscape(base)+stageInfix+"*"))
	for _, s := range stale {
		logInfo(l, "removing what a killed install left", "dir", s)
		_ = makeWritable(s)
		_ = os.RemoveAll(s)
	}
}

func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`)
	return r.Replace(s)
}

// stageArtifact extracts the artifact into tree (which must not exist) and checks it
// against its own manifest.
func stageArtifact(ctx context.Context, art, tree string) (*Manifest, []byte, error) {
	if _, err := archive.ExtractFile(ctx, art, tree, archive.ExtractOptions{Format: archive.FormatTarZst}); err != nil {
		var xe *archive.ExtractError
		if errors.As(err, &xe) && xe.Kind != nil {
			return nil, nil, &BadArtifactError{Artifact: art, Err: err}
		}
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("install %s: %w", art, ctx.Err())
		}
		// an I/O error here is as likely the archive's (a truncated zstd frame) as ours;
		// nothing was installed either way
		return nil, nil, &BadArtifactError{Artifact: art, Err: err}
	}
	m, raw, err := ReadInstalledManifest(tree)
	if err != nil {
		return nil, nil, &BadArtifactError{Artifact: art, Err: fmt.Errorf("not an epbuild artifact: %w", stripPath(err, tree))}
	}
	problems, _, err := VerifyFiles(ctx, tree, m.Files)
	if err != nil {
		return nil, nil, fmt.Errorf("install %s: %w", art, err)
	}
	if len(problems) > 0 {
		const show = 10
		var lines []string
		for i, p := range problems {
			if i == show {
				lines = append(lines, fmt.Sprintf("... and %d more", len(problems)-show))
				break
			}
			lines = append(lines, fmt.Sprintf("%s %s: expected %s, found %s", p.Kind, p.Path, orNone(p.Expected), orNone(p.Found)))
		}
		return nil, nil, &BadArtifactError{Artifact: art, Err: fmt.Errorf("%d entries differ from its manifest:\n  - %s", len(problems), strings.Join(lines, "\n  - "))}
	}
	return m, raw, nil
}

// stripPath drops the staging path from an error's text: the user knows the artifact,
// not our temporary directory.
func stripPath(err error, dir string) error {
	return errors.New(strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), ""))
}

// swapIn puts tree at prefix. With an install already there, the two are exchanged in
// one step and the old one lands at a free prefix.prev-<n>, so a crash at any moment
// leaves a whole install at prefix. It returns where the old install went ("" if none).
func swapIn(tree, prefix string) (string, error) {
	if _, err := os.Lstat(prefix); errors.Is(err, fs.ErrNotExist) {
		if err := renameNoReplace(tree, prefix); err != nil {
			return "", fmt.Errorf("install into %s: move the checked tree into place: %w", prefix, err)
		}
		return "", nil
	}
	prev, err := freePrev(prefix)
	if err != nil {
		return "", err
	}
	// The tree goes to its final name for the old install first: after the exchange the
	// old install is there at once, never in the staging directory a later install
	// would clean up.
	if err := renameNoReplace(tree, prev); err != nil {
		return "", fmt.Errorf("install into %s: %w", prefix, err)
	}
	err = exchange(prev, prefix)
	if errors.Is(err, errNoExchange) {
		// no atomic exchange on this file system: two renames, undone on failure
		old := prev + ".old"
		if err = os.Rename(prefix, old); err == nil {
			if err = os.Rename(prev, prefix); err != nil {
				_ = os.Rename(old, prefix)
			} else {
				err = os.Rename(old, prev)
			}
		}
	}
	if err != nil {
		_ = os.Rename(prev, tree)
		return "", fmt.Errorf("install into %s: swap the new install in: %w", prefix, err)
	}
	return prev, nil
}

// freePrev picks the first prefix.prev-<n> that does not exist.
func freePrev(prefix string) (string, error) {
	for n := 1; n < 10000; n++ {
		p := prefix + prevInfix + strconv.Itoa(n)
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			return p, nil
		}
	}
	return "", fmt.Errorf("install into %s: 9999 previous installs are kept beside it; remove some", prefix)
}

// rollback undoes swapIn: the previous install back at prefix (or the prefix gone when
// there was none), the failed one moved into the staging directory to be removed.
func rollback(prefix, prev, stage string) error {
	if prev == "" {
		return discard(prefix, stage)
	}
	err := exchange(prev, prefix)
	if errors.Is(err, errNoExchange) {
		failed := filepath.Join(stage, "failed")
		if err = os.Rename(prefix, failed); err == nil {
			if err = os.Rename(prev, prefix); err != nil {
				_ = os.Rename(failed, prefix)
			}
			return err
		}
	}
	if err != nil {
		return err
	}
	return discard(prev, stage)
}

// discard moves dir into the staging directory (one rename: gone from view at once) to
// be removed with it; a kill during the removal leaves it to the next install's cleanup.
func discard(dir, stage string) error {
	trash := filepath.Join(stage, "discard-"+filepath.Base(dir))
	if err := os.Rename(dir, trash); err != nil {
		return err
	}
	_ = makeWritable(trash)
	return os.RemoveAll(trash)
}

// renameIfAbsent is the fallback for a no-replace rename: a small race window, where the
// kernel offers nothing better (the install lock keeps other installs out of it).
func renameIfAbsent(oldpath, newpath string) error {
	if _, err := os.Lstat(newpath); err == nil {
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: fs.ErrExist}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Rename(oldpath, newpath)
}
