package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"

	"github.com/epbuild/epbuild/builder/oci/ocitest"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/sign"
)

// newKey makes a key pair in a test directory: the signer and a keyring trusting it.
func newKey(t *testing.T) (*sign.Signer, *sign.Keyring) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key")
	if _, err := sign.NewKey(p); err != nil {
		t.Fatal(err)
	}
	s, err := sign.LoadSigner(p)
	if err != nil {
		t.Fatal(err)
	}
	k, err := sign.LoadKeyring(p + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return s, k
}

// A forged artifact, self-consistent (every digest right, install's checks pass) but
// pushed without a signature or signed by a key nobody trusts, is refused by a pull that
// trusts a key; the same artifact signed by that key is taken; --allow-unsigned takes
// the forged one with a warning.
func TestPullChecksSignatures(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	ctx := context.Background()
	signer, trusted := newKey(t)
	forger, _ := newKey(t)
	pusher := newClient(t, Options{PlainHTTP: true})
	strict := newClient(t, Options{PlainHTTP: true, Trust: trusted})

	for _, tc := range []struct {
		name   string
		signer *sign.Signer
		ok     bool
	}{
		{"unsigned", nil, false},
		{"foreign key", forger, false},
		{"trusted key", signer, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/"+strings.ReplaceAll(tc.name, " ", "-"))
			pushed, err := pusher.Push(ctx, art, ref, PushOptions{Signer: tc.signer})
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "pulled")
			res, err := strict.PullPlan(ctx, ref, pushed.PlanKey, out)
			if tc.ok {
				if err != nil || res.SignedBy != signer.ID {
					t.Fatalf("pull of an artifact signed by a trusted key: %v (signed by %q)", err, res.SignedBy)
				}
				return
			}
			var se *SignatureError
			if !errors.As(err, &se) || exitCode(err) != 2 {
				t.Fatalf("pull of a %s artifact: %v (exit %d)", tc.name, err, exitCode(err))
			}
			assertNothingLeft(t, out)
			// the build cache does not take it either
			bc := &BuildCache{Client: strict, Repo: ref}
			if got, err := bc.Fetch(ctx, &plan.Plan{Recipe: pushed.Recipe, Key: pushed.PlanKey}, t.TempDir()); got != nil || !errors.As(err, &se) {
				t.Errorf("the build cache took a %s artifact: %v %v", tc.name, got, err)
			}
			// --allow-unsigned takes it
			loose := newClient(t, Options{PlainHTTP: true, Trust: trusted, AllowUnsigned: true})
			if res, err := loose.PullPlan(ctx, ref, pushed.PlanKey, out); err != nil || res.SignedBy != "" {
				t.Errorf("--allow-unsigned: %v", err)
			}
		})
	}
}

// A signature of one artifact attached to another (a replayed referrer) proves nothing.
func TestPullRefusesAReplayedSignature(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	ctx := context.Background()
	signer, trusted := newKey(t)
	c := newClient(t, Options{PlainHTTP: true, Trust: trusted})
	ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/replay")
	good, err := c.Push(ctx, art, ref, PushOptions{Signer: signer})
	if err != nil {
		t.Fatal(err)
	}
	// another OCI manifest of the artifact (another created time), carrying the first
	// one's envelope as its referrer
	repo, _ := c.repository(ref)
	forged, err := c.Push(ctx, art, mustRef(t, "oci://"+reg.Addr+"/epbuild/replay:other"), PushOptions{SourceDateEpoch: new(int64)})
	if err != nil {
		t.Fatal(err)
	}
	sm, _ := manifestOf(t, reg, "epbuild/replay", good.Signature)
	fd, err := repo.Resolve(ctx, forged.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, SignatureArtifactType, oras.PackManifestOptions{
		Subject: &fd, Layers: sm.Layers, ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: "2026-01-01T00:00:00Z"},
	}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Pull(ctx, mustRef(t, "oci://"+reg.Addr+"/epbuild/replay@"+forged.Digest), t.TempDir())
	var se *SignatureError
	if !errors.As(err, &se) || !strings.Contains(err.Error(), "another artifact") {
		t.Fatalf("pull of an artifact with another's signature: %v", err)
	}
}

// The SBOM is a referrer of the artifact too (artifactType application/vnd.cyclonedx+json),
// as `oras discover` looks for it, its layer the same blob as the artifact's SBOM layer.
func TestPushSBOMReferrer(t *testing.T) {
	reg := ocitest.Start(t, ocitest.Options{})
	art := demoArtifact(t)
	sbom := []byte(`{"bomFormat":"CycloneDX","specVersion":"1.6","version":1}` + "\n")
	if err := os.WriteFile(art+".cdx.json", sbom, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := newClient(t, Options{PlainHTTP: true})
	ref := mustRef(t, "oci://"+reg.Addr+"/epbuild/sbom")
	res, err := c.Push(ctx, art, ref, PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	repo, _ := c.repository(ref)
	d, err := repo.Resolve(ctx, res.Digest)
	if err != nil {
		t.Fatal(err)
	}
	var found []ocispec.Descriptor
	if err := repo.Referrers(ctx, d, MediaTypeSBOM, func(r []ocispec.Descriptor) error { found = append(found, r...); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 || found[0].Digest.String() != res.SBOMReferrer {
		t.Fatalf("SBOM referrers of %s: %v (pushed %s)", res.Digest, found, res.SBOMReferrer)
	}
	rm, _ := manifestOf(t, reg, "epbuild/sbom", res.SBOMReferrer)
	if len(rm.Layers) != 1 || rm.Layers[0].Digest != digest.FromBytes(sbom) || rm.Subject == nil || rm.Subject.Digest.String() != res.Digest {
		t.Errorf("SBOM referrer %+v", rm)
	}
}
