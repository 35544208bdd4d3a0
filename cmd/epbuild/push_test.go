package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/oci/ocitest"
)

func TestPushPullCLI(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	cfg := t.TempDir() // an empty Docker config directory: no credentials
	env := nodeEnv("DOCKER_CONFIG", cfg)
	repo := "oci://" + reg.Addr + "/epbuild/demo"

	key := filepath.Join(t.TempDir(), "ci.key")
	if code, out, errs := run(t, env, "key", "new", key); code != 0 || !strings.Contains(out, key+".pub") {
		t.Fatalf("key new: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := run(t, env, "push", art, repo, "--plain-http", "--json", "--sign-key", key)
	if code != 0 {
		t.Fatalf("push: exit %d\n%s\n%s", code, out, errs)
	}
	var pushed struct {
		Ref     string `json:"ref"`
		PlanKey string `json:"plan_key"`
	}
	if err := json.Unmarshal([]byte(out), &pushed); err != nil || !strings.HasSuffix(pushed.Ref, ":"+pushed.PlanKey) {
		t.Fatalf("push --json: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "pulled")
	code, out, errs = run(t, env, "pull", pushed.Ref, "--plain-http", "-o", dir, "--trust-key", key+".pub")
	if code != 0 || !strings.Contains(out, "artifact  "+filepath.Join(dir, filepath.Base(art))) {
		t.Fatalf("pull: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs = run(t, env, "install", filepath.Join(dir, filepath.Base(art)), "--prefix", filepath.Join(t.TempDir(), "demo"))
	if code != 0 {
		t.Errorf("install of the pulled artifact: exit %d\n%s\n%s", code, out, errs)
	}

	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"push", art, "oci://registry.example.com/epbuild/demo", "--plain-http"}, 2, "only allowed for a registry on this machine"},
		{[]string{"push", art, reg.Addr + "/epbuild/demo"}, 2, "want oci://REGISTRY/REPO"},
		{[]string{"pull", repo, "--plain-http"}, 2, "pull needs a tag"},
		{[]string{"pull", repo + ":nosuchtag", "--plain-http", "-o", t.TempDir()}, 2, "not in the registry"},
		{[]string{"pull", pushed.Ref, "--plain-http", "-o", t.TempDir()}, 2, "not signed by a trusted key"},
		{[]string{"pull", pushed.Ref, "--plain-http", "-o", t.TempDir(), "--trust-key", art}, 2, "no PEM PUBLIC KEY"},
		{[]string{"key", "new", key}, 2, "exists"},
		{[]string{"push", filepath.Join(t.TempDir(), "absent.tar.zst"), repo, "--plain-http"}, 2, "absent.tar.zst"},
	} {
		code, out, errs := run(t, env, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.says) {
			t.Errorf("%q: exit %d, want %d saying %q\n%s\n%s", tc.args, code, tc.code, tc.says, out, errs)
		}
	}
	if code, _, errs := run(t, nodeEnv("DOCKER_CONFIG", cfg, "SOURCE_DATE_EPOCH", "yesterday"), "push", art, repo, "--plain-http"); code != 2 || !strings.Contains(errs, "SOURCE_DATE_EPOCH") {
		t.Errorf("push with a malformed SOURCE_DATE_EPOCH: exit %d\n%s", code, errs)
	}
	if err := os.WriteFile(filepath.Join(cfg, "config.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, env, "push", art, repo, "--plain-http"); code != 2 || !strings.Contains(errs, filepath.Join(cfg, "config.json")) {
		t.Errorf("push with a malformed Docker config: exit %d\n%s", code, errs)
	}
	if err := os.Remove(filepath.Join(cfg, "config.json")); err != nil {
		t.Fatal(err)
	}

	reg.Stop()
	for _, args := range [][]string{{"push", art, repo, "--plain-http"}, {"pull", pushed.Ref, "--plain-http", "-o", t.TempDir()}} {
		code, out, errs := run(t, env, args...)
		if code != 3 || !strings.Contains(errs, "registry "+reg.Addr+" is not reachable") {
			t.Errorf("%q against a stopped registry: exit %d\n%s\n%s", args, code, out, errs)
		}
	}
}
