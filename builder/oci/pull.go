package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/epbuild/epbuild/builder"
)

// PullResult is a pulled and checked artifact.
type PullResult struct {
	Ref      string        `json:"ref"`
	Digest   string        `json:"digest"` // the OCI manifest's
	Recipe   string        `json:"recipe"`
	PlanKey  string        `json:"plan_key"`
	Artifact string        `json:"artifact"` // the path of the .tar.zst
	SHA256   string        `json:"sha256"`
	Files    []string      `json:"files"` // every file written, the artifact last
	Layers   []LayerResult `json:"layers"`
}

// maxManifest bounds the OCI manifest read into memory; an epbuild one is about 2 KiB.
const maxManifest = 4 << 20

// fetched is the OCI manifest of an epbuild artifact, checked for shape.
type fetched struct {
	desc     ocispec.Descriptor
	manifest ocispec.Manifest
	layers   map[string]ocispec.Descriptor // by media type
	name     string                        // the artifact's file name
}

// fetchManifest resolves ref and reads its OCI manifest, verified against its digest,
// and checks that it is an epbuild artifact whose layers have usable names.
func (c *Client) fetchManifest(ctx context.Context, repo *remote.Repository, ref Ref) (*fetched, error) {
	desc, rc, err := repo.FetchReference(ctx, ref.Reference)
	if err != nil {
		return nil, classify(ref, "resolve "+ref.String(), err)
	}
	defer rc.Close()
	bad := func(format string, a ...any) error {
		return &ContentError{Ref: ref, What: "the OCI manifest", Err: fmt.Errorf(format, a...)}
	}
	if desc.Size > maxManifest {
		return nil, bad("%d bytes: an epbuild artifact's is a few KiB", desc.Size)
	}
	b, err := content.ReadAll(rc, desc)
	if err != nil {
		if errors.Is(err, content.ErrMismatchedDigest) || errors.Is(err, content.ErrTrailingData) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, bad("%v: the registry's copy is damaged or was changed", err)
		}
		return nil, classify(ref, "read the OCI manifest of "+ref.String(), err)
	}
	f := &fetched{desc: desc, layers: map[string]ocispec.Descriptor{}}
	if err := json.Unmarshal(b, &f.manifest); err != nil {
		return nil, bad("not JSON: %v", err)
	}
	m := f.manifest
	if m.MediaType != ocispec.MediaTypeImageManifest || m.ArtifactType != ArtifactType {
		return nil, bad("media type %q, artifact type %q: not an epbuild artifact (want %s)", m.MediaType, m.ArtifactType, ArtifactType)
	}
	known := map[string]Layer{}
	for _, l := range Layers() {
		known[l.MediaType] = l
	}
	for _, d := range m.Layers {
		if _, ok := known[d.MediaType]; !ok {
			c.debugf("skipping a layer this epbuild does not know", "media_type", d.MediaType)
			continue
		}
		if _, dup := f.layers[d.MediaType]; dup {
			return nil, bad("two layers of type %s", d.MediaType)
		}
		f.layers[d.MediaType] = d
	}
	art, ok := f.layers[MediaTypeArtifact]
	if !ok {
		return nil, bad("no layer of type %s", MediaTypeArtifact)
	}
	f.name = art.Annotations[ocispec.AnnotationTitle]
	if !plainName(f.name) || !strings.HasSuffix(f.name, artifactSuffix) {
		return nil, bad("artifact layer title %q is not a plain <recipe>-<plan>%s file name", f.name, artifactSuffix)
	}
	for _, l := range Layers() {
		d, ok := f.layers[l.MediaType]
		switch {
		case !ok && l.Required:
			return nil, bad("no layer of type %s (%s)", l.MediaType, f.name+l.Suffix)
		case ok && d.Annotations[ocispec.AnnotationTitle] != f.name+l.Suffix:
			return nil, bad("layer %s is titled %q, want %q", l.MediaType, d.Annotations[ocispec.AnnotationTitle], f.name+l.Suffix)
		}
	}
	if k := m.Annotations[AnnotationPlanKey]; !ref.isDigest() && isPlanKey(ref.Reference) && k != ref.Reference {
		return nil, bad("tag %s holds an artifact of plan %q", ref.Reference, k)
	}
	return f, nil
}

