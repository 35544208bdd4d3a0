package builder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/charmbracelet/log"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/cache"
	"github.com/epbuild/epbuild/builder/source"
	"github.com/epbuild/epbuild/recipes"
)

// demoArtifacts are two real builds of the embedded demo recipe, made once per test
// binary: A, and B which differs only in SOURCE_DATE_EPOCH (same files, another
// manifest and artifact sha256), so that installing one over the other is visible.
type demoArtifacts struct {
	A, B string
	Plan *Plan
}

// The child mode of TestInstallKilledAtAnyMoment: the test binary re-executed to run one
// install, which the parent kills.
const (
	envChildArtifact = "EPBUILD_TEST_INSTALL_ARTIFACT"
	envChildPrefix   = "EPBUILD_TEST_INSTALL_PREFIX"
)

// demoBuild is the demo built on first use, once per test binary (a re-executed child
// that never asks builds nothing); TestMain removes it.
type demoBuild struct {
	once sync.Once
	dir  string
	arts demoArtifacts
	err  error
}

var shared demoBuild

// artifacts returns the demo artifacts, building them on first use.
func artifacts(t *testing.T) demoArtifacts {
	t.Helper()
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "epbuild-builder-test-"); shared.err == nil {
			shared.arts, shared.err = buildDemo(shared.dir)
		}
	})
	if shared.err != nil {
		t.Fatalf("build the demo artifacts: %v", shared.err)
	}
	return shared.arts
}

