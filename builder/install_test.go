package builder

import (
	"github.com/epbuild/epbuild/builder/internal/fixture"
	"github.com/epbuild/epbuild/builder/stage"

	"github.com/epbuild/epbuild/builder/install"

	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/verify"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// demoArtifacts are two real builds of the embedded demo recipe, made once per test
// binary: A, and B which differs only in SOURCE_DATE_EPOCH (same files, another
// manifest and artifact sha256), so that installing one over the other is visible.
type demoArtifacts struct {
	A, B string
	Plan *plan.Plan
}

// The child mode of TestInstallKilledAtAnyMoment: the test binary re-executed to run one
// install, which the parent kills.
const (
	envChildArtifact = "EPBUILD_TEST_INSTALL_ARTIFACT"
	envChildPrefix   = "EPBUILD_TEST_INSTALL_PREFIX"
)

// demoBuild is the demo built on first use, once per test binary (a re-executed child
// that never asks builds nothing), and artifact A installed once (see pristineInstall);
// TestMain removes both.
type demoBuild struct {
	once sync.Once
	dir  string
	arts demoArtifacts
	err  error

	installOnce sync.Once
	installErr  error
}

var shared demoBuild

// warmDemo is the demo built cold once per test binary through the pipeline's entry point
// (as demoRun builds it), in a cache that tests which need every stage already made copy
// with warmCache, and whose result is the reference of the tests that compare bytes.
type warmDemo struct {
	once sync.Once
	dir  string
	res  *stage.Result
	took time.Duration // how long the cold build took
	err  error
}

var warm warmDemo

// warmBuild returns the cold build of the demo, building it on first use; it skips the
// test where the demo cannot build here.
func warmBuild(t *testing.T) *warmDemo {
	t.Helper()
	warm.once.Do(func() {
		if warm.dir, warm.err = os.MkdirTemp("", "epbuild-builder-warm-"); warm.err != nil {
			return
		}
		var j *Job
		if j, warm.err = Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: filepath.Join(warm.dir, "cache"), Log: log.New(io.Discard), Progress: source.ProgressLines}); warm.err != nil {
			return
		}
		start := time.Now()
		warm.res, warm.err = j.Build(context.Background(), BuildOptions{OutDir: filepath.Join(warm.dir, "out"), Version: "test", Environ: os.Environ(), Getenv: os.Getenv})
		warm.took = time.Since(start)
	})
	var pe *toolchain.PreflightError
	if errors.As(warm.err, &pe) {
		t.Skipf("the demo cannot build here: %v", warm.err)
	}
	if warm.err != nil {
		t.Fatalf("build the demo: %v", warm.err)
	}
	return &warm
}

// warmCache returns a copy of the warm demo's cache (every stage made) of the test's own,
// which the test may change; cp -a keeps the hard links between the cache's files.
func warmCache(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	if err := copyWarmCache(warmBuild(t), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyWarmCache(w *warmDemo, dst string) error {
	if out, err := exec.Command("cp", "-a", filepath.Join(w.dir, "cache"), dst).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the warm demo cache: %v\n%s", err, out)
	}
	return nil
}

// artifacts returns the demo artifacts, building them on first use from a copy of the
// warm demo's cache (A is then made of cached stages, B packs them again).
func artifacts(t *testing.T) demoArtifacts {
	t.Helper()
	w := warmBuild(t)
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "epbuild-builder-test-"); shared.err != nil {
			return
		}
		if shared.err = copyWarmCache(w, filepath.Join(shared.dir, "cache")); shared.err == nil {
			shared.arts, shared.err = buildDemo(shared.dir)
		}
	})
	if shared.err != nil {
		t.Fatalf("build the demo artifacts: %v", shared.err)
	}
	return shared.arts
}

