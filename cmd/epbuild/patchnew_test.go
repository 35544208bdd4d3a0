package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/epbuild/epbuild/patches"
)

// TestFIFOSetYAMLEndsOnSIGTERM: epbuild given a set.yaml that is a FIFO neither waits for
// a writer nor stays blocked reading one: it refuses the file (exit 2), and a SIGTERM
// sent while a writer holds the FIFO open (where the read would block) ends it.
func TestFIFOSetYAMLEndsOnSIGTERM(t *testing.T) {
	recipe, _ := siteRecipe(t, "site-fix")
	y := filepath.Join(filepath.Dir(recipe), "patches", "site-fix", "set.yaml")
	if err := os.Remove(y); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(y, 0o644); err != nil {
		t.Fatal(err)
	}
	c := epbuildProcess(t, nil, "show", recipe)
	var errb syncBuffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	var err error
	signalled := false
wait:
	for {
		select {
		case err = <-done:
			break wait
		case <-time.After(5 * time.Millisecond):
		}
		if signalled {
			continue
		}
		// a reader has the FIFO open: hold the write end, so that a read blocks, and stop it
		w, werr := os.OpenFile(y, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if werr != nil {
			continue
		}
		defer w.Close()
		if err := c.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		signalled = true
		select {
		case err = <-done:
			break wait
		case <-time.After(time.Minute):
			_ = c.Process.Kill()
			t.Fatalf("epbuild still runs a minute after SIGTERM, blocked reading %s\n%s", y, errb.String())
		}
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("exit: %v\n%s", err, errb.String())
	}
	switch ee.ExitCode() {
	case exitBadInput:
		if !strings.Contains(errb.String(), y+" is a named pipe (FIFO), not a regular file") {
			t.Errorf("stderr:\n%s", errb.String())
		}
	case exitInterrupted:
	default:
		t.Errorf("exit %d, want 2 (or 130 after SIGTERM)\n%s", ee.ExitCode(), errb.String())
	}
}

// TestPatchNew: epbuild patch new on a commit range of a git work tree writes a set the
// loader reads, with the effects it prints; a second run refuses the directory, and a
// missing --component or --from is bad input.
func TestPatchNew(t *testing.T) {
	repo := t.TempDir()
	gitRun := func(args ...string) string {
		t.Helper()
		c := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		c.Dir = repo
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	write := func(body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(repo, "pydemo"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, "pydemo", "channel.py"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitRun("init", "-q")
	write("import os\n\n\nclass Channel:\n    def __init__(self):\n        self.index = 0\n")
	gitRun("add", "-A")
	gitRun("commit", "-qm", "base")
	base := gitRun("rev-parse", "HEAD")
	write("import os\n\n\nclass Channel:\n    def __init__(self):\n        self.index = 0\n        self._setup_site()\n\n    def _setup_site(self):\n        self.site = os.getenv(\"DEMO_SITE\")\n")
	gitRun("commit", "-qam", "read the site")

	out := t.TempDir()
	dir := filepath.Join(out, "site-fix")
	code, stdout, errs := run(t, nil, "patch", "new", dir, "--component", "pydemo", "--repo", repo, "--from", base+"..HEAD")
	if code != 0 {
		t.Fatalf("patch new: exit %d\n%s", code, errs)
	}
	for _, want := range []string{
		"wrote " + dir + ": 1 patch files, 3 suggested effects",
		"patch  0001-read-the-site",
		"effect python-call: Channel.__init__ calls _setup_site in pydemo/channel.py",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	c, err := patches.LoadFor(patches.Local{Dirs: []string{out}}, "site-fix")
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := c.Get("site-fix"); !ok || len(s.Effects) != 3 || len(s.Patches) != 1 {
		t.Fatalf("the set written: %+v", s)
	}
	if code, _, errs := run(t, nil, "patch", "new", dir, "--component", "pydemo", "--repo", repo, "--from", base+"..HEAD"); code != exitBadInput || !strings.Contains(errs, dir+" exists") {
		t.Errorf("over an existing set: exit %d\n%s", code, errs)
	}
	if code, _, _ := run(t, nil, "patch", "new", filepath.Join(out, "x"), "--repo", repo, "--from", base+"..HEAD"); code != exitBadInput {
		t.Errorf("without --component: exit %d", code)
	}
	if code, _, _ := run(t, nil, "patch", "new", filepath.Join(out, "x"), "--component", "pydemo"); code != exitBadInput {
		t.Errorf("without --from: exit %d", code)
	}
	if des, _ := os.ReadDir(out); len(des) != 1 {
		t.Errorf("left in the output directory: %v", des)
	}
}

// TestSetWithoutEffectsWarned: a command that resolves a recipe warns of a local set
// stating no effects, naming its set.yaml.
func TestSetWithoutEffectsWarned(t *testing.T) {
	recipe, _ := siteRecipe(t, "site-fix")
	y := filepath.Join(filepath.Dir(recipe), "patches", "site-fix", "set.yaml")
	b, err := os.ReadFile(y)
	if err != nil {
		t.Fatal(err)
	}
	body, _, _ := strings.Cut(string(b), "effects:\n")
	if err := os.WriteFile(y, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, errs := run(t, map[string]string{"EPBUILD_CACHE": t.TempDir()}, "recipe", recipe, "--plan")
	if !strings.Contains(errs, y+" states no effects") {
		t.Errorf("no warning naming %s:\n%s", y, errs)
	}
}