func TestMain(m *testing.M) {
	if art := os.Getenv(envChildArtifact); art != "" {
		_, err := Install(context.Background(), InstallOptions{Artifact: art, Prefix: os.Getenv(envChildPrefix), Version: "test"})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if shared.dir != "" {
		_ = makeWritable(shared.dir)
		_ = os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// buildDemo runs the demo recipe through every stage, as `epbuild recipe demo` does.
func buildDemo(dir string) (demoArtifacts, error) {
	ctx := context.Background()
	res, err := NewResolver(recipes.NewLibrary())
	if err != nil {
		return demoArtifacts{}, err
	}
	p, err := res.Resolve("demo", nil)
	if err != nil {
		return demoArtifacts{}, err
	}
	c, err := cache.Open(filepath.Join(dir, "cache"))
	if err != nil {
		return demoArtifacts{}, err
	}
	l := log.New(io.Discard)
	src, err := NewSources(c, "", l, source.ProgressOff)
	if err != nil {
		return demoArtifacts{}, err
	}
	store, err := OpenStore(c.Dir())
	if err != nil {
		return demoArtifacts{}, err
	}
	tc := (&Prober{Getenv: os.Getenv}).Probe(ctx)
	r := &Runner{Store: store, Sources: src, Log: l, Toolchain: tc, Environ: os.Environ(), OutDir: filepath.Join(dir, "a"), Version: "test"}
	ra, err := r.Run(ctx, p)
	if err != nil {
		return demoArtifacts{}, err
	}
	r.OutDir, r.SourceDateEpoch = filepath.Join(dir, "b"), "1700000000"
	rb, err := r.Run(ctx, p)
	if err != nil {
		return demoArtifacts{}, err
	}
	return demoArtifacts{A: ra.Artifact, B: rb.Artifact, Plan: p}, nil
}

// mustInstall installs art at prefix and fails the test on error.
func mustInstall(t *testing.T, art, prefix string, keep bool) *InstallResult {
	t.Helper()
	res, err := Install(context.Background(), InstallOptions{Artifact: art, Prefix: prefix, KeepPrevious: keep, Version: "test"})
	if err != nil {
		t.Fatalf("install %s into %s: %v", filepath.Base(art), prefix, err)
	}
	return res
}

// filesOK fails the test unless dir verifies file by file; it returns the receipt.
func filesOK(t *testing.T, dir string) *Receipt {
	t.Helper()
	rep, err := Verify(context.Background(), VerifyOptions{Prefix: dir, FilesOnly: true})
	if err != nil {
		t.Fatalf("verify %s: %v", dir, err)
	}
	if rep.Failed() {
		t.Fatalf("%s does not verify:\n%s", dir, failedChecks(rep))
	}
	r, err := ReadReceipt(dir)
	if err != nil {
		t.Fatalf("receipt of %s: %v", dir, err)
	}
	return r
}

func failedChecks(rep *VerifyReport) string {
	var b strings.Builder
	for _, c := range rep.Checks {
		if c.Status == "fail" {
			fmt.Fprintf(&b, "  %s: expected %s; found %s\n", c.ID, c.Expected, c.Found)
		}
	}
	return b.String()
}

// siblings lists the names in dir.
func siblings(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func sumOf(t *testing.T, art string) string {
	t.Helper()
	s, err := fileSHA256(art)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestInstallKeepsPreviousUntilVerified(t *testing.T) {
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
	if res.Previous != prefix+".prev-1" || filesOK(t, res.Previous).SHA256 != sumA {
		t.Fatalf("--keep-previous: previous at %q, want %s.prev-1 holding A", res.Previous, prefix)
	}
	// default: the previous install goes once the new one verified
	res = mustInstall(t, artifacts(t).A, prefix, false)
	if res.Previous != "" || filesOK(t, prefix).SHA256 != sumA {
		t.Fatalf("reinstall A: previous %q", res.Previous)
	}
	want := []string{".demo.epbuild-lock", "demo", "demo.prev-1"}
	if got := siblings(t, filepath.Dir(prefix)); !slices.Equal(got, want) {
		t.Fatalf("beside the prefix: %v, want %v", got, want)
	}
	before, _ := os.ReadFile(filepath.Join(prefix, ReceiptName))

	// a new install that fails verify in place is rolled back: A is back, untouched
	broken := append(CleanEnviron(os.Getenv), "PYTHONHOME="+filepath.Join(parent, "no-such-python-home"))
	_, err := Install(context.Background(), InstallOptions{Artifact: artifacts(t).B, Prefix: prefix, Version: "test", Verify: VerifyOptions{Environ: broken}})
	var ve *InstallVerifyError
	if !errors.As(err, &ve) || ve.ExitCode() != 1 || !ve.Restored {
		t.Fatalf("install with a broken Python: %v; want an InstallVerifyError with the previous restored", err)
	}
	if c, ok := ve.Report.Check("python.import:pydemo"); !ok || c.Status != "fail" {
		t.Errorf("the failed verify does not show the import: %+v", c)
	}
	after, _ := os.ReadFile(filepath.Join(prefix, ReceiptName))
	if !bytes.Equal(before, after) || filesOK(t, prefix).SHA256 != sumA {
		t.Errorf("rollback did not restore the previous install exactly")
	}
	if got := siblings(t, filepath.Dir(prefix)); !slices.Equal(got, want) {
		t.Errorf("after the rollback: %v, want %v", got, want)
	}

	// a failed first install leaves no prefix at all
	fresh := filepath.Join(parent, "fresh")
	_, err = Install(context.Background(), InstallOptions{Artifact: artifacts(t).A, Prefix: fresh, Version: "test", Verify: VerifyOptions{Environ: broken}})
	if !errors.As(err, &ve) || ve.Restored {
		t.Fatalf("first install with a broken Python: %v", err)
	}
	if _, err := os.Lstat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed first install left %s: %v", fresh, err)
	}
}

func TestInstallRefusesForeignPrefix(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, "results.csv"), []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Install(context.Background(), InstallOptions{Artifact: artifacts(t).A, Prefix: prefix})
	var pe *PrefixError
	if !errors.As(err, &pe) || pe.ExitCode() != 2 {
		t.Fatalf("install over a directory that is not an install: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(prefix, "results.csv")); string(b) != "precious\n" {
		t.Errorf("the directory was touched")
	}
	if got := siblings(t, filepath.Dir(prefix)); !slices.Equal(got, []string{"data"}) {
		t.Errorf("left beside it: %v", got)
	}
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
	receipt, _ := os.ReadFile(filepath.Join(prefix, ReceiptName))
	listing := siblings(t, parent)
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
			_, err := Install(context.Background(), InstallOptions{Artifact: art, Prefix: prefix})
			var be *BadArtifactError
			if !errors.As(err, &be) || be.ExitCode() != 2 {
				t.Fatalf("got %v; want a BadArtifactError", err)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing was installed") {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if got, _ := os.ReadFile(filepath.Join(prefix, ReceiptName)); !bytes.Equal(got, receipt) {
				t.Errorf("the prefix's receipt changed")
			}
			filesOK(t, prefix)
			if got := siblings(t, parent); !slices.Equal(got, listing) {
				t.Errorf("beside the prefix: %v, want %v", got, listing)
			}
		})
	}
}

// An install killed at any moment leaves a whole install at the prefix (the old one or
// the new one), every kept previous install whole, and the next install cleans up.
func TestInstallKilledAtAnyMoment(t *testing.T) {
	parent, tmp := t.TempDir(), t.TempDir()
	prefix := filepath.Join(parent, "demo")
	mustInstall(t, artifacts(t).A, prefix, false)
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
		cmd.Env = append(os.Environ(), envChildArtifact+"="+art, envChildPrefix+"="+prefix, "TMPDIR="+tmp)
		// its own process group, so that the kill takes the Python it may be running too
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		return cmd
	}
	// full runs, to know how long an install takes here (the fastest: caches warm)
	var full time.Duration
	for i := range 2 {
		start := time.Now()
		if out, err := child(other()).CombinedOutput(); err != nil {
			t.Fatalf("install in a child: %v\n%s", err, out)
		}
		if d := time.Since(start); i == 0 || d < full {
			full = d
		}
	}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("seed %d; one install takes %v", seed, full)
	// stratified: trial i is killed at a random point of the i-th of trials slices of
	// the install's run time (and a little after), on a squared scale so that the short
	// phase before the swap gets its share of kills too
	const trials = 24
	completed, swapped, kept := 0, 0, 0
	for i := range trials {
		target := other()
		cmd := child(target)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		u := (float64(i) + rng.Float64()) / trials
		delay := time.Duration(u * u * 1.1 * float64(full))
		time.Sleep(delay)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err := cmd.Wait()
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
		prevs, _ := filepath.Glob(prefix + ".prev-*")
		for _, p := range prevs {
			filesOK(t, p)
			_ = os.RemoveAll(p)
		}
	}
	t.Logf("%d of %d installs finished before the kill; the prefix held the new install %d times, the old one %d times", completed, trials, swapped, kept)
	if completed == trials || kept == 0 || swapped == 0 {
		t.Errorf("the kills did not land both before and after the swap")
	}
	// the next install removes what the killed ones left
	mustInstall(t, other(), prefix, false)
	if got := siblings(t, parent); !slices.Equal(got, []string{".demo.epbuild-lock", "demo"}) {
		t.Errorf("after a clean install, beside the prefix: %v", got)
	}
}