// pristineInstall returns the prefix of demo artifact A as install left it: one install
// per test binary, kept as a template and copied back (cp -a: modes, times and links as
// they were) to the same path on every call, so what a test does to it never reaches the
// next. The prefix's parent holds the prefix and its lock, as after an install; the prefix
// is the same path for every caller, since an install is not relocatable.
func pristineInstall(t *testing.T) (prefix string) {
	t.Helper()
	art := artifacts(t).A
	parent, template := filepath.Join(shared.dir, "install"), filepath.Join(shared.dir, "install-template")
	prefix = filepath.Join(parent, "demo")
	shared.installOnce.Do(func() {
		if _, shared.installErr = install.Install(context.Background(), install.InstallOptions{Artifact: art, Prefix: prefix, Version: "test"}); shared.installErr != nil {
			return
		}
		if out, err := exec.Command("cp", "-a", parent, template).CombinedOutput(); err != nil {
			shared.installErr = fmt.Errorf("keep the install as a template: %v\n%s", err, out)
		}
	})
	if shared.installErr != nil {
		t.Fatalf("install the demo: %v", shared.installErr)
	}
	// what the last test left, made writable first: a test may take write permission away
	_ = disk.MakeWritable(parent)
	if err := os.RemoveAll(parent); err != nil {
		t.Fatalf("remove the last test's prefix: %v", err)
	}
	if out, err := exec.Command("cp", "-a", template, parent).CombinedOutput(); err != nil {
		t.Fatalf("copy the demo's install: %v\n%s", err, out)
	}
	return prefix
}

