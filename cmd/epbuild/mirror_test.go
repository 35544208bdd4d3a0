package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// gitRepo makes a repository with one commit under dir and returns its file:// URL and
// the commit.
func gitRepo(t *testing.T, dir, name string) (url, commit string) {
	t.Helper()
	repo := filepath.Join(dir, name)
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@x", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@x",
			"GIT_AUTHOR_DATE=2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2025-01-01T00:00:00Z")
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	git("init", "-q")
	git("config", "uploadpack.allowReachableSHA1InWant", "true")
	if err := os.WriteFile(filepath.Join(repo, "README"), []byte(name+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "README")
	git("commit", "-q", "-m", name)
	return "file://" + repo, git("rev-parse", "HEAD")
}

const mirrorRecipe = `name: %NAME%
cluster: a test
description: sources for a mirror test
components:
%COMPONENTS%  - name: nvshmem
    source:
      python:
        package: nvidia-nvshmem-cu12
        version: ">=3.3.9"
`

func gitComponent(name, url, commit string) string {
	return "  - name: " + name + "\n    version: 1.0.0\n    source:\n      git:\n        url: " + url + "\n        commit: " + commit + "\n"
}

func writeRecipe(t *testing.T, dir, name, components string) {
	t.Helper()
	body := strings.NewReplacer("%NAME%", name, "%COMPONENTS%", components).Replace(mirrorRecipe)
	if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMirrorWholeOrNothing: a mirror names the Python packages its recipes take from
// the build host's environment, with the pip commands; a mirror run that fails leaves no
// mirror where there was none, and takes back what it added to an existing one.
func TestMirrorWholeOrNothing(t *testing.T) {
	srv, recipes := t.TempDir(), t.TempDir()
	urlA, cA := gitRepo(t, srv, "a")
	urlB, cB := gitRepo(t, srv, "b")
	writeRecipe(t, recipes, "good", gitComponent("a", urlA, cA))
	// b mirrors, then c's repository is not there: the run fails after writing b
	writeRecipe(t, recipes, "broken", gitComponent("b", urlB, cB)+gitComponent("c", "file://"+filepath.Join(srv, "gone"), strings.Repeat("1", 40)))
	env := nodeEnv("EPBUILD_CACHE", filepath.Join(t.TempDir(), "cache"))
	parent := t.TempDir()
	mirror := filepath.Join(parent, "mirror")

	code, out, errs := run(t, env, "--recipe-dir", recipes, "mirror", "good", mirror)
	if code != 0 {
		t.Fatalf("mirror: exit %d\n%s%s", code, out, errs)
	}
	req, err := os.ReadFile(filepath.Join(mirror, "python", "requirements.txt"))
	if err != nil || !strings.Contains(string(req), "\nnvidia-nvshmem-cu12>=3.3.9  # good/nvshmem\n") {
		t.Fatalf("python/requirements.txt: %v\n%s", err, req)
	}
	want := "python3 -m pip download --no-deps --only-binary=:all: --dest " + filepath.Join(mirror, "python") + " -r " + filepath.Join(mirror, "python", "requirements.txt")
	if !strings.Contains(out, want) || !strings.Contains(out, "nvidia-nvshmem-cu12>=3.3.9") {
		t.Errorf("mirror does not name the Python packages with the command:\n%s", out)
	}
	repoA := filepath.Join(mirror, "file", strings.TrimPrefix(urlA, "file:///")+".git")
	if _, err := os.Stat(filepath.Join(repoA, "HEAD")); err != nil {
		t.Fatalf("no repository for a in the mirror: %v", err)
	}
	index := func() []string {
		var idx struct {
			Recipes []struct {
				Recipe string `json:"recipe"`
			} `json:"recipes"`
		}
		b, err := os.ReadFile(filepath.Join(mirror, "epbuild-mirror.json"))
		if err != nil || json.Unmarshal(b, &idx) != nil {
			t.Fatalf("index: %v\n%s", err, b)
		}
		var names []string
		for _, r := range idx.Recipes {
			names = append(names, r.Recipe)
		}
		return names
	}
	if got := index(); !slices.Equal(got, []string{"good"}) {
		t.Errorf("index: %v", got)
	}
	// --json carries the commands and the packages
	code, out, _ = run(t, env, "--recipe-dir", recipes, "mirror", "good", mirror, "--json")
	var rep struct {
		PipDownload string `json:"pip_download"`
		Python      []struct {
			Requirement string `json:"requirement"`
		} `json:"python"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.PipDownload != want || len(rep.Python) != 1 || rep.Python[0].Requirement != "nvidia-nvshmem-cu12>=3.3.9" {
		t.Errorf("mirror --json: exit %d\n%s", code, out)
	}

	// a failed run into a new directory: nothing there, nothing beside it
	fresh := filepath.Join(parent, "fresh")
	if code, _, errs := run(t, env, "--recipe-dir", recipes, "mirror", "broken", fresh); code == 0 || !strings.Contains(errs, "no mirror was written") {
		t.Fatalf("a broken mirror: exit %d %s", code, errs)
	}
	if _, err := os.Stat(fresh); !os.IsNotExist(err) {
		t.Errorf("a failed mirror left %s", fresh)
	}
	ents, _ := os.ReadDir(parent)
	for _, e := range ents {
		if e.Name() != "mirror" && !strings.HasSuffix(e.Name(), "-lock") {
			t.Errorf("a failed mirror left %s beside it", e.Name())
		}
	}
	// a failed run into the existing mirror: b, which it wrote, is gone again
	if code, _, errs := run(t, env, "--recipe-dir", recipes, "mirror", "broken", mirror); code == 0 || !strings.Contains(errs, "nothing of this run was kept") {
		t.Fatalf("a broken mirror into an existing one: exit %d %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(mirror, "file", strings.TrimPrefix(urlB, "file:///")+".git")); !os.IsNotExist(err) {
		t.Errorf("the failed run left b's repository in the mirror: %v", err)
	}
	if _, err := os.Stat(filepath.Join(repoA, "HEAD")); err != nil || !slices.Equal(index(), []string{"good"}) {
		t.Errorf("the failed run changed what the mirror held: %v %v", err, index())
	}
	// and the mirror serves: fetch with a fresh cache from it alone
	env2 := nodeEnv("EPBUILD_CACHE", filepath.Join(t.TempDir(), "cache"))
	if err := os.Rename(filepath.Join(srv, "a"), filepath.Join(srv, "a-away")); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, env2, "--recipe-dir", recipes, "fetch", "good", "--mirror", mirror); code != 0 {
		t.Errorf("fetch from the mirror alone: exit %d\n%s%s", code, out, errs)
	}
}
