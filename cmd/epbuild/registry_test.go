package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/epbuild/epbuild/builder/oci/ocitest"
)

// silentRegistry answers /v2/ and then nothing: every other request waits until the
// client gives up.
func silentRegistry(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			return
		}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return "oci://" + strings.TrimPrefix(srv.URL, "http://") + "/epbuild/cache"
}

// A registry that never answers: pull fails with exit 3 naming the deadline's flags,
// and recipe --cache-from warns and builds here, within EPBUILD_REGISTRY_TIMEOUT.
func TestRegistryThatNeverAnswers(t *testing.T) {
	repo := silentRegistry(t)
	env := nodeEnv("DOCKER_CONFIG", t.TempDir(), "EPBUILD_CACHE", warmCache(t), "EPBUILD_REGISTRY_TIMEOUT", "300ms")
	out := filepath.Join(t.TempDir(), "pulled")
	code, o, e := run(t, env, "pull", repo+":"+strings.Repeat("ab", 32), "-o", out, "--plain-http")
	if code != 3 || !strings.Contains(e, "did not answer in time") || !strings.Contains(e, "--registry-timeout") {
		t.Errorf("pull from a silent registry: exit %d\n%s\n%s", code, o, e)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("pull left %s", out)
	}
	built := t.TempDir()
	code, o, e = run(t, env, "recipe", "demo", "-o", built, "--cache-from", repo, "--plain-http")
	if code != 0 || !strings.Contains(e, "the build cache cannot be used") || !strings.Contains(e, "did not answer in time") {
		t.Errorf("recipe --cache-from a silent registry: exit %d\n%s\n%s", code, o, e)
	}
	if artifactName(listFiles(t, built)) == "" {
		t.Errorf("nothing was built: %v", listFiles(t, built))
	}
	code, _, e = run(t, nodeEnv("EPBUILD_REGISTRY_STALL", "soon"), "pull", repo+":x", "--plain-http")
	if code != 2 || !strings.Contains(e, "EPBUILD_REGISTRY_STALL") {
		t.Errorf("a bad EPBUILD_REGISTRY_STALL: exit %d\n%s", code, e)
	}
}

// An artifact in the build cache that no trusted key signed (pushed without --sign-key,
// as a forger with push access would) is not taken: a warning, and a build here;
// --allow-unsigned takes it, with a warning.
func TestCacheFromRefusesUnsigned(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	repo := "oci://" + reg.Addr + "/epbuild/cache"
	env := nodeEnv("DOCKER_CONFIG", t.TempDir(), "EPBUILD_CACHE", warmCache(t))
	if code, o, e := run(t, env, "recipe", "demo", "-o", t.TempDir(), "--cache-to", repo, "--plain-http"); code != 0 {
		t.Fatalf("build and push unsigned: exit %d\n%s\n%s", code, o, e)
	}
	key := filepath.Join(t.TempDir(), "ci.key")
	if code, o, e := run(t, env, "key", "new", key); code != 0 {
		t.Fatalf("key new: exit %d\n%s\n%s", code, o, e)
	}
	code, o, e := run(t, env, "recipe", "demo", "-o", t.TempDir(), "--cache-from", repo, "--plain-http", "--trust-key", key+".pub")
	if code != 0 || !strings.Contains(e, "not signed by a trusted key") || strings.Contains(o, "from "+repo) {
		t.Errorf("--cache-from of an unsigned artifact: exit %d\n%s\n%s", code, o, e)
	}
	code, o, e = run(t, env, "recipe", "demo", "-o", t.TempDir(), "--cache-from", repo, "--plain-http", "--trust-key", key+".pub", "--allow-unsigned")
	if code != 0 || !strings.Contains(e, "--allow-unsigned") || !strings.Contains(o, "from "+repo) {
		t.Errorf("--cache-from --allow-unsigned: exit %d\n%s\n%s", code, o, e)
	}
}
