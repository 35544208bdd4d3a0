package oci

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/benchcmp"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/oci/ocitest"
	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/recipes"
)

// bigArtifact writes an epbuild artifact of about size bytes (random file content, so
// that zstd stores it as it is: the artifact is as large as its tree) with a manifest of
// the demo plan, and its .sha256.
func bigArtifact(t *testing.T, size int64) string {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	const files = 16
	rng := rand.NewChaCha8([32]byte{42})
	buf := make([]byte, 1<<20)
	for i := range files {
		p := filepath.Join(tree, "nvshmem", "lib", fmt.Sprintf("libpart%02d.so", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		for n := int64(0); n < size/files; n += int64(len(buf)) {
			_, _ = rng.Read(buf)
			if _, err := f.Write(buf); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	entries, err := archive.HashTree(ctx, tree)
	if err != nil {
		t.Fatal(err)
	}
	res, err := plan.NewResolver(recipes.NewLibrary())
	if err != nil {
		t.Fatal(err)
	}
	p, err := res.Resolve("demo", nil)
	if err != nil {
		t.Fatal(err)
	}
	m := manifest.Manifest{Format: manifest.ManifestFormat, Epbuild: "bench", Recipe: p.Recipe, PlanKey: p.Key, Plan: p, SourceDateEpoch: 1700000000, Files: entries}
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(dir, "out", pack.ArtifactName(p)) // pull names files by the manifest
	if err := os.MkdirAll(filepath.Dir(art), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.PackFile(ctx, tree, art, archive.PackOptions{ModTime: time.Unix(m.SourceDateEpoch, 0),
		Extra: []archive.File{{Name: manifest.ManifestName, Mode: 0o644, Data: append(mb, '\n')}}}); err != nil {
		t.Fatal(err)
	}
	sum, err := hashFile(ctx, art)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(art+".sha256", []byte(sum+"  "+filepath.Base(art)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(tree); err != nil {
		t.Fatal(err)
	}
	return art
}

// orasVersion is the oras CLI the bench compares with, built when it is missing.
const orasVersion = "v1.3.6"

// findOras looks for the oras CLI on PATH and in GOBIN / GOPATH/bin, where
// `go install oras.land/oras/cmd/oras@v1.3.6` puts it.
func findOras() string {
	if p, err := exec.LookPath("oras"); err == nil {
		return p
	}
	for _, d := range []string{os.Getenv("GOBIN"), filepath.Join(os.Getenv("HOME"), "go", "bin")} {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil && d == "" {
			d = filepath.Join(strings.TrimSpace(string(out)), "bin")
		}
		if p := filepath.Join(d, "oras"); d != "" {
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
		}
	}
	return ""
}

// orasCLI is findOras, else oras built from its Go module into a directory of the test
// (`go install` with GOBIN there: `go build pkg@version` needs a module of its own). ""
// with the reason when it cannot be had (no go command, no module proxy): the bench
// then compares with curl alone.
func orasCLI(t *testing.T) (string, string) {
	if p := findOras(); p != "" {
		return p, ""
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "install", "oras.land/oras/cmd/oras@"+orasVersion)
	cmd.Dir = dir // outside any module
	cmd.Env = append(os.Environ(), "GOBIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Sprintf("oras is not installed and `go install oras.land/oras/cmd/oras@%s` failed (%v): %s", orasVersion, err, strings.TrimSpace(string(out)))
	}
	return filepath.Join(dir, "oras"), ""
}

// TestComparePushPull measures epbuild push and pull of a 1 GiB artifact against oras
// push and pull (built from its Go module when missing) and against curl of the blob,
// the same file to the same loopback registry, 5 rounds (EPBUILD_BENCH_ROUNDS), the
// order rotated each round: medians, minimums and CPU times (this process's for
// epbuild, the tool's for the anchor; the registry's on neither side). epbuild does
// more: push runs install's checks on the artifact beside the upload, pull runs them as
// the download arrives (every entry decompressed once and hashed against the manifest,
// nothing extracted); pull-fetch is pull's transfer alone, the same work as oras pull.
// Each comparison prints a line against oras (push, pull, pull-fetch) and one against
// curl (push-curl, pull-curl, pull-fetch-curl).
func TestComparePushPull(t *testing.T) {
	if os.Getenv("EPBUILD_BENCH") == "" {
		t.Skip("set EPBUILD_BENCH=1 to measure")
	}
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not on PATH: apt-get install curl")
	}
	reg := ocitest.Start(t, ocitest.Options{})
	oras, why := orasCLI(t)
	if oras == "" {
		t.Logf("no comparison with oras: %s", why)
		fmt.Printf("BENCH oras skipped: %s\n", why) // make bench shows BENCH lines only
	}
	art := bigArtifact(t, 1<<30)
	st, _ := os.Stat(art)
	orasName := "oras"
	if oras != "" {
		out, _ := exec.Command(oras, "version").Output()
		orasName = "oras " + strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "Version:"))
	}
	ctx := context.Background()
	c := newClient(t, Options{PlainHTTP: true})
	sum, _ := manifest.SumBeside(art)
	run := func(name string, args ...string) benchcmp.Sample {
		cmd := exec.Command(name, args...)
		cmd.Dir = filepath.Dir(art)
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		return benchcmp.Sample{Wall: time.Since(start), CPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	}
	orasPush := func(repo string) benchcmp.Sample {
		return run(oras, "push", "--plain-http", "--artifact-type", ArtifactType, reg.Addr+"/"+repo+":bench", filepath.Base(art)+":"+MediaTypeArtifact)
	}
	// the registry's two-step upload: a session, then the bytes with their digest
	curlPush := func(repo string) benchcmp.Sample {
		start := time.Now()
		post := exec.Command("curl", "-sf", "-X", "POST", "-D", "-", "-o", "/dev/null", "http://"+reg.Addr+"/v2/"+repo+"/blobs/uploads/")
		out, err := post.Output()
		if err != nil {
			t.Fatal(err)
		}
		first := benchcmp.Sample{Wall: time.Since(start), CPU: post.ProcessState.UserTime() + post.ProcessState.SystemTime()}
		var loc string
		for _, l := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "location") {
				loc = strings.TrimSpace(v)
			}
		}
		sep := "?"
		if strings.Contains(loc, "?") {
			sep = "&"
		}
		return first.Add(run("curl", "-sf", "-X", "PUT", "-H", "Content-Type: application/octet-stream", "-T", art, loc+sep+"digest=sha256:"+sum))
	}
	orasPull := func(repo, dir string) benchcmp.Sample {
		return run(oras, "pull", "--plain-http", "-o", dir, reg.Addr+"/"+repo+":bench")
	}
	curlPull := func(repo, dir string) benchcmp.Sample {
		return run("curl", "-sf", "-o", filepath.Join(dir, filepath.Base(art)), "http://"+reg.Addr+"/v2/"+repo+"/blobs/sha256:"+sum)
	}
	// fetchOnly is pull's transfer alone: the OCI manifest and the artifact, digests
	// verified as they stream, as oras pull does; no install checks
	fetchOnly := func(repo, planKey, dir string) benchcmp.Sample {
		ref := mustRef(t, "oci://"+reg.Addr+"/"+repo+":"+planKey)
		return benchcmp.Time(t, func() error {
			r, err := c.repository(ref)
			if err != nil {
				return err
			}
			f, err := c.fetchManifest(ctx, r, ref)
			if err != nil {
				return err
			}
			return c.fetchBlob(ctx, r, ref, f.layers[MediaTypeArtifact], filepath.Join(dir, f.name))
		})
	}
	var ePush, oPush, cPush, ePull, oPull, cPull, eFetch []benchcmp.Sample
	for i := range benchcmp.Rounds(5) {
		// fresh repositories each round: no tool finds the blob already there
		erepo, orepo, crepo := fmt.Sprintf("bench/epbuild-%d", i), fmt.Sprintf("bench/oras-%d", i), fmt.Sprintf("bench/curl-%d", i)
		var res *PushResult
		// the order rotates each round, as benchcmp's comparisons do: no side always runs
		// in another's wake (the writeback of the last push, a file just removed)
		pushes := []func(){
			func() { cPush = append(cPush, curlPush(crepo)) },
			func() {
				ePush = append(ePush, benchcmp.Time(t, func() (err error) {
					res, err = c.Push(ctx, art, mustRef(t, "oci://"+reg.Addr+"/"+erepo), PushOptions{})
					return err
				}))
			},
		}
		pulls := []func(dir string){
			func(dir string) { cPull = append(cPull, curlPull(crepo, dir)) },
			func(dir string) {
				ePull = append(ePull, benchcmp.Time(t, func() error {
					_, err := c.PullPlan(ctx, mustRef(t, "oci://"+reg.Addr+"/"+erepo), res.PlanKey, dir)
					return err
				}))
			},
			func(dir string) { eFetch = append(eFetch, fetchOnly(erepo, res.PlanKey, dir)) },
		}
		if oras != "" {
			pushes = append(pushes, func() { oPush = append(oPush, orasPush(orepo)) })
			pulls = append(pulls, func(dir string) { oPull = append(oPull, orasPull(orepo, dir)) })
		}
		for k := range pushes {
			pushes[(i+k)%len(pushes)]()
		}
		for k := range pulls {
			dir := t.TempDir()
			pulls[(i+k)%len(pulls)](dir)
			_ = os.RemoveAll(dir)
		}
	}
	type cmp struct {
		name, anchor string
		e, a         []benchcmp.Sample
	}
	cmps := []cmp{{"push-curl", "curl", ePush, cPush}, {"pull-curl", "curl", ePull, cPull}, {"pull-fetch-curl", "curl", eFetch, cPull}}
	if oras != "" {
		cmps = append([]cmp{{"push", orasName, ePush, oPush}, {"pull", orasName, ePull, oPull}, {"pull-fetch", orasName, eFetch, oPull}}, cmps...)
	}
	for _, m := range cmps {
		benchcmp.Result{Ours: m.e, Anchor: m.a}.Print(m.name, fmt.Sprintf("anchor=%q", m.anchor), fmt.Sprintf("bytes=%d", st.Size()))
	}
}
