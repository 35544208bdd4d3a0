package oci

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote/auth"

	"github.com/epbuild/epbuild/builder/oci/ocitest"
	"github.com/epbuild/epbuild/builder/sign"
)

// fuzzKeySeed makes the fuzzer's signing key: the seed corpus is signed by it, so that a
// seed goes through every check of a signature, and its mutations through each of them.
var fuzzKeySeed = bytes.Repeat([]byte{7}, ed25519.SeedSize)

// writeFuzzKey writes the fuzzer's key pair as `epbuild key new` does, into dir.
func writeFuzzKey(t testing.TB, dir string) (priv, pub string) {
	t.Helper()
	k := ed25519.NewKeyFromSeed(fuzzKeySeed)
	p8, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKIXPublicKey(k.Public())
	if err != nil {
		t.Fatal(err)
	}
	priv, pub = filepath.Join(dir, "fuzz.key"), filepath.Join(dir, "fuzz.key.pub")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: p8}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pk}), 0o644); err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

// fuzzRegistry serves, on loopback, what the fuzzer gives as a registry would: manifest
// under the tag "t", index as the referrers of any manifest, sigManifest and envelope
// under their digests. So that a mutation can get past the digests to the parsers, the
// links are mended: a parseable index lists the signature manifest as its first entry,
// a parseable signature manifest names the artifact's manifest as subject and the
// envelope as first layer (both written again as JSON).
type fuzzRegistry struct {
	manifest, index, sigManifest, envelope []byte
}

func (r *fuzzRegistry) mend() {
	var sm ocispec.Manifest
	if json.Unmarshal(r.sigManifest, &sm) == nil && len(sm.Layers) > 0 {
		sm.Layers[0].Digest, sm.Layers[0].Size = digest.FromBytes(r.envelope), int64(len(r.envelope))
		sm.Subject = &ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: digest.FromBytes(r.manifest), Size: int64(len(r.manifest))}
		if b, err := json.Marshal(sm); err == nil {
			r.sigManifest = b
		}
	}
	var ix ocispec.Index
	if json.Unmarshal(r.index, &ix) == nil && len(ix.Manifests) > 0 {
		ix.Manifests[0].Digest, ix.Manifests[0].Size = digest.FromBytes(r.sigManifest), int64(len(r.sigManifest))
		if b, err := json.Marshal(ix); err == nil {
			r.index = b
		}
	}
}

func (r *fuzzRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	serve := func(b []byte, mediaType string) {
		w.Header().Set("Content-Type", mediaType)
		w.Header().Set("Docker-Content-Digest", digest.FromBytes(b).String())
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		if req.Method != http.MethodHead {
			_, _ = w.Write(b)
		}
	}
	p := req.URL.Path
	switch {
	case p == "/v2/" || p == "/v2":
		w.WriteHeader(http.StatusOK)
	case p == "/v2/fz/manifests/t" || p == "/v2/fz/manifests/"+digest.FromBytes(r.manifest).String():
		serve(r.manifest, ocispec.MediaTypeImageManifest)
	case p == "/v2/fz/manifests/"+digest.FromBytes(r.sigManifest).String():
		serve(r.sigManifest, ocispec.MediaTypeImageManifest)
	case strings.HasPrefix(p, "/v2/fz/referrers/"):
		serve(r.index, ocispec.MediaTypeImageIndex)
	case p == "/v2/fz/blobs/"+digest.FromBytes(r.envelope).String():
		serve(r.envelope, "application/octet-stream")
	default:
		http.NotFound(w, req)
	}
}

