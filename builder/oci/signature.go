package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/epbuild/epbuild/builder/sign"
)

// A signature is an OCI referrer of the artifact's manifest (image-spec 1.1: its subject
// is the artifact's manifest): an image manifest of artifactType SignatureArtifactType
// whose one layer is a DSSE envelope (builder/sign) over the artifact's OCI manifest
// digest and sha256. Registries with the referrers API list it there; for the others
// oras-go keeps the referrers tag (sha256-<hex>) as OCI 1.1 specifies.
const (
	SignatureArtifactType = "application/vnd.epbuild.signature.v1+json"
	MediaTypeDSSE         = "application/vnd.dsse.envelope.v1+json"
)

// maxSignatures bounds the signatures of one artifact that pull looks at.
const maxSignatures = 16

// SignatureError is an artifact that no trusted key signed: exit 2, nothing written.
type SignatureError struct {
	Ref Ref
	Err error
}

func (e *SignatureError) Error() string {
	return fmt.Sprintf("pull %s: not signed by a trusted key: %v; trust the key of whoever pushes (--trust-key FILE.pub, "+
		"or a .pub file in the cache's trusted-keys directory), or take it unchecked with --allow-unsigned; nothing was written", e.Ref, e.Err)
}
func (e *SignatureError) Unwrap() error { return e.Err }
func (e *SignatureError) ExitCode() int { return exitBadInput }

// pushSignature signs the pushed artifact (manifest desc) and pushes the signature as
// its referrer, created at the artifact's time so that it is as reproducible as the
// artifact (ed25519 signatures are deterministic).
func (c *Client) pushSignature(ctx context.Context, repo *remote.Repository, s *sign.Signer, desc ocispec.Descriptor, st sign.Statement, created string) (ocispec.Descriptor, error) {
	env, err := s.Sign(st)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	ld := ocispec.Descriptor{MediaType: MediaTypeDSSE, Digest: digest.FromBytes(env), Size: int64(len(env))}
	if _, err := pushIfAbsent(ctx, repo, ld, env); err != nil {
		return ocispec.Descriptor{}, err
	}
	return oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, SignatureArtifactType, oras.PackManifestOptions{
		Subject: &desc, Layers: []ocispec.Descriptor{ld},
		ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: created, AnnotationKeyID: s.ID},
	})
}

// AnnotationKeyID names the key of a signature (a hint for people: the envelope says it
// too, and only the envelope is trusted).
const AnnotationKeyID = "io.github.epbuild.key-id"

// checkSignature returns the id of the trusted key that signed the artifact f, before
// any of it is downloaded. Without trusted keys, or without a good signature, the
// artifact is refused unless AllowUnsigned, which takes it with a warning ("" then).
func (c *Client) checkSignature(ctx context.Context, repo *remote.Repository, ref Ref, f *fetched) (string, error) {
	if c.opts.Trust.Len() == 0 {
		if c.opts.AllowUnsigned {
			c.warnf("--allow-unsigned: taking the artifact without checking who signed it", "ref", ref.String())
			return "", nil
		}
		return "", &SignatureError{Ref: ref, Err: errors.New("no key is trusted here")}
	}
	ctx, cancel := c.small(ctx)
	defer cancel()
	var cands []ocispec.Descriptor
	errEnough := errors.New("enough")
	err := repo.Referrers(ctx, f.desc, SignatureArtifactType, func(rs []ocispec.Descriptor) error {
		cands = append(cands, rs...)
		if len(cands) >= maxSignatures {
			return errEnough
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return "", classify(ref, "list the signatures of "+ref.String(), err)
	}
	why := []string{}
	for _, d := range cands[:min(len(cands), maxSignatures)] {
		id, err := c.verifySignature(ctx, repo, f, d)
		if err == nil {
			c.debugf("signed", "ref", ref.String(), "key", id)
			return id, nil
		}
		var ue *UnreachableError
		var te *TimeoutError
		if errors.As(err, &ue) || errors.As(err, &te) {
			return "", err
		}
		why = append(why, err.Error())
	}
	if len(why) == 0 {
		why = append(why, "it carries no signature")
	}
	err = errors.New(strings.Join(why, "; "))
	if c.opts.AllowUnsigned {
		c.warnf("--allow-unsigned: taking an artifact no trusted key signed", "ref", ref.String(), "why", err.Error())
		return "", nil
	}
	return "", &SignatureError{Ref: ref, Err: err}
}

// verifySignature checks one referrer d of f: its manifest and envelope bounded and
// verified against their digests, the envelope signed by a trusted key, its statement
// naming f's manifest digest, artifact and plan.
func (c *Client) verifySignature(ctx context.Context, repo *remote.Repository, f *fetched, d ocispec.Descriptor) (string, error) {
	read := func(d ocispec.Descriptor, limit int64) ([]byte, error) {
		if d.Size > limit || d.Size < 0 {
			return nil, fmt.Errorf("%s is %d bytes, at most %d", d.Digest, d.Size, limit)
		}
		rc, err := repo.Fetch(ctx, d)
		if err != nil {
			return nil, classify(Ref{Registry: repo.Reference.Registry}, "fetch the signature "+d.Digest.String(), err)
		}
		defer rc.Close()
		return content.ReadAll(rc, d)
	}
	b, err := read(d, 64<<10)
	if err != nil {
		return "", err
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("signature %s: %w", d.Digest, err)
	}
	if m.ArtifactType != SignatureArtifactType || m.Subject == nil || m.Subject.Digest != f.desc.Digest || len(m.Layers) != 1 || m.Layers[0].MediaType != MediaTypeDSSE {
		return "", fmt.Errorf("signature %s: not one %s layer about %s", d.Digest, MediaTypeDSSE, f.desc.Digest)
	}
	env, err := read(m.Layers[0], sign.MaxEnvelope)
	if err != nil {
		return "", err
	}
	st, id, err := c.opts.Trust.Verify(env)
	if err != nil {
		return "", fmt.Errorf("signature %s: %w", d.Digest, err)
	}
	ann := f.manifest.Annotations
	want := sign.Statement{Manifest: f.desc.Digest.String(), SHA256: f.layers[MediaTypeArtifact].Digest.Encoded(), Recipe: ann[AnnotationRecipe], PlanKey: ann[AnnotationPlanKey]}
	if *st != want {
		return "", fmt.Errorf("signature %s by key %s is about another artifact (%s, %s)", d.Digest, id, st.Manifest, st.SHA256)
	}
	return id, nil
}

func (c *Client) warnf(msg string, kv ...any) {
	if c.opts.Log != nil {
		c.opts.Log.Warn(msg, kv...)
	}
}
