package pack

import (
	"github.com/epbuild/epbuild/builder/install"

	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/verify"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/benchcmp"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/toolchain"
	"github.com/epbuild/epbuild/recipes"
)

// TestComparePackage times the whole package stage (hash every file, manifest, tar.zst in
// frames on every core, the artifact's sha256) of a 570 MB prefix against
// `tar --sort=name | zstd -3` on the same tree: with one zstd thread (target: 0.8 of it on
// two cores) and with -T0, every core (target: 1.0).
func TestComparePackage(t *testing.T) {
	benchcmp.Skip(t)
	benchcmp.Need(t, "tar", "zstd")
	ctx := context.Background()
	b := benchPackage(t)
	in, plan, tmp, total, comp := b.in, b.in.Plan, b.tmp, b.total, b.in.Plan.Components[1].Name
	var artifact int64
	ours := func(tb testing.TB) benchcmp.Sample {
		dir, err := os.MkdirTemp(tmp, "out-")
		if err != nil {
			tb.Fatal(err)
		}
		defer os.RemoveAll(dir)
		d := benchcmp.Time(tb, func() error { return Write(ctx, in, dir, nil) })
		if fi, err := os.Stat(filepath.Join(dir, ArtifactName(plan))); err == nil {
			artifact = fi.Size()
		}
		return d
	}
	// The anchor archives the same tree under the same top directory name.
	anchor := func(threads string) benchcmp.Side {
		return func(tb testing.TB) benchcmp.Sample {
			out := filepath.Join(tmp, "anchor.tar.zst")
			defer os.Remove(out)
			return benchcmp.Shell(tb, tmp, `tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 --transform="s,^prefix,$1,;s,^small,$2," -cf - prefix small | zstd -3 -T$3 -q -f -o "$4"`,
				comp, plan.Components[0].Name, threads, out)
		}
	}
	rs := benchcmp.CompareMany(t, benchcmp.Rounds(5), ours, anchor("1"), anchor("0"))
	extra := []string{fmt.Sprintf("bytes=%d", total), fmt.Sprintf("artifact=%d", artifact), fmt.Sprintf("cores=%d", benchcmp.Workers())}
	rs[0].Print("package", extra...)
	rs[1].Print("package-t0", extra...)
}