func TestMain(m *testing.M) {
	if art := os.Getenv(envChildArtifact); art != "" {
		_, err := install.Install(context.Background(), install.InstallOptions{Artifact: art, Prefix: os.Getenv(envChildPrefix), Version: "test"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	for _, dir := range []string{shared.dir, warm.dir} {
		if dir != "" {
			_ = disk.MakeWritable(dir)
			_ = os.RemoveAll(dir)
		}
	}
	os.Exit(code)
}

// buildDemo runs the demo recipe through every stage, as `epbuild recipe demo` does, with
// its cache under dir (a copy of the warm demo's: the stages are found made) twice: A, and
// B with another SOURCE_DATE_EPOCH.
func buildDemo(dir string) (demoArtifacts, error) {
	j, err := Open(Options{Library: recipes.NewLibrary(), Recipe: "demo", CacheDir: filepath.Join(dir, "cache"), Log: log.New(io.Discard), Progress: source.ProgressOff})
	if err != nil {
		return demoArtifacts{}, err
	}
	opts := BuildOptions{OutDir: filepath.Join(dir, "a"), Version: "test", Environ: os.Environ(), Getenv: os.Getenv}
	ra, err := j.Build(context.Background(), opts)
	if err != nil {
		return demoArtifacts{}, err
	}
	opts.OutDir, opts.SourceDateEpoch = filepath.Join(dir, "b"), "1700000000"
	rb, err := j.Build(context.Background(), opts)
	if err != nil {
		return demoArtifacts{}, err
	}
	return demoArtifacts{A: ra.Artifact, B: rb.Artifact, Plan: ra.Plan}, nil
}

// mustInstall installs art at prefix and fails the test on error.
func mustInstall(t *testing.T, art, prefix string, keep bool) *install.InstallResult {
	t.Helper()
	res, err := install.Install(context.Background(), install.InstallOptions{Artifact: art, Prefix: prefix, KeepPrevious: keep, Version: "test"})
	if err != nil {
		t.Fatalf("install %s into %s: %v", filepath.Base(art), prefix, err)
	}
	return res
}

// filesOK fails the test unless dir verifies file by file; it returns the receipt.
func filesOK(t *testing.T, dir string) *manifest.Receipt {
	t.Helper()
	rep, err := verify.Verify(context.Background(), verify.VerifyOptions{Prefix: dir, FilesOnly: true})
	if err != nil {
		t.Fatalf("verify %s: %v", dir, err)
	}
	if rep.Failed() {
		t.Fatalf("%s does not verify:\n%s", dir, failedChecks(rep))
	}
	r, err := manifest.ReadReceipt(dir)
	if err != nil {
		t.Fatalf("receipt of %s: %v", dir, err)
	}
	return r
}

func failedChecks(rep *verify.VerifyReport) string {
	var b strings.Builder
	for _, c := range rep.Checks {
		if c.Status == "fail" {
			fmt.Fprintf(&b, "  %s: expected %s; found %s\n", c.ID, c.Expected, c.Found)
		}
	}
	return b.String()
}

func sumOf(t *testing.T, art string) string {
	t.Helper()
	s, err := disk.FileSHA256(art)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestInstallVerifiesBeforeSwapAndKeepsOnePrevious(t *testing.T) {
	parent := t.TempDir()
	prefix := filepath.Join(parent, "opt", "demo")
	sumA, sumB := sumOf(t, artifacts(t).A), sumOf(t, artifacts(t).B)

	res := mustInstall(t, artifacts(t).A, prefix, false)
	if res.Previous != "" || filesOK(t, prefix).SHA256 != sumA {
		t.Fatalf("first install: previous %q, or the receipt does not name A", res.Previous)
	}
	// --keep-previous: B in place, A kept whole beside it
	res = mustInstall(t, artifacts(t).B, prefix, true)
	if got := filesOK(t, prefix).SHA256; got != sumB {
		t.Fatalf("after installing B the prefix holds %s", got)
	}
	if res.Previous != prefix+".prev" || filesOK(t, res.Previous).SHA256 != sumA {
		t.Fatalf("--keep-previous: previous at %q, want %s.prev holding A", res.Previous, prefix)
	}
	// again: exactly one previous copy, now B
	res = mustInstall(t, artifacts(t).A, prefix, true)
	if filesOK(t, prefix).SHA256 != sumA || filesOK(t, res.Previous).SHA256 != sumB {
		t.Fatalf("second --keep-previous: the prefix or %s holds the wrong install", res.Previous)
	}
	want := []string{".demo.epbuild-lock", "demo", "demo.prev"}
	if got := fixture.Names(t, filepath.Dir(prefix)); !slices.Equal(got, want) {
		t.Fatalf("beside the prefix: %v, want %v", got, want)
	}
	// default: the previous install goes once the new one is in place; a kept one stays
	res = mustInstall(t, artifacts(t).B, prefix, false)
	if res.Previous != "" || filesOK(t, prefix).SHA256 != sumB || filesOK(t, prefix+".prev").SHA256 != sumB {
		t.Fatalf("reinstall B: previous %q", res.Previous)
	}
	if got := fixture.Names(t, filepath.Dir(prefix)); !slices.Equal(got, want) {
		t.Fatalf("beside the prefix: %v, want %v", got, want)
	}
	before, _ := os.ReadFile(filepath.Join(prefix, manifest.ReceiptName))
	beforeIno := inode(t, prefix)

	// a new install that fails verify never reaches the prefix: B is there, the same
	// directory, untouched, and the report speaks of the prefix
	broken := append(verify.CleanEnviron(os.Getenv), "PYTHONHOME="+filepath.Join(parent, "no-such-python-home"))
	_, err := install.Install(context.Background(), install.InstallOptions{Artifact: artifacts(t).A, Prefix: prefix, Version: "test", Verify: verify.VerifyOptions{Environ: broken}})
	var ve *install.InstallVerifyError
	if !errors.As(err, &ve) || ve.ExitCode() != 1 {
		t.Fatalf("install with a broken Python: %v; want an install.InstallVerifyError", err)
	}
	if !strings.Contains(err.Error(), "nothing was put in place") {
		t.Errorf("error %q does not say the prefix is untouched", err)
	}
	c, ok := ve.Report.Check("python.import:pydemo")
	if !ok || c.Status != "fail" {
		t.Errorf("the failed verify does not show the import: %+v", c)
	}
	if ve.Report.Prefix != prefix || strings.Contains(c.Read+c.Found+c.Fix, installStageInfix) {
		t.Errorf("the report names the staging directory, not the prefix: %s; %+v", ve.Report.Prefix, c)
	}
	after, _ := os.ReadFile(filepath.Join(prefix, manifest.ReceiptName))
	if !bytes.Equal(before, after) || filesOK(t, prefix).SHA256 != sumB || inode(t, prefix) != beforeIno {
		t.Errorf("a failed install touched the prefix")
	}
	if got := fixture.Names(t, filepath.Dir(prefix)); !slices.Equal(got, want) {
		t.Errorf("after the failed install: %v, want %v", got, want)
	}

	// a failed first install leaves no prefix at all
	fresh := filepath.Join(parent, "fresh")
	_, err = install.Install(context.Background(), install.InstallOptions{Artifact: artifacts(t).A, Prefix: fresh, Version: "test", Verify: verify.VerifyOptions{Environ: broken}})
	if !errors.As(err, &ve) {
		t.Fatalf("first install with a broken Python: %v", err)
	}
	if _, err := os.Lstat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed first install left %s: %v", fresh, err)
	}
}

func inode(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// What install will not replace: it is refused with what was found (exit 2), and not
// one byte moves.
func TestInstallRefusesWhatIsNotItsInstall(t *testing.T) {
	write := func(t *testing.T, p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name      string
		installed bool // make changes an install of artifact A (a copy of one)
		make      func(t *testing.T, prefix string)
		keep      bool
		want      string
		canKeep   bool // allowed with --keep-previous
	}{
		{name: "a directory with a manifest.json of its own", make: func(t *testing.T, p string) {
			write(t, filepath.Join(p, "manifest.json"), `{"name":"app"}`)
			write(t, filepath.Join(p, "src", "keep.txt"), "x\n")
		}, want: "not an epbuild install (no .epbuild-receipt.json), holding manifest.json, src/"},
		{name: "user data", make: func(t *testing.T, p string) { write(t, filepath.Join(p, "results.csv"), "precious\n") },
			want: "not an epbuild install (no .epbuild-receipt.json), holding results.csv"},
		{name: "a file", make: func(t *testing.T, p string) { write(t, p, "precious\n") }, want: "a regular file, not a directory"},
		{name: "a symlink", make: func(t *testing.T, p string) {
			if err := os.Symlink(t.TempDir(), p); err != nil {
				t.Fatal(err)
			}
		}, want: "a symlink (to "},
		{name: "an install with a file of the user's in it", installed: true, make: func(t *testing.T, p string) {
			write(t, filepath.Join(p, "pydemo", "notes.txt"), "mine\n")
		}, want: "an epbuild install holding 1 paths its manifest does not list (pydemo/notes.txt)", canKeep: true},
		{name: "an install whose manifest was edited", installed: true, make: func(t *testing.T, p string) {
			b, _ := os.ReadFile(filepath.Join(p, manifest.ManifestName))
			write(t, filepath.Join(p, manifest.ManifestName), strings.Replace(string(b), `"recipe": "demo"`, `"recipe": "dem0"`, 1))
		}, want: "manifest.json changed since install"},
		{name: "an install whose receipt is a symlink", installed: true, make: func(t *testing.T, p string) {
			outside := filepath.Join(t.TempDir(), "receipt")
			b, _ := os.ReadFile(filepath.Join(p, manifest.ReceiptName))
			write(t, outside, string(b))
			if err := os.Remove(filepath.Join(p, manifest.ReceiptName)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(p, manifest.ReceiptName)); err != nil {
				t.Fatal(err)
			}
		}, want: ".epbuild-receipt.json is a symlink"},
	}
	for _, tc := range cases {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keep=%v", tc.name, keep), func(t *testing.T) {
				parent := t.TempDir()
				prefix := filepath.Join(parent, "data")
				if tc.installed {
					prefix = pristineInstall(t)
					parent = filepath.Dir(prefix)
				}
				tc.make(t, prefix)
				before := snapshotTree(t, parent)
				res, err := install.Install(context.Background(), install.InstallOptions{Artifact: artifacts(t).B, Prefix: prefix, KeepPrevious: keep, Version: "test"})
				if keep && tc.canKeep {
					if err != nil {
						t.Fatalf("--keep-previous: %v", err)
					}
					if b, err := os.ReadFile(filepath.Join(res.Previous, "pydemo", "notes.txt")); err != nil || string(b) != "mine\n" {
						t.Fatalf("the user's file is not in the kept install: %v", err)
					}
					return
				}
				var re *install.PrefixRefusedError
				if !errors.As(err, &re) || re.ExitCode() != 2 {
					t.Fatalf("got %v; want a install.PrefixRefusedError", err)
				}
				if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was moved") {
					t.Errorf("error %q does not say %q", err, tc.want)
				}
				if after := snapshotTree(t, parent); !maps.Equal(before, after) {
					t.Errorf("the refused install changed what is there:\nbefore %v\nafter  %v", before, after)
				}
			})
		}
	}
	// an empty directory holds nothing to lose: it is replaced
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	mustInstall(t, artifacts(t).A, empty, false)
	filesOK(t, empty)
}

