package main

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/epbuild/epbuild/builder/oci/ocitest"
)

// Two machines, one registry: the first builds and pushes (--cache-to), the second, with
// a cache of its own, takes the artifact (--cache-from) and builds nothing, and its -o
// holds what the first one's does, byte for byte.
func TestSharedBuildCacheTwoMachines(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	repo := "oci://" + reg.Addr + "/epbuild/cache"
	cfg := t.TempDir()     // a Docker config directory without credentials
	cacheA := warmCache(t) // machine A has built the demo before
	a := nodeEnv("DOCKER_CONFIG", cfg, "EPBUILD_CACHE", cacheA)
	outA := t.TempDir()
	key := filepath.Join(t.TempDir(), "ci.key")
	if code, out, errs := run(t, a, "key", "new", key); code != 0 {
		t.Fatalf("key new: exit %d\n%s\n%s", code, out, errs)
	}
	code, out, errs := run(t, a, "recipe", "demo", "-o", outA, "--cache-from", repo, "--cache-to", repo, "--plain-http", "--sign-key", key)
	if code != 0 || !strings.Contains(errs, "not in the build cache") || !strings.Contains(out, "pushed   "+repo+":") || strings.Contains(out, "from "+repo) {
		t.Fatalf("machine A: exit %d\n%s\n%s", code, out, errs)
	}

	cacheB := filepath.Join(t.TempDir(), "cache")
	b := nodeEnv("DOCKER_CONFIG", cfg, "EPBUILD_CACHE", cacheB)
	outB := t.TempDir()
	code, out, errs = run(t, b, "recipe", "demo", "-o", outB, "--cache-from", repo, "--plain-http", "--json", "--trust-key", key+".pub")
	if code != 0 {
		t.Fatalf("machine B: exit %d\n%s\n%s", code, out, errs)
	}
	var res struct {
		Stages []struct {
			Stage  string `json:"stage"`
			Cached bool   `json:"cached"`
			From   string `json:"from"`
		} `json:"stages"`
		Artifact string   `json:"artifact"`
		SBOM     string   `json:"sbom"`
		Wheels   []string `json:"wheels"`
		Cache    struct {
			Hit     bool   `json:"hit"`
			Fetched string `json:"fetched"`
		} `json:"cache"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("machine B --json: %v\n%s", err, out)
	}
	var stages []string
	for _, s := range res.Stages {
		stages = append(stages, s.Stage)
		if s.From != repo || !s.Cached {
			t.Errorf("machine B: stage %s: from %q, cached %v; want every stage from %s", s.Stage, s.From, s.Cached, repo)
		}
	}
	if !slices.Equal(stages, []string{"patch", "build", "check", "patch", "build", "check", "package"}) || !res.Cache.Hit || !strings.HasPrefix(res.Cache.Fetched, repo+":") {
		t.Errorf("machine B: stages %v, cache %+v", stages, res.Cache)
	}
	// no stage ran, nothing was fetched or probed: machine B's cache was never made
	if _, err := os.Stat(cacheB); !os.IsNotExist(err) || strings.Contains(errs, "running") {
		t.Errorf("machine B built something: its cache %s (%v)\n%s", cacheB, err, errs)
	}
	if wa, wb := listFiles(t, outA), listFiles(t, outB); !slices.Equal(wa, wb) || len(wa) != 4 {
		t.Errorf("-o of machine A %v, of machine B %v: want the same files (artifact, .sha256, SBOM, wheel)", wa, wb)
	} else {
		for _, f := range wa {
			if !bytes.Equal(mustReadFile(t, filepath.Join(outA, f)), mustReadFile(t, filepath.Join(outB, f))) {
				t.Errorf("%s differs between the machines", f)
			}
		}
	}
	if res.Artifact != filepath.Join(outB, filepath.Base(res.Artifact)) || res.SBOM != res.Artifact+".cdx.json" || len(res.Wheels) != 1 {
		t.Errorf("machine B's result names %s, %s, %v", res.Artifact, res.SBOM, res.Wheels)
	}
	// the text table says where each stage came from
	code, out, errs = run(t, b, "recipe", "demo", "-o", outB, "--cache-from", repo, "--plain-http", "--trust-key", key+".pub")
	if code != 0 || strings.Count(out, "from "+repo) != 7 || !strings.Contains(out, "from     "+repo+":") {
		t.Errorf("machine B, text: exit %d\n%s\n%s", code, out, errs)
	}
	if code, out, errs := run(t, b, "install", res.Artifact, "--prefix", filepath.Join(t.TempDir(), "demo")); code != 0 {
		t.Errorf("install what machine B took: exit %d\n%s\n%s", code, out, errs)
	}
}

// The cache never fails a build: a registry that is down, one that refuses the
// credentials and one whose copy was changed are each a warning naming the reason, and
// the build runs here (machine A's store: nothing to redo) with the exit code of a build.
func TestSharedBuildCacheFallsBack(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	repo := "oci://" + reg.Addr + "/epbuild/cache"
	env := nodeEnv("DOCKER_CONFIG", t.TempDir(), "EPBUILD_CACHE", warmCache(t))
	out := t.TempDir()
	if code, o, e := run(t, env, "recipe", "demo", "-o", out, "--cache-to", repo, "--plain-http"); code != 0 {
		t.Fatalf("build and push: exit %d\n%s\n%s", code, o, e)
	}
	built := listFiles(t, out)

	// a changed copy in the registry: refused, and built here
	art := strings.Fields(string(mustReadFile(t, filepath.Join(out, artifactName(built)+".sha256"))))[0]
	blob := reg.Blob("sha256:" + art)
	good := mustReadFile(t, blob)
	bad := bytes.Clone(good)
	bad[len(bad)/2] ^= 1
	if err := os.WriteFile(blob, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	code, o, e := run(t, env, "recipe", "demo", "-o", out, "--allow-unsigned", "--cache-from", repo, "--plain-http")
	if code != 0 || !strings.Contains(e, "the build cache cannot be used") || !strings.Contains(e, "digest") || strings.Contains(o, "from "+repo) {
		t.Errorf("a changed copy: exit %d\n%s\n%s", code, o, e)
	}
	if err := os.WriteFile(blob, good, 0o644); err != nil {
		t.Fatal(err)
	}

	// a registry that asks for credentials the Docker config does not have
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	locked := ocitest.Start(t, ocitest.Options{Htpasswd: "ci:" + string(hash) + "\n"})
	lrepo := "oci://" + locked.Addr + "/epbuild/cache"
	code, o, e = run(t, env, "recipe", "demo", "-o", out, "--allow-unsigned", "--cache-from", lrepo, "--cache-to", lrepo, "--plain-http")
	if code != 0 || strings.Count(e, "refused access") != 2 || !strings.Contains(e, "--cache-to failed, the build did not") {
		t.Errorf("a registry refusing access: exit %d\n%s\n%s", code, o, e)
	}

	// an artifact pushed without the wheels its manifest lists: a build here writes them
	bare := t.TempDir()
	for _, f := range built {
		if strings.HasSuffix(f, ".tar.zst") || strings.HasSuffix(f, ".tar.zst.sha256") {
			if err := os.WriteFile(filepath.Join(bare, f), mustReadFile(t, filepath.Join(out, f)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	brepo := "oci://" + reg.Addr + "/epbuild/bare"
	if code, o, e := run(t, env, "push", filepath.Join(bare, artifactName(built)), brepo, "--plain-http"); code != 0 {
		t.Fatalf("push without the wheels: exit %d\n%s\n%s", code, o, e)
	}
	code, o, e = run(t, env, "recipe", "demo", "-o", out, "--allow-unsigned", "--cache-from", brepo, "--plain-http")
	if code != 0 || !strings.Contains(e, "carries 0 of the 1 wheels its manifest lists") || strings.Contains(o, "from "+brepo) {
		t.Errorf("a copy without its wheels: exit %d\n%s\n%s", code, o, e)
	}
	// another SOURCE_DATE_EPOCH, and --force: built here
	sde := nodeEnv("DOCKER_CONFIG", env["DOCKER_CONFIG"], "EPBUILD_CACHE", env["EPBUILD_CACHE"], "SOURCE_DATE_EPOCH", "1700000000")
	code, o, e = run(t, sde, "recipe", "demo", "-o", t.TempDir(), "--allow-unsigned", "--cache-from", repo, "--plain-http")
	if code != 0 || !strings.Contains(e, "this run asks for 1700000000") || strings.Contains(o, "from "+repo) {
		t.Errorf("another SOURCE_DATE_EPOCH: exit %d\n%s\n%s", code, o, e)
	}
	code, o, e = run(t, env, "recipe", "demo", "-o", out, "--allow-unsigned", "--cache-from", repo, "--plain-http", "--force=package")
	if code != 0 || !strings.Contains(e, "--force: building here") || strings.Contains(o, "from "+repo) {
		t.Errorf("--force: exit %d\n%s\n%s", code, o, e)
	}

	// a rebuild check that agrees pushes
	rrepo := "oci://" + reg.Addr + "/epbuild/checked"
	code, o, e = run(t, env, "recipe", "demo", "-o", t.TempDir(), "--rebuild-check", "--cache-to", rrepo, "--plain-http")
	if code != 0 || !strings.Contains(o, "pushed   "+rrepo+":") {
		t.Errorf("--rebuild-check --cache-to: exit %d\n%s\n%s", code, o, e)
	}

	// a registry that is down: warnings, a build here, exit 0
	reg.Stop()
	code, o, e = run(t, env, "recipe", "demo", "-o", out, "--allow-unsigned", "--cache-from", repo, "--cache-to", repo, "--plain-http", "--json")
	if code != 0 || strings.Count(e, "registry "+reg.Addr+" is not reachable") != 2 {
		t.Errorf("a registry that is down: exit %d\n%s\n%s", code, o, e)
	}
	var res struct {
		Cache struct {
			Hit      bool     `json:"hit"`
			Stored   string   `json:"stored"`
			Warnings []string `json:"warnings"`
		} `json:"cache"`
	}
	if err := json.Unmarshal([]byte(o), &res); err != nil || res.Cache.Hit || res.Cache.Stored != "" || len(res.Cache.Warnings) != 2 {
		t.Errorf("a registry that is down, --json: %+v (%v)\n%s", res.Cache, err, o)
	}
	if got := listFiles(t, out); !slices.Equal(got, built) {
		t.Errorf("-o holds %v, want %v", got, built)
	}

	// references that cannot be a build cache: bad input, before any work
	for _, args := range [][]string{
		{"--allow-unsigned", "--cache-from", repo + ":latest"},
		{"--cache-to", "oci://registry.example.com/epbuild/cache", "--plain-http"},
		{"--allow-unsigned", "--cache-from", "registry.example.com/epbuild/cache"},
		{"--allow-unsigned", "--cache-from", repo, "--rebuild-check"},
	} {
		code, o, e := run(t, env, append([]string{"recipe", "demo", "-o", t.TempDir()}, args...)...)
		if code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s\n%s", args, code, o, e)
		}
	}
}

// artifactName is the .tar.zst among files.
func artifactName(files []string) string {
	for _, f := range files {
		if strings.HasSuffix(f, ".tar.zst") {
			return f
		}
	}
	return ""
}

// listFiles lists the files under dir (not hidden ones), as slash paths.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir && strings.HasPrefix(d.Name(), ".") {
			t.Errorf("left behind: %s", p)
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