// TestCompareInstall times install (the manifest from the first frame, the frames
// decompressed on every core while each entry is checked and hashed against the
// manifest, the tree verified and swapped in) of the package comparison's artifact
// against `tar --zstd -xf` of it followed by `sha256sum -c` of every file (target: 0.7).
func TestCompareInstall(t *testing.T) {
	benchcmp.Skip(t)
	benchcmp.Need(t, "tar", "zstd", "sha256sum")
	ctx := context.Background()
	b := benchPackage(t)
	// the generated trees hold none of what the demo's checks look for: the install's
	// verification checks the files alone, as the anchor does
	b.in.Plan.Env = nil
	for i := range b.in.Plan.Components {
		b.in.Plan.Components[i].Checks, b.in.Plan.Components[i].Build = nil, nil
	}
	out := filepath.Join(b.tmp, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(ctx, b.in, out, nil); err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(out, ArtifactName(b.in.Plan))
	fi, err := os.Stat(art)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err := install.ReadArtifactManifest(ctx, art, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	var sums strings.Builder
	for _, e := range m.Files {
		if e.Type == archive.TypeFile {
			fmt.Fprintf(&sums, "%s  %s\n", e.SHA256, e.Path)
		}
	}
	sumFile := filepath.Join(b.tmp, "SHA256SUMS")
	if err := os.WriteFile(sumFile, []byte(sums.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	ours := func(tb testing.TB) benchcmp.Sample {
		prefix := filepath.Join(b.tmp, "install")
		defer os.RemoveAll(prefix)
		return benchcmp.Time(tb, func() error {
			_, err := install.Install(ctx, install.InstallOptions{Artifact: art, Prefix: prefix, Version: "bench"})
			return err
		})
	}
	anchor := func(tb testing.TB) benchcmp.Sample {
		dir := filepath.Join(b.tmp, "anchor")
		defer os.RemoveAll(dir)
		return benchcmp.Shell(tb, b.tmp, `mkdir "$1" && tar --zstd -xf "$2" -C "$1" && cd "$1" && sha256sum -c --quiet "$3"`, dir, art, sumFile)
	}
	benchcmp.Compare(t, benchcmp.Rounds(5), ours, anchor).Print("install", fmt.Sprintf("bytes=%d", b.total), fmt.Sprintf("artifact=%d", fi.Size()), fmt.Sprintf("cores=%d", benchcmp.Workers()))
}

// benchPkg is the package comparison's input: the demo plan and its components, with a
// generated 570 MB prefix as pydemo and a small one as libdemo.
type benchPkg struct {
	in    Input
	tmp   string
	total int64
}

func benchPackage(t *testing.T) benchPkg {
	t.Helper()
	tmp := t.TempDir()
	prefix := filepath.Join(tmp, "prefix")
	total := benchcmp.InstallTree(t, prefix, 256, 8000)

	plan, err := mustResolver(t).Resolve("demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(tmp, "small")
	if err := os.MkdirAll(filepath.Join(small, "lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(small, "lib", "libdemo.so"), bytes.Repeat([]byte("demo"), 1<<18), 0o755); err != nil {
		t.Fatal(err)
	}
	comp := plan.Components[1].Name
	// the anchor packs no wheel: neither does the stage measured (the demo's pydemo asks
	// for one, and this generated tree holds no package to make it from)
	// (and no patch was applied to these trees, so the plan names none)
	for i := range plan.Components[1].Build {
		if pe := plan.Components[1].Build[i].PythonExtension; pe != nil {
			pe.Wheel = false
		}
	}
	for i := range plan.Components {
		plan.Components[i].Patches, plan.Components[i].PatchSets = nil, nil
	}
	in := Input{Plan: plan, Version: "bench", Toolchain: &toolchain.Toolchain{}, Components: []manifest.ComponentResult{
		{Name: plan.Components[0].Name, Prefix: small, CommitTime: 1700000000},
		{Name: comp, Prefix: prefix, CommitTime: 1700000000},
	}}
	return benchPkg{in: in, tmp: tmp, total: total}
}

func mustResolver(t testing.TB) *plan.Resolver {
	t.Helper()
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestCompareVerify times verify-install's file check against checking the same sums with
// `openssl dgst -sha256` (with SHA extensions where the CPU has them, as Go's sha256 does)
// on as many processes as epbuild has workers, on the same generated 1 GiB tree.
func TestCompareVerify(t *testing.T) {
	benchcmp.Skip(t)
	benchcmp.Need(t, "openssl", "xargs", "sort", "cmp")
	ctx := context.Background()
	dir := t.TempDir()
	const (
		nfiles   = 256
		fileSize = 4 << 20
	)
	rng := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, fileSize)
	for i := range nfiles {
		p := filepath.Join(dir, fmt.Sprintf("d%02d", i%16), fmt.Sprintf("f%03d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		_, _ = rng.Read(buf)
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := archive.HashTree(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	// What `openssl dgst -sha256 -r` prints for the tree, sorted: the anchor's expectation.
	var lines []string
	var total int64
	for _, e := range entries {
		if e.Type == archive.TypeFile {
			lines = append(lines, fmt.Sprintf("%s *./%s", e.SHA256, e.Path))
			total += e.Size
		}
	}
	want := filepath.Join(t.TempDir(), "want")
	sort := exec.Command("sort", "-k2")
	sort.Stdin = strings.NewReader(strings.Join(lines, "\n") + "\n")
	sort.Env = append(os.Environ(), "LC_ALL=C")
	sorted, err := sort.Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(want, sorted, 0o644); err != nil {
		t.Fatal(err)
	}
	workers := benchcmp.Workers()
	ours := func(tb testing.TB) benchcmp.Sample {
		return benchcmp.Time(tb, func() error {
			problems, _, err := verify.VerifyFiles(ctx, dir, entries)
			if err == nil && len(problems) > 0 {
				err = fmt.Errorf("verify: %+v", problems)
			}
			return err
		})
	}
	// 32 files a process: its output (under 4 KiB) reaches the pipe in one write, so the
	// processes' lines do not interleave.
	anchor := func(tb testing.TB) benchcmp.Sample {
		return benchcmp.Shell(tb, dir, `find . -type f -print0 | xargs -0 -P "$1" -n 32 openssl dgst -sha256 -r | LC_ALL=C sort -k2 | cmp - "$2"`,
			fmt.Sprint(workers), want)
	}
	benchcmp.Compare(t, benchcmp.Rounds(7), ours, anchor).Print("verify", fmt.Sprintf("bytes=%d", total), fmt.Sprintf("workers=%d", workers))
}

// TestCompareNoop: a rerun of the demo with everything cached, over the cold run.
func TestCompareNoop(t *testing.T) {
	benchcmp.Skip(t)
	bin := filepath.Join(t.TempDir(), "epbuild")
	if b, err := exec.Command("go", "build", "-o", bin, "github.com/epbuild/epbuild/cmd/epbuild").CombinedOutput(); err != nil {
		t.Fatalf("build epbuild: %v %s", err, b)
	}
	run := func(tb testing.TB, dir string) benchcmp.Sample {
		cmd := exec.Command(bin, "recipe", "demo", "-o", filepath.Join(dir, "out"), "--log-level", "error")
		cmd.Env = append(os.Environ(), "EPBUILD_CACHE="+filepath.Join(dir, "cache"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		return benchcmp.Time(tb, func() error {
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("epbuild recipe demo: %v\n%s", err, out.Bytes())
			}
			return nil
		})
	}
	last := t.TempDir()
	run(t, last)
	warm := func(tb testing.TB) benchcmp.Sample { return run(tb, last) }
	cold := func(tb testing.TB) benchcmp.Sample {
		last = tb.TempDir()
		return run(tb, last)
	}
	benchcmp.Compare(t, benchcmp.Rounds(3), warm, cold).Print("noop")
}
