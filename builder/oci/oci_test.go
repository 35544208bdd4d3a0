package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/crypto/bcrypt"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/epbuild/epbuild/builder/install"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/oci/ocitest"
)

func newClient(t *testing.T, opts Options) *Client {
	t.Helper()
	if opts.Credential == nil && opts.DockerConfig == "" {
		opts.Credential = auth.StaticCredential("none", auth.EmptyCredential)
	}
	if opts.Trust == nil {
		opts.AllowUnsigned = true // the tests of signatures trust keys
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func mustRef(t *testing.T, s string) Ref {
	t.Helper()
	r, err := ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// manifestOf reads the OCI manifest under tag straight from the registry's HTTP API.
func manifestOf(t *testing.T, reg *ocitest.Registry, repo, tag string) (ocispec.Manifest, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/v2/%s/manifests/%s", reg.Addr, repo, tag), nil)
	req.Header.Set("Accept", ocispec.MediaTypeImageManifest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET manifest %s:%s: %s\n%s", repo, tag, resp.Status, b)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m, digest.FromBytes(b).String()
}

func exitCode(err error) int {
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return 1
}

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in, reg, repo, reference string
		loopback                 bool
	}{
		{"oci://ghcr.io/acme/deepep", "ghcr.io", "acme/deepep", "", false},
		{"oci://127.0.0.1:5000/cache:abc", "127.0.0.1:5000", "cache", "abc", true},
		{"oci://localhost:5000/a/b@sha256:" + strings.Repeat("a", 64), "localhost:5000", "a/b", "sha256:" + strings.Repeat("a", 64), true},
		{"oci://[::1]:5000/cache", "[::1]:5000", "cache", "", true},
		{"oci://10.0.0.1:5000/cache", "10.0.0.1:5000", "cache", "", false},
	} {
		r, err := ParseRef(tc.in)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if r.Registry != tc.reg || r.Repository != tc.repo || r.Reference != tc.reference || r.Loopback() != tc.loopback {
			t.Errorf("%s: %+v loopback %v", tc.in, r, r.Loopback())
		}
		if r.String() != tc.in {
			t.Errorf("%s: String() = %s", tc.in, r.String())
		}
	}
	for _, bad := range []string{"ghcr.io/acme/deepep", "oci://ghcr.io", "oci://ghcr.io/Acme/UPPER", "oci://ghcr.io/a:b:c", "https://ghcr.io/a"} {
		if _, err := ParseRef(bad); err == nil || exitCode(err) != 2 {
			t.Errorf("%s: err %v, exit %d, want a bad reference (exit 2)", bad, err, exitCode(err))
		}
	}
}

func TestPlainHTTPOnlyForLoopback(t *testing.T) {
	c := newClient(t, Options{PlainHTTP: true})
	ctx := context.Background()
	ref := mustRef(t, "oci://registry.example.com/team/cache")
	_, err := c.Lookup(ctx, ref, strings.Repeat("a", 64))
	var pe *PlainHTTPError
	if !errors.As(err, &pe) || exitCode(err) != 2 || !strings.Contains(err.Error(), "registry.example.com") {
		t.Errorf("plain HTTP to a remote registry: %v (exit %d)", err, exitCode(err))
	}
	if _, err := c.Pull(ctx, ref.WithTag("x"), t.TempDir()); !errors.As(err, &pe) {
		t.Errorf("pull: %v", err)
	}
}

func TestPushPullRoundTrip(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	// the builder's version travels in the SBOM (metadata property epbuild:built-by), not
	// in the artifact's bytes: push takes the annotation from there
	sbom := []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","version":1,"metadata":{"properties":[{"name":"epbuild:built-by","value":"test"}]},"components":[]}` + "\n")
	if err := os.WriteFile(art+".cdx.json", sbom, 0o644); err != nil {
		t.Fatal(err)
	}
	m, raw, sum, err := manifest.CheckArtifact(context.Background(), art)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := newClient(t, Options{PlainHTTP: true})
	ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/cache")

	if found, err := c.Lookup(ctx, ref, m.PlanKey); err != nil || found {
		t.Fatalf("lookup before the push: %v, %v", found, err)
	}
	res, err := c.Push(ctx, art, ref, PushOptions{})
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	if res.PlanKey != m.PlanKey || !slices.Equal(res.Tags, []string{m.PlanKey}) || res.Ref != ref.WithTag(m.PlanKey).String() {
		t.Errorf("push result %+v", res)
	}
	om, dg := manifestOf(t, reg, "epbuild/cache", m.PlanKey)
	if dg != res.Digest || om.ArtifactType != ArtifactType || om.Config.MediaType != ocispec.MediaTypeEmptyJSON {
		t.Errorf("OCI manifest %s (pushed %s): artifact type %q, config %q", dg, res.Digest, om.ArtifactType, om.Config.MediaType)
	}
	name := filepath.Base(art)
	var titles []string
	for _, l := range om.Layers {
		titles = append(titles, l.MediaType+" "+l.Annotations[ocispec.AnnotationTitle])
	}
	wantTitles := []string{MediaTypeArtifact + " " + name, MediaTypeManifest + " " + name + ".manifest.json", MediaTypeSBOM + " " + name + ".cdx.json", MediaTypeSHA256 + " " + name + ".sha256"}
	if !slices.Equal(titles, wantTitles) {
		t.Errorf("layers %q, want %q", titles, wantTitles)
	}
	if om.Layers[0].Digest.Encoded() != sum {
		t.Errorf("artifact layer %s, sha256 %s", om.Layers[0].Digest, sum)
	}
	a := om.Annotations
	if a[AnnotationRecipe] != "demo" || a[AnnotationPlanKey] != m.PlanKey || a[AnnotationArtifact] != name || a[AnnotationEpbuild] != "test" {
		t.Errorf("annotations %v", a)
	}
	var pins []Pin
	if err := json.Unmarshal([]byte(a[AnnotationPins]), &pins); err != nil || len(pins) != 2 || pins[0].Component != "libdemo" || len(pins[0].Commit) != 40 ||
		!slices.Equal(pins[1].PatchSets, []string{"demo-py-lanes"}) {
		t.Errorf("pins %s (%v)", a[AnnotationPins], err)
	}
	if want := fmt.Sprintf("%d", m.SourceDateEpoch); a[ocispec.AnnotationCreated] != res.Created || res.Created == "" || want == "0" {
		t.Errorf("created %q (result %q), artifact epoch %s", a[ocispec.AnnotationCreated], res.Created, want)
	}

	// the same artifact again: nothing uploaded, the same OCI manifest
	again, err := c.Push(ctx, art, ref.WithTag("latest"), PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != res.Digest || !slices.Equal(again.Tags, []string{m.PlanKey, "latest"}) {
		t.Errorf("second push: digest %s (first %s), tags %v", again.Digest, res.Digest, again.Tags)
	}
	for _, l := range again.Layers {
		if !l.Existed {
			t.Errorf("second push uploaded %s again", l.Title)
		}
	}
	// SOURCE_DATE_EPOCH decides the created time, and only it
	sde := int64(1700000000)
	r1, err := c.Push(ctx, art, ref, PushOptions{SourceDateEpoch: &sde})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Push(ctx, art, ref, PushOptions{SourceDateEpoch: &sde})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Created != "2023-11-14T22:13:20Z" || r1.Digest != r2.Digest || r1.Digest == res.Digest {
		t.Errorf("with SOURCE_DATE_EPOCH: created %s, digests %s %s (without: %s)", r1.Created, r1.Digest, r2.Digest, res.Digest)
	}
	// restore the artifact's own epoch under the plan key for the pull below
	if _, err := c.Push(ctx, art, ref, PushOptions{}); err != nil {
		t.Fatal(err)
	}

	if found, err := c.Lookup(ctx, ref, m.PlanKey); err != nil || !found {
		t.Fatalf("lookup after the push: %v, %v", found, err)
	}
	if found, err := c.Lookup(ctx, ref, strings.Repeat("0", 64)); err != nil || found {
		t.Errorf("lookup of another plan: %v, %v", found, err)
	}

	out := filepath.Join(t.TempDir(), "pulled")
	pr, err := c.PullPlan(ctx, ref, m.PlanKey, out)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if pr.Artifact != filepath.Join(out, name) || pr.SHA256 != sum || pr.Digest != res.Digest || pr.PlanKey != m.PlanKey {
		t.Errorf("pull result %+v", pr)
	}
	for suffix, want := range map[string][]byte{"": mustRead(t, art), ".sha256": mustRead(t, art+".sha256"), ".cdx.json": sbom, ".manifest.json": raw} {
		if got := mustRead(t, filepath.Join(out, name+suffix)); !bytes.Equal(got, want) {
			t.Errorf("pulled %s differs from what was pushed", name+suffix)
		}
	}
	if ents, _ := os.ReadDir(out); len(ents) != 4 {
		t.Errorf("pull left %d entries in %s, want the 4 files", len(ents), out)
	}
	// what was pulled installs
	if _, err := install.Install(ctx, install.InstallOptions{Artifact: pr.Artifact, Prefix: filepath.Join(t.TempDir(), "demo"), Version: "test"}); err != nil {
		t.Errorf("install the pulled artifact: %v", err)
	}
	// by digest too
	if _, err := c.Pull(ctx, ref.WithTag(res.Digest), filepath.Join(t.TempDir(), "by-digest")); err != nil {
		t.Errorf("pull by digest: %v", err)
	}
	if _, err := c.Pull(ctx, ref.WithTag("absent"), t.TempDir()); exitCode(err) != 2 || !errors.As(err, new(*NotFoundError)) {
		t.Errorf("pull of an absent tag: %v (exit %d)", err, exitCode(err))
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The registry's copy of the artifact changes after the push: pull refuses it and
// leaves nothing behind.
func TestPullRefusesATamperedBlob(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	ctx := context.Background()
	c := newClient(t, Options{PlainHTTP: true})
	ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/cache")
	res, err := c.Push(ctx, art, ref, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blob := reg.Blob(res.Layers[0].Digest)
	b := mustRead(t, blob)
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pulled")
	_, err = c.PullPlan(ctx, ref, res.PlanKey, out)
	var ce *ContentError
	if !errors.As(err, &ce) || exitCode(err) != 2 || !strings.Contains(err.Error(), filepath.Base(art)) || !strings.Contains(err.Error(), "digest") {
		t.Fatalf("pull of a tampered blob: %v (exit %d)", err, exitCode(err))
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a refused pull left %v", ents)
	}
}

// The registry's copy of the artifact is cut short, or has bytes appended: pull refuses
// it and leaves nothing behind. (oras-go refuses a Content-Length other than the
// descriptor's size before any byte arrives; the download's own size check, for a
// registry that sends no length, is TestDownloadSizeAndErrors'.)
func TestPullRefusesABlobOfAnotherSize(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	ctx := context.Background()
	c := newClient(t, Options{PlainHTTP: true})
	for _, tc := range []struct {
		name   string
		change func([]byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:len(b)-100] }},
		{"long", func(b []byte) []byte { return append(b, "trailing"...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/"+tc.name)
			res, err := c.Push(ctx, art, ref, PushOptions{})
			if err != nil {
				t.Fatal(err)
			}
			blob := reg.Blob(res.Layers[0].Digest)
			if err := os.WriteFile(blob, tc.change(mustRead(t, blob)), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "pulled")
			_, err = c.PullPlan(ctx, ref, res.PlanKey, out)
			if err == nil || !strings.Contains(err.Error(), filepath.Base(art)) {
				t.Fatalf("pull of a blob of another size: %v (exit %d)", err, exitCode(err))
			}
			if ents, _ := os.ReadDir(out); len(ents) != 0 {
				t.Errorf("a refused pull left %v", ents)
			}
		})
	}
}

// An artifact whose digests are all right but whose content differs from the manifest it
// carries (pushed around epbuild's own push, which refuses it): pull runs install's checks.
func TestPullRunsInstallsChecks(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	ctx := context.Background()
	bad := filepath.Join(t.TempDir(), filepath.Base(art))
	rewriteEntry(t, art, bad, "pydemo/python/pydemo/channel.py")
	c := newClient(t, Options{PlainHTTP: true})
	ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/cache")

	_, err := c.Push(ctx, bad, ref, PushOptions{})
	var be *manifest.BadArtifactError
	if !errors.As(err, &be) || exitCode(err) != 2 || !strings.Contains(err.Error(), "channel.py") {
		t.Fatalf("push of an artifact that differs from its manifest: %v", err)
	}

	m, raw, _, err := manifest.CheckArtifact(ctx, art)
	if err != nil {
		t.Fatal(err)
	}
	repo, err := c.repository(ref)
	if err != nil {
		t.Fatal(err)
	}
	data := mustRead(t, bad)
	name := filepath.Base(bad)
	var layers []ocispec.Descriptor
	for _, l := range []struct {
		mt, title string
		b         []byte
	}{
		{MediaTypeArtifact, name, data},
		{MediaTypeManifest, name + ".manifest.json", raw},
		{MediaTypeSHA256, name + ".sha256", []byte(digest.FromBytes(data).Encoded() + "  " + name + "\n")},
	} {
		d := ocispec.Descriptor{MediaType: l.mt, Digest: digest.FromBytes(l.b), Size: int64(len(l.b)), Annotations: map[string]string{ocispec.AnnotationTitle: l.title}}
		if _, err := pushIfAbsent(ctx, repo, d, l.b); err != nil {
			t.Fatal(err)
		}
		layers = append(layers, d)
	}
	if _, err := oras.PackManifest(ctx, tagPusher{Repository: repo, tag: m.PlanKey}, oras.PackManifestVersion1_1, ArtifactType, oras.PackManifestOptions{
		Layers: layers, ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "2026-01-01T00:00:00Z", AnnotationPlanKey: m.PlanKey, AnnotationRecipe: m.Recipe},
	}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "pulled")
	_, err = c.PullPlan(ctx, ref, m.PlanKey, out)
	var ce *ContentError
	if !errors.As(err, &ce) || exitCode(err) != 2 || !strings.Contains(err.Error(), "differ from its manifest") || !strings.Contains(err.Error(), "pydemo/python/pydemo/channel.py") {
		t.Fatalf("pull of an artifact that differs from its manifest: %v", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a refused pull left %v", ents)
	}
}

// rewriteEntry copies the artifact at src to dst with one byte of entry changed (same
// size, so only the content check can tell), and writes dst's .sha256.
func rewriteEntry(t *testing.T, src, dst, entry string) {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(mustRead(t, src)))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	var out bytes.Buffer
	zw, _ := zstd.NewWriter(&out)
	tr, tw := tar.NewReader(zr), tar.NewWriter(zw)
	changed := false
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		if h.Name == entry {
			b[len(b)/2] ^= 0x20
			changed = true
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if !changed {
		t.Fatalf("%s has no entry %s", src, entry)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	line := digest.FromBytes(out.Bytes()).Encoded() + "  " + filepath.Base(dst) + "\n"
	if err := os.WriteFile(dst+".sha256", []byte(line), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A registry that is down: every call says which registry, at once, with exit 3.
func TestRegistryDown(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	reg.Stop()
	art := demoArtifact(t)
	ctx := context.Background()
	c := newClient(t, Options{PlainHTTP: true})
	ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/cache")
	key := strings.Repeat("a", 64)
	_, lookupErr := c.Lookup(ctx, ref, key)
	_, pullErr := c.PullPlan(ctx, ref, key, t.TempDir())
	_, pushErr := c.Push(ctx, art, ref, PushOptions{})
	for what, err := range map[string]error{"lookup": lookupErr, "pull": pullErr, "push": pushErr} {
		var ue *UnreachableError
		if !errors.As(err, &ue) || exitCode(err) != 3 || !strings.Contains(err.Error(), "registry "+reg.Addr+" is not reachable") {
			t.Errorf("%s against a stopped registry: %v (exit %d)", what, err, exitCode(err))
		}
	}
}

// Credentials come from the Docker config: its auths, and a credential helper.
func TestCredentialsFromDockerConfig(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	reg := ocitest.Start(t, ocitest.Options{Htpasswd: "ci:" + string(hash) + "\n"})
	art := demoArtifact(t)
	ctx := context.Background()
	ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/cache")

	empty := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(empty, []byte(`{}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = newClient(t, Options{PlainHTTP: true, DockerConfig: empty}).Push(ctx, art, ref, PushOptions{})
	var ae *AuthError
	if !errors.As(err, &ae) || exitCode(err) != 3 || !strings.Contains(err.Error(), "oras login "+reg.Addr) {
		t.Fatalf("push without credentials: %v (exit %d)", err, exitCode(err))
	}

	// "auth" is base64("ci:s3cret"), as docker login writes it
	plain := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(plain, []byte(`{"auths":{"`+reg.Addr+`":{"auth":"Y2k6czNjcmV0"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := newClient(t, Options{PlainHTTP: true, DockerConfig: plain}).Push(ctx, art, ref, PushOptions{})
	if err != nil {
		t.Fatalf("push with the config's auths: %v", err)
	}

	// a credential helper: docker-credential-<name> get, server on stdin, JSON on stdout
	bin := t.TempDir()
	helper := "#!/bin/sh\nread server\n[ \"$server\" = \"" + reg.Addr + "\" ] || exit 1\n" +
		`echo '{"ServerURL":"'"$server"'","Username":"ci","Secret":"s3cret"}'` + "\n"
	if err := os.WriteFile(filepath.Join(bin, "docker-credential-epbuildtest"), []byte(helper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	helped := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(helped, []byte(`{"credHelpers":{"`+reg.Addr+`":"epbuildtest"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, Options{PlainHTTP: true, DockerConfig: helped}).PullPlan(ctx, ref, res.PlanKey, t.TempDir()); err != nil {
		t.Errorf("pull with a credential helper: %v", err)
	}
}

// Wheels travel with the artifact: one layer each, titled with the wheel directory a
// build writes, checked against the manifest's record on push and on pull.
func TestPushPullWheels(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	name := filepath.Base(art)
	wd := manifest.WheelDir(name)
	ents, err := os.ReadDir(filepath.Join(filepath.Dir(demoBuild.art), wd))
	if err != nil || len(ents) != 1 {
		t.Fatalf("the demo build's wheels: %v %v", ents, err)
	}
	whl := ents[0].Name()
	wheel := mustRead(t, filepath.Join(filepath.Dir(demoBuild.art), wd, whl))
	if err := os.Mkdir(filepath.Join(filepath.Dir(art), wd), 0o755); err != nil {
		t.Fatal(err)
	}
	beside := filepath.Join(filepath.Dir(art), wd, whl)
	if err := os.WriteFile(beside, wheel, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := newClient(t, Options{PlainHTTP: true})
	ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/wheels")
	res, err := c.Push(ctx, art, ref, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	last := res.Layers[len(res.Layers)-1]
	if len(res.Layers) != 4 || last.MediaType != MediaTypeWheel || last.Title != wd+"/"+whl || last.Digest != digest.FromBytes(wheel).String() {
		t.Errorf("pushed layers %+v: want the wheel last, titled %s/%s", res.Layers, wd, whl)
	}
	out := filepath.Join(t.TempDir(), "pulled")
	pr, err := c.PullPlan(ctx, ref, res.PlanKey, out)
	if err != nil {
		t.Fatal(err)
	}
	if got := filepath.Join(out, wd, whl); !slices.Equal(pr.Wheels, []string{got}) || !bytes.Equal(mustRead(t, got), wheel) || pr.Files[len(pr.Files)-1] != pr.Artifact {
		t.Errorf("pulled wheels %v, files %v", pr.Wheels, pr.Files)
	}

	// a wheel other than the one the manifest records is not pushed
	if err := os.WriteFile(beside, append(bytes.Clone(wheel), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = c.Push(ctx, art, mustRef(t, "oci://"+reg.Addr+"/epbuild/other"), PushOptions{})
	if exitCode(err) != 2 || !strings.Contains(err.Error(), whl) || !strings.Contains(err.Error(), "the manifest records") {
		t.Errorf("push of a wheel the manifest does not record: %v", err)
	}

	// an OCI artifact with a wheel layer the manifest does not record: pull refuses it
	om, _ := manifestOf(t, reg, "epbuild/wheels", res.PlanKey)
	repo, err := c.repository(ref)
	if err != nil {
		t.Fatal(err)
	}
	evil := []byte("PK not a wheel anyone built")
	d := ocispec.Descriptor{MediaType: MediaTypeWheel, Digest: digest.FromBytes(evil), Size: int64(len(evil)),
		Annotations: map[string]string{ocispec.AnnotationTitle: wd + "/evil-1.0-py3-none-any.whl"}}
	if _, err := pushIfAbsent(ctx, repo, d, evil); err != nil {
		t.Fatal(err)
	}
	if _, err := oras.PackManifest(ctx, tagPusher{Repository: repo, tag: res.PlanKey}, oras.PackManifestVersion1_1, ArtifactType,
		oras.PackManifestOptions{Layers: append(om.Layers, d), ManifestAnnotations: om.Annotations}); err != nil {
		t.Fatal(err)
	}
	out = filepath.Join(t.TempDir(), "refused")
	_, err = c.PullPlan(ctx, ref, res.PlanKey, out)
	if !errors.As(err, new(*ContentError)) || !strings.Contains(err.Error(), "evil-1.0-py3-none-any.whl") {
		t.Fatalf("pull of an unrecorded wheel: %v", err)
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Errorf("a refused pull left %v", ents)
	}
}