// isPlanKey reports whether a tag has the shape of a plan key (64 hex digits).
func isPlanKey(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// Pull fetches the artifact at ref (a tag, typically a plan key, or a digest) into dir
// and checks it before anything appears there: every layer against its digest, the
// .sha256 against the artifact's, then install's checks (builder.CheckArtifact: every
// entry against the manifest the artifact carries), the manifest layer against that
// manifest and the annotations against both. It writes <artifact>.tar.zst, .sha256,
// .manifest.json and .cdx.json (when pushed) into dir, each replacing a file of that name.
func (c *Client) Pull(ctx context.Context, ref Ref, dir string) (*PullResult, error) {
	if ref.Reference == "" {
		return nil, &RefError{Ref: ref.String(), Err: errors.New("pull needs a tag (the plan key) or a digest: oci://REGISTRY/REPO:TAG")}
	}
	repo, err := c.repository(ref)
	if err != nil {
		return nil, err
	}
	f, err := c.fetchManifest(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	tmp, err := os.MkdirTemp(dir, ".epbuild-pull-")
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	defer os.RemoveAll(tmp)

	res := &PullResult{Ref: ref.String(), Digest: f.desc.Digest.String()}
	var names []string
	for _, l := range Layers() {
		d, ok := f.layers[l.MediaType]
		if !ok {
			continue
		}
		title := f.name + l.Suffix
		if err := c.fetchBlob(ctx, repo, ref, d, filepath.Join(tmp, title)); err != nil {
			return nil, err
		}
		names = append(names, title)
		res.Layers = append(res.Layers, layerResult(d, false))
	}
	art := filepath.Join(tmp, f.name)
	artDigest := f.layers[MediaTypeArtifact].Digest
	sum, _ := sumBeside(art)
	if sum != artDigest.Encoded() {
		return nil, &ContentError{Ref: ref, What: f.name + ".sha256", Err: fmt.Errorf("says %q, the artifact layer is %s", sum, artDigest)}
	}
	m, raw, _, err := builder.CheckArtifact(ctx, art, tmp)
	var be *builder.BadArtifactError
	if errors.As(err, &be) {
		return nil, &ContentError{Ref: ref, What: f.name, Err: fmt.Errorf("the artifact is unusable: %w", be.Err)}
	}
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	mb, err := os.ReadFile(art + ".manifest.json")
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	if string(mb) != string(raw) {
		return nil, &ContentError{Ref: ref, What: f.name + ".manifest.json", Err: errors.New("differs from the manifest.json inside the artifact")}
	}
	ann := f.manifest.Annotations
	if ann[AnnotationPlanKey] != m.PlanKey || ann[AnnotationRecipe] != m.Recipe {
		return nil, &ContentError{Ref: ref, What: "the OCI manifest's annotations", Err: fmt.Errorf("say recipe %q plan %q, the artifact's manifest recipe %q plan %q",
			ann[AnnotationRecipe], ann[AnnotationPlanKey], m.Recipe, m.PlanKey)}
	}
	// the artifact goes last: whoever sees it sees its .sha256 beside it
	for i := len(names) - 1; i >= 0; i-- {
		if names[i] == f.name {
			names = append(append(names[:i:i], names[i+1:]...), f.name)
			break
		}
	}
	for _, n := range names {
		dst := filepath.Join(dir, n)
		if err := os.Rename(filepath.Join(tmp, n), dst); err != nil {
			return nil, fmt.Errorf("pull %s: move %s into place: %w", ref, n, err)
		}
		res.Files = append(res.Files, dst)
	}
	res.Recipe, res.PlanKey, res.SHA256 = m.Recipe, m.PlanKey, sum
	res.Artifact = filepath.Join(dir, f.name)
	c.logf("pulled", "ref", ref.String(), "artifact", res.Artifact)
	return res, nil
}

// fetchBlob downloads one layer to path, verifying its size and digest as it streams.
func (c *Client) fetchBlob(ctx context.Context, repo *remote.Repository, ref Ref, d ocispec.Descriptor, path string) error {
	title := filepath.Base(path)
	rc, err := repo.Fetch(ctx, d)
	if err != nil {
		return classify(ref, "fetch "+title, err)
	}
	defer rc.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("pull %s: %w", ref, err)
	}
	vr := content.NewVerifyReader(rc, d)
	_, err = io.CopyBuffer(out, vr, make([]byte, 1<<20))
	if err == nil {
		err = vr.Verify()
	}
	if cerr := out.Close(); err == nil && cerr != nil {
		return fmt.Errorf("pull %s: write %s: %w", ref, title, cerr)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, content.ErrMismatchedDigest), errors.Is(err, content.ErrTrailingData), errors.Is(err, io.ErrUnexpectedEOF):
		return &ContentError{Ref: ref, What: title, Err: fmt.Errorf("%w: the registry served other bytes than its manifest names (%s): its copy is damaged or was changed", err, d.Digest)}
	}
	return classify(ref, "fetch "+title, err)
}

// Lookup reports whether ref's repository holds the epbuild artifact of plan planKey
// under the tag planKey, without downloading it (one request for the OCI manifest). A
// tag that is absent is found == false with a nil error; a registry that cannot be
// reached, refuses access, or holds something else under that tag is an error.
func (c *Client) Lookup(ctx context.Context, ref Ref, planKey string) (bool, error) {
	if !validTag(planKey) {
		return false, &RefError{Ref: ref.String(), Err: fmt.Errorf("plan key %q cannot be an OCI tag", planKey)}
	}
	ref = ref.WithTag(planKey)
	repo, err := c.repository(ref)
	if err != nil {
		return false, err
	}
	f, err := c.fetchManifest(ctx, repo, ref)
	var nf *NotFoundError
	switch {
	case errors.As(err, &nf):
		return false, nil
	case err != nil:
		return false, err
	case f.manifest.Annotations[AnnotationPlanKey] != planKey:
		return false, &ContentError{Ref: ref, What: "the OCI manifest", Err: fmt.Errorf("tag %s holds plan %q", planKey, f.manifest.Annotations[AnnotationPlanKey])}
	}
	return true, nil
}

// PullPlan pulls the artifact of plan planKey from ref's repository into dir: Pull of
// the tag planKey.
func (c *Client) PullPlan(ctx context.Context, ref Ref, planKey, dir string) (*PullResult, error) {
	if !validTag(planKey) {
		return nil, &RefError{Ref: ref.String(), Err: fmt.Errorf("plan key %q cannot be an OCI tag", planKey)}
	}
	return c.Pull(ctx, ref.WithTag(planKey), dir)
}
