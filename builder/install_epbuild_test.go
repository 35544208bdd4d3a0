package builder

import (
	"github.com/epbuild/epbuild/builder/install"

	"context"
	"github.com/epbuild/epbuild/builder/verify"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/disk"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/quote"
)

// staticFixture builds a small static executable (CGO_ENABLED=0, no ELF interpreter)
// that prints "fixture" and its arguments: what install copies as bin/epbuild.
func staticFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := "package main\n\nimport (\n\t\"fmt\"\n\t\"os\"\n)\n\nfunc main() { fmt.Println(\"fixture\", os.Args[1:]) }\n"
	for name, data := range map[string]string{"go.mod": "module fixture\n\ngo 1.21\n", "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "epbuild")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false", "GOPROXY=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the static fixture: %v\n%s", err, b)
	}
	return out
}

// TestInstallCopiesEpbuild: install copies a static epbuild to PREFIX/bin/epbuild and
// records it in the receipt; env.sh puts it on PATH (the README's node line); verify-
// install checks its bytes like the artifact's, passes when the installed one runs it and
// warns when another does; a reinstall does not take it for a foreign file. A dynamic
// executable is not copied, and install says why.
func TestInstallCopiesEpbuild(t *testing.T) {
	arts := artifacts(t)
	self := staticFixture(t)
	prefix := filepath.Join(t.TempDir(), "it's an install")
	res, err := install.Install(context.Background(), install.InstallOptions{Artifact: arts.A, Prefix: prefix, Version: "test", Self: self})
	if err != nil {
		t.Fatal(err)
	}
	var recorded bool
	for _, e := range res.Receipt.Added {
		if e.Path == "bin/epbuild" && e.Mode == 0o755 && e.SHA256 == mustSHA256(t, self) {
			recorded = true
		}
	}
	r, err := manifest.ReadReceipt(prefix)
	if !recorded || err != nil || len(r.Added) != 2 || len(res.Notes) != 0 {
		t.Fatalf("receipt: %+v, %v; notes %q", res.Receipt.Added, err, res.Notes)
	}
	if st, err := os.Stat(filepath.Join(prefix, "bin", "epbuild")); err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("bin/epbuild: %v", err)
	}
	// the README's line on a node, from sh
	cmd := exec.Command("dash", "-c", `. "$1" && epbuild verify-install --host`, "sh", filepath.Join(prefix, manifest.EnvName))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	if b, err := cmd.CombinedOutput(); err != nil || string(b) != "fixture [verify-install --host]\n" {
		t.Errorf(". env.sh && epbuild: %v\n%s", err, b)
	}

	verify := func(self string) *verify.VerifyReport {
		rep, err := verify.Verify(context.Background(), verify.VerifyOptions{Prefix: prefix, Self: self, Version: "other"})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	wantStatus(t, verify(self), map[string]string{"files": "pass", "install.receipt": "pass", "install.epbuild": "pass"})
	rep := verify("/bin/sh")
	wantStatus(t, rep, map[string]string{"files": "pass", "install.epbuild": "warn"})
	if c, _ := rep.Check("install.epbuild"); !strings.Contains(c.Fix, quote.Shell(filepath.Join(prefix, "bin", "epbuild"))+" verify-install --prefix "+quote.Shell(prefix)) {
		t.Errorf("install.epbuild fix: %q", c.Fix)
	}
	// a reinstall replaces it: bin/ is not foreign
	mustInstall(t, arts.B, prefix, false)
	if _, err := os.Stat(filepath.Join(prefix, "bin", "epbuild")); err == nil {
		t.Fatal("reinstalled without an epbuild to copy, yet bin/epbuild is there")
	}
	// changed after install: the files check holds it against the receipt
	res, err = install.Install(context.Background(), install.InstallOptions{Artifact: arts.A, Prefix: prefix, Version: "test", Self: self})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(prefix, "bin", "epbuild"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, verify(self), map[string]string{"files.changed:bin/epbuild": "fail", "install.epbuild": "warn"})

	// a dynamic executable is not copied; install says why
	other := filepath.Join(t.TempDir(), "dyn")
	res, err = install.Install(context.Background(), install.InstallOptions{Artifact: arts.A, Prefix: other, Version: "test", Self: "/bin/sh"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) != 1 || !strings.Contains(res.Notes[0], "dynamically linked") {
		t.Errorf("notes: %q", res.Notes)
	}
	if _, err := os.Stat(filepath.Join(other, "bin", "epbuild")); err == nil {
		t.Error("a dynamic executable was copied")
	}
	wantStatus(t, mustVerify(t, other), map[string]string{"files": "pass", "install.epbuild": "skip", "env.paths": "pass"})
}

func mustSHA256(t *testing.T, p string) string {
	t.Helper()
	s, err := disk.FileSHA256(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFixLinePastes: the fix line verify-install prints for an install at a prefix made
// of what a shell reads as code, pasted into sh, runs epbuild install with the
// artifact's absolute path and that prefix, word for word.
func TestFixLinePastes(t *testing.T) {
	arts := artifacts(t)
	prefix := filepath.Join(t.TempDir(), "it's $(touch x) `id` \"q\" [a] *\nb;c")
	mustInstall(t, arts.A, prefix, false)
	if err := os.WriteFile(filepath.Join(prefix, "libdemo", "include", "demo.h"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := mustVerify(t, prefix)
	var line string
	for _, c := range rep.Checks {
		if l, ok := strings.CutPrefix(c.Fix, "reinstall the artifact: "); ok && c.Status == "fail" {
			line = l
			break
		}
	}
	if line == "" {
		t.Fatalf("no reinstall fix line in %+v", rep.Checks)
	}
	stub := t.TempDir()
	if err := os.WriteFile(filepath.Join(stub, "epbuild"), []byte("#!/bin/sh\nprintf '%s\\0' \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir = work
	cmd.Env = []string{"PATH=" + stub + ":/usr/bin:/bin"}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", line, err)
	}
	abs, _ := filepath.Abs(arts.A)
	if got, want := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00"), []string{"install", abs, "--prefix", prefix}; !slices.Equal(got, want) {
		t.Errorf("the fix line %q gave argv %q, want %q", line, got, want)
	}
	if ents, _ := os.ReadDir(work); len(ents) != 0 {
		t.Errorf("the fix line ran something: %v", ents)
	}
}
