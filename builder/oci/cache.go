package oci

import (
	"context"
	"errors"
	"fmt"

	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/sign"
)

// BuildCache is an OCI repository as epbuild recipe's shared build cache
// (builder.ArtifactCache): artifacts tagged with their plan keys, fetched with Pull's
// checks and stored with Push.
type BuildCache struct {
	Client *Client
	Repo   Ref // a repository: no tag, no digest
	// Signer, when set, signs what Store pushes.
	Signer *sign.Signer
}

// NewBuildCache is the build cache in the repository ref names (oci://REGISTRY/REPO;
// the plan key is the tag, so ref takes none). A reference that cannot be one, and
// --plain-http for a registry elsewhere, are bad input (exit 2), before any build.
func NewBuildCache(c *Client, ref string) (*BuildCache, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if r.Reference != "" {
		return nil, &RefError{Ref: ref, Err: fmt.Errorf("a build cache is a repository, %s: the plan key is the tag", r.WithTag("").String())}
	}
	if _, err := c.repository(r); err != nil {
		return nil, err
	}
	return &BuildCache{Client: c, Repo: r}, nil
}

// Fetch pulls the artifact of plan p into dir; nil when the repository has no tag p.Key.
func (b *BuildCache) Fetch(ctx context.Context, p *plan.Plan, dir string) (*pack.Fetched, error) {
	res, err := b.Client.PullPlan(ctx, b.Repo, p.Key, dir)
	var nf *NotFoundError
	switch {
	case errors.As(err, &nf):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &pack.Fetched{Artifact: res.Artifact, SHA256: res.SHA256, Manifest: res.Manifest,
		SBOM: res.SBOM, Wheels: res.Wheels, From: res.Ref + "@" + res.Digest}, nil
}

// Store pushes the artifact at path (with its SBOM and wheels beside it) under its plan key.
func (b *BuildCache) Store(ctx context.Context, path string) (string, error) {
	res, err := b.Client.Push(ctx, path, b.Repo, PushOptions{Signer: b.Signer})
	if err != nil {
		return "", err
	}
	return res.Ref + "@" + res.Digest, nil
}

func (b *BuildCache) String() string { return b.Repo.String() }