// FuzzOCIManifest: whatever bytes a registry serves as an artifact's OCI manifest, as
// the referrers index of it, as a signature manifest and as its DSSE envelope, pull's
// checks (the manifest's layers and names, the signatures, the envelope and its
// statement) end in an answer, with no panic; every read is bounded by its limit, so the
// memory limit the fuzz target runs under (make fuzz) catches an unbounded one.
func FuzzOCIManifest(f *testing.F) {
	dir := f.TempDir()
	_, pub := writeFuzzKey(f, dir)
	trust, err := sign.LoadKeyring(pub)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","artifactType":"`+ArtifactType+`","layers":[]}`),
		[]byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`), []byte("{}"), []byte("{}"))
	f.Add([]byte("not json"), []byte(""), []byte("[]"), []byte("null"))

	reg := &fuzzRegistry{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { reg.ServeHTTP(w, req) }))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	srv.Listener = l
	srv.Start()
	f.Cleanup(srv.Close)
	ref, err := ParseRef("oci://" + l.Addr().String() + "/fz:t")
	if err != nil {
		f.Fatal(err)
	}
	c, err := New(Options{PlainHTTP: true, Trust: trust, Credential: auth.StaticCredential("none", auth.EmptyCredential), HTTPClient: srv.Client(),
		Deadlines: Deadlines{Response: 10 * time.Second}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, manifest, index, sigManifest, envelope []byte) {
		*reg = fuzzRegistry{manifest: manifest, index: index, sigManifest: sigManifest, envelope: envelope}
		reg.mend()
		ctx := context.Background()
		repo, err := c.repository(ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.fetchManifest(ctx, repo, ref)
		if err != nil {
			return
		}
		if got.name == "" || got.layers[MediaTypeArtifact].Digest == "" {
			t.Fatalf("a manifest accepted without its artifact layer: %+v", got)
		}
		id, err := c.checkSignature(ctx, repo, ref, got)
		if err == nil && id != sign.KeyID(ed25519.NewKeyFromSeed(fuzzKeySeed).Public().(ed25519.PublicKey)) {
			t.Fatalf("signed by %q, a key that is not trusted", id)
		}
		_, _, _ = trust.Verify(envelope)
	})
}

// TestWriteOCIFuzzSeeds writes FuzzOCIManifest's seed corpus from a real push of the
// signed demo artifact (with EPBUILD_FUZZ_SEEDS=1; the files are kept in testdata).
func TestWriteOCIFuzzSeeds(t *testing.T) {
	if os.Getenv("EPBUILD_FUZZ_SEEDS") != "1" {
		t.Skip("EPBUILD_FUZZ_SEEDS=1 writes the seed corpus")
	}
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	priv, _ := writeFuzzKey(t, t.TempDir())
	signer, err := sign.LoadSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, Options{PlainHTTP: true})
	ref, err := ParseRef("oci://" + reg.Addr + "/epbuild/seed")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := c.Push(ctx, art, ref, PushOptions{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	repo, err := c.repository(ref)
	if err != nil {
		t.Fatal(err)
	}
	fetch := func(d ocispec.Descriptor) []byte {
		rc, err := repo.Fetch(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := content.ReadAll(rc, d)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	desc, rc, err := repo.FetchReference(ctx, res.Digest)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	var refs []ocispec.Descriptor
	if err := repo.Referrers(ctx, desc, "", func(rs []ocispec.Descriptor) error { refs = append(refs, rs...); return nil }); err != nil {
		t.Fatal(err)
	}
	seeds := map[string][4][]byte{}
	for _, d := range refs {
		sm := fetch(d)
		var m ocispec.Manifest
		if err := json.Unmarshal(sm, &m); err != nil || len(m.Layers) != 1 {
			t.Fatalf("referrer %s: %v", d.Digest, err)
		}
		// the referrers index a registry serves: this referrer first
		ix, err := json.Marshal(ocispec.Index{Versioned: m.Versioned, MediaType: ocispec.MediaTypeImageIndex, Manifests: append([]ocispec.Descriptor{d}, refs...)})
		if err != nil {
			t.Fatal(err)
		}
		name := "sbom-referrer"
		if d.ArtifactType == SignatureArtifactType {
			name = "signed"
		}
		seeds[name] = [4][]byte{manifest, ix, sm, fetch(m.Layers[0])}
	}
	if _, ok := seeds["signed"]; !ok {
		t.Fatalf("referrers %v: no signature", refs)
	}
	out := filepath.Join("testdata", "fuzz", "FuzzOCIManifest")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, s := range seeds {
		var b strings.Builder
		b.WriteString("go test fuzz v1\n")
		for _, v := range s {
			fmt.Fprintf(&b, "[]byte(%s)\n", strconv.Quote(string(v)))
		}
		if err := os.WriteFile(filepath.Join(out, name), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