// snapshotTree maps every path under dir (symlinks not followed) to its type, mode and
// content.
func snapshotTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		v := info.Mode().String()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			v += " -> " + l
		case info.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			v += " " + string(b)
		}
		out[p] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Every way an artifact can be unusable is refused before the prefix is touched, and
// nothing is left beside it.
func TestInstallRejectsBadArtifacts(t *testing.T) {
	good, err := os.ReadFile(artifacts(t).A)
	if err != nil {
		t.Fatal(err)
	}
	goodSum, err := os.ReadFile(artifacts(t).A + ".sha256")
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	flip := func(b []byte, at int) []byte {
		c := bytes.Clone(b)
		c[at] ^= 0x5a
		return c
	}
	// an archive that is not ours: a well-formed tar.zst without a manifest
	foreign := filepath.Join(work, "foreign")
	if err := os.MkdirAll(filepath.Join(foreign, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(foreign, "lib", "libx.so"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// an artifact whose files do not match its manifest: the demo tree, one file edited
	// after packaging, repacked with the original manifest
	mismatch := filepath.Join(work, "mismatch")
	if _, err := archive.ExtractFile(context.Background(), artifacts(t).A, mismatch, archive.ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mismatch, "pydemo", "python", "pydemo", "channel.py"), []byte("# unpatched\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pack := func(dir string) []byte {
		var buf bytes.Buffer
		if _, err := archive.Pack(context.Background(), dir, &buf, archive.PackOptions{}); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	cases := []struct {
		name      string
		data, sum []byte
		want      string
	}{
		{"corrupted, checked by its sha256 file", flip(good, len(good)/2), goodSum, "sha256"},
		{"corrupted, no sha256 file", flip(good, len(good)/2), nil, ""},
		{"truncated, checked by its sha256 file", good[:len(good)/2], goodSum, "truncated or damaged"},
		{"truncated, no sha256 file", good[:len(good)/2], nil, ""},
		{"empty", nil, nil, ""},
		{"not an archive", []byte("<html>404 Not Found</html>\n"), nil, ""},
		{"not an epbuild artifact", pack(foreign), nil, "not an epbuild artifact"},
		{"files differ from the manifest", pack(mismatch), nil, "changed pydemo/python/pydemo/channel.py"},
	}
	parent := t.TempDir()
	prefix := filepath.Join(parent, "demo")
	mustInstall(t, artifacts(t).A, prefix, false)
	receipt, _ := os.ReadFile(filepath.Join(prefix, manifest.ReceiptName))
	listing := fixture.Names(t, parent)
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			art := filepath.Join(work, fmt.Sprintf("art%d", i), filepath.Base(artifacts(t).A))
			if err := os.MkdirAll(filepath.Dir(art), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(art, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.sum != nil {
				if err := os.WriteFile(art+".sha256", tc.sum, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := install.Install(context.Background(), install.InstallOptions{Artifact: art, Prefix: prefix})
			var be *manifest.BadArtifactError
			if !errors.As(err, &be) || be.ExitCode() != 2 {
				t.Fatalf("got %v; want a BadArtifactError", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was installed") {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if got, _ := os.ReadFile(filepath.Join(prefix, manifest.ReceiptName)); !bytes.Equal(got, receipt) {
				t.Errorf("the prefix's receipt changed")
			}
			filesOK(t, prefix)
			if got := fixture.Names(t, parent); !slices.Equal(got, listing) {
				t.Errorf("beside the prefix: %v, want %v", got, listing)
			}
		})
	}
}

// An install killed at any moment leaves a whole install at the prefix (the old one or
// the new one) and nothing beside it but its staging directory, which the next install
// removes.
func TestInstallKilledAtAnyMoment(t *testing.T) {
	prefix, tmp := pristineInstall(t), t.TempDir()
	parent := filepath.Dir(prefix)
	sums := map[string]string{sumOf(t, artifacts(t).A): artifacts(t).A, sumOf(t, artifacts(t).B): artifacts(t).B}
	other := func() string {
		r := filesOK(t, prefix)
		if sums[r.SHA256] == artifacts(t).A {
			return artifacts(t).B
		}
		return artifacts(t).A
	}
	child := func(art string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		// its temporary files (the import check's) in a directory the test removes: a
		// killed child cannot clean up after itself
		cmd.Env = append(os.Environ(), envChildArtifact+"="+art, envChildPrefix+"="+prefix, "TMPDIR="+tmp,
			"GORACE=atexit_sleep_ms=0") // a race-enabled child exits at once, as a real one does
		// its own process group, so that the kill takes the Python it may be running too
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	// full runs, to know how long an install takes here and when in it the prefix changes
	// (watched from here): the slower of two, a loaded machine runs the trials slower
	var full, swapAt time.Duration
	for range 2 {
		target := other()
		cmd := child(target)
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		seen := time.Duration(0)
	watch:
		for {
			select {
			case err = <-done:
				break watch
			case <-time.After(2 * time.Millisecond):
				if r, rerr := manifest.ReadReceipt(prefix); seen == 0 && rerr == nil && sums[r.SHA256] == target {
					seen = time.Since(start)
				}
			}
		}
		if err != nil {
			t.Fatalf("install in a child: %v", err)
		}
		full = max(full, time.Since(start))
		swapAt = max(swapAt, seen)
	}
	if swapAt == 0 {
		swapAt = full
	}
	t.Logf("one install takes %v, the prefix changes after %v", full, swapAt)
	// spread, not drawn at random: the even trials are killed in the middle of their
	// slice of the time before the swap; the odd ones after the swap, spread over what is
	// left, while the old install is removed and the process ends
	const trials = 6 // three slices before the swap, three after; more cost make test time
	completed, swapped, kept := 0, 0, 0
	for i := range trials {
		target := other()
		cmd := child(target)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		u := (float64(i/2) + 0.5) / (trials / 2)
		delay := time.Duration(u * 0.95 * float64(swapAt))
		waited := make(chan error, 1)
		go func() { waited <- cmd.Wait() }()
		if i%2 == 1 {
			// after the swap, whatever the machine's load: watch for the new receipt, then
			// kill a random moment into what is left (removing the old install, exiting)
			begin := time.Now()
			for {
				if r, rerr := manifest.ReadReceipt(prefix); rerr == nil && sums[r.SHA256] == target {
					break
				}
				if len(waited) > 0 || time.Since(begin) > 20*full+5*time.Second {
					break
				}
				time.Sleep(time.Millisecond)
			}
			delay = time.Since(begin) + time.Duration(u*float64(full-swapAt)/2)
			time.Sleep(time.Duration(u * float64(full-swapAt) / 2))
		} else {
			time.Sleep(delay)
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err := <-waited
		if err == nil {
			completed++
		}
		r := filesOK(t, prefix)
		switch sums[r.SHA256] {
		case target:
			swapped++
		case "":
			t.Fatalf("trial %d (killed after %v): the prefix holds an unknown install %s", i, delay, r.SHA256)
		default:
			kept++
		}
		// nothing but the prefix, its lock and (after a kill) a staging directory
		for _, n := range fixture.Names(t, parent) {
			if n != "demo" && n != ".demo.epbuild-lock" && !strings.HasPrefix(n, ".demo"+installStageInfix) {
				t.Fatalf("trial %d (killed after %v): %s beside the prefix", i, delay, n)
			}
		}
	}
	t.Logf("%d of %d installs finished before the kill; the prefix held the new install %d times, the old one %d times", completed, trials, swapped, kept)
	if completed == trials || kept == 0 || swapped == 0 {
		t.Errorf("the kills did not land both before and after the swap")
	}
	// the next install removes what the killed ones left
	mustInstall(t, other(), prefix, false)
	if got := fixture.Names(t, parent); !slices.Equal(got, []string{".demo.epbuild-lock", "demo"}) {
		t.Errorf("after a clean install, beside the prefix: %v", got)
	}
}

// Where the file system has no atomic exchange, the swap is three renames; a kill
// between the first two leaves the old install in the staging directory and no prefix.
// The next install puts it back before anything else: with --keep-previous it is kept.
func TestInstallPutsBackWhatAKilledSwapMovedAside(t *testing.T) {
	prefix := pristineInstall(t)
	parent := filepath.Dir(prefix)
	stage := filepath.Join(parent, ".demo"+installStageInfix+"123")
	if err := os.Mkdir(stage, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(prefix, filepath.Join(stage, "old")); err != nil {
		t.Fatal(err)
	}
	res := mustInstall(t, artifacts(t).B, prefix, true)
	if filesOK(t, prefix).SHA256 != sumOf(t, artifacts(t).B) || res.Previous != prefix+".prev" || filesOK(t, res.Previous).SHA256 != sumOf(t, artifacts(t).A) {
		t.Fatalf("the install moved aside was not put back and kept: previous %q", res.Previous)
	}
	if got := fixture.Names(t, parent); !slices.Equal(got, []string{".demo.epbuild-lock", "demo", "demo.prev"}) {
		t.Errorf("beside the prefix: %v", got)
	}
}

// installStageInfix is how install names its staging directory beside the prefix
// (.NAME.epbuild-install-*): what a refused or interrupted install must not leave.
const installStageInfix = ".epbuild-install-"
