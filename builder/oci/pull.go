package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/pack"
	"github.com/epbuild/epbuild/builder/plan"
	"github.com/epbuild/epbuild/builder/quote"
	"github.com/epbuild/epbuild/recipes/userfile"
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
	// SBOM is the path of the CycloneDX SBOM, when the OCI artifact carries it; Wheels
	// the paths of the wheels it carries (the manifest's Wheels list them all).
	SBOM   string   `json:"sbom,omitempty"`
	Wheels []string `json:"wheels,omitempty"`
	// SignedBy is the id of the trusted key that signed it; "" when taken unsigned
	// (--allow-unsigned).
	SignedBy string `json:"signed_by,omitempty"`
	// Manifest is the artifact's manifest, as checked.
	Manifest *manifest.Manifest `json:"-"`
}

// maxManifest bounds the OCI manifest read into memory; an epbuild one is about 2 KiB.
const maxManifest = 4 << 20

// fetched is the OCI manifest of an epbuild artifact, checked for shape.
type fetched struct {
	desc     ocispec.Descriptor
	manifest ocispec.Manifest
	layers   map[string]ocispec.Descriptor // by media type, the per-wheel ones aside
	wheels   []ocispec.Descriptor          // in the manifest's order
	name     string                        // the artifact's file name
}

// maxSum bounds the .sha256 layer, as push bounds the file it sends.
const maxSum = userfile.SumLimit

// fetchManifest resolves ref and reads its OCI manifest, verified against its digest,
// within the response deadline, and checks that it is an epbuild artifact whose layers
// have usable names and sizes: the sidecars bounded as push bounds them.
func (c *Client) fetchManifest(ctx context.Context, repo *remote.Repository, ref Ref) (*fetched, error) {
	ctx, cancel := c.small(ctx)
	defer cancel()
	desc, rc, err := repo.FetchReference(ctx, ref.Reference)
	if err != nil {
		return nil, classify(ref, "resolve "+ref.String(), err)
	}
	defer rc.Close()
	bad := func(format string, a ...any) error {
		return &ContentError{Ref: ref, What: "the OCI manifest", Err: fmt.Errorf(format, a...)}
	}
	if desc.Size > maxManifest || desc.Size < 0 {
		return nil, bad("%d bytes: an epbuild artifact's is a few KiB (at most %d MiB are read)", desc.Size, maxManifest>>20)
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
		l, ok := known[d.MediaType]
		switch {
		case !ok:
			c.debugf("skipping a layer this epbuild does not know", "media_type", d.MediaType)
			continue
		case d.Size < 0:
			return nil, bad("layer %s: size %d", d.MediaType, d.Size)
		case l.PerWheel:
			f.wheels = append(f.wheels, d)
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
	if err := quote.Name("artifact layer title", f.name); err != nil || !strings.HasSuffix(f.name, artifactSuffix) {
		return nil, bad("artifact layer title %q is not a plain <recipe>-<plan>%s file name", f.name, artifactSuffix)
	}
	dir := manifest.WheelDir(f.name) + "/"
	seen := map[string]bool{}
	for _, d := range f.wheels {
		t := d.Annotations[ocispec.AnnotationTitle]
		file, ok := strings.CutPrefix(t, dir)
		if !ok || quote.Name("wheel file name", file) != nil || !strings.HasSuffix(file, ".whl") || seen[file] {
			return nil, bad("wheel layer titled %q: want one %s<name>.whl per wheel", t, dir)
		}
		seen[file] = true
	}
	for _, l := range Layers() {
		if l.PerWheel {
			continue
		}
		d, ok := f.layers[l.MediaType]
		limit := int64(maxSidecar)
		if l.MediaType == MediaTypeSHA256 {
			limit = maxSum
		}
		switch {
		case !ok && l.Required:
			return nil, bad("no layer of type %s (%s)", l.MediaType, f.name+l.Suffix)
		case !ok:
		case d.Annotations[ocispec.AnnotationTitle] != f.name+l.Suffix:
			return nil, bad("layer %s is titled %q, want %q", l.MediaType, d.Annotations[ocispec.AnnotationTitle], f.name+l.Suffix)
		case l.MediaType != MediaTypeArtifact && d.Size > limit:
			return nil, bad("layer %s is %d bytes: at most %d are read (push sends at most %d MiB beside an artifact)", f.name+l.Suffix, d.Size, limit, maxSidecar>>20)
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

// Pull fetches the artifact at ref (a tag, typically a plan key, or a digest) into dir.
// A tag of 12 or 16 hex digits, or an artifact's file name (<recipe>-<12 hex>.tar.zst),
// stands for the one plan key tag it starts (resolvePrefix).
//
// It checks the artifact before anything appears there: its signature (checkSignature),
// every layer against its digest and the size the OCI manifest declares; the artifact,
// as it downloads, with install's checks (manifest.CheckArtifactStream: every entry
// against the manifest the artifact carries, in one pass that writes nothing but the
// download); the .sha256 against the artifact's digest, the manifest layer against the
// manifest inside, each wheel against the manifest's record of it, and the annotations
// and layer titles against both.
//
// The file names come from the checked manifest inside the artifact (recipe and plan
// key), never from the registry: a layer title that disagrees is refused. Everything is
// downloaded into a staging directory in dir (.epbuild-pull-*, locked while in use) and
// moved into place when every check passed, the artifact last; a failure leaves nothing
// behind, not even dir when Pull made it. Staging directories of runs that died are
// removed.
func (c *Client) Pull(ctx context.Context, ref Ref, dir string) (res *PullResult, err error) {
	if ref.Reference == "" {
		return nil, &RefError{Ref: ref.String(), Err: errors.New("pull needs a tag (the plan key) or a digest: oci://REGISTRY/REPO:TAG")}
	}
	repo, err := c.repository(ref)
	if err != nil {
		return nil, err
	}
	prefix, recipe, short := planPrefix(ref)
	if short {
		if ref, err = c.resolvePrefix(ctx, repo, ref, prefix); err != nil {
			return nil, err
		}
	}
	f, err := c.fetchManifest(ctx, repo, ref)
	if err != nil {
		return nil, err
	}
	if recipe != "" && f.manifest.Annotations[AnnotationRecipe] != recipe {
		return nil, &RefError{Ref: ref.String(), Err: fmt.Errorf("plan %s is recipe %q's, not %q's", prefix, f.manifest.Annotations[AnnotationRecipe], recipe)}
	}
	signedBy, err := c.checkSignature(ctx, repo, ref, f)
	if err != nil {
		return nil, err
	}
	made, err := mkdirAll(dir)
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	var moved []string
	defer func() {
		if err == nil {
			return
		}
		for _, p := range slices.Backward(moved) {
			_ = os.Remove(p)
		}
		for _, d := range slices.Backward(made) {
			_ = os.Remove(d) // only when empty: what else is there stays
		}
	}()
	tmp, release, err := pack.StagingDir(dir, ".epbuild-pull-")
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	defer release()

	res = &PullResult{Ref: ref.String(), Digest: f.desc.Digest.String(), SignedBy: signedBy}
	// staged under names of ours: nothing the registry says names a file before the check
	art := filepath.Join(tmp, stagedArtifact)
	artDesc := f.layers[MediaTypeArtifact]
	m, raw, err := c.fetchArtifact(ctx, repo, ref, artDesc, art, f.name)
	if err != nil {
		return nil, err
	}
	res.Layers = append(res.Layers, layerResult(artDesc, false))
	name, err := artifactNameOf(m)
	if err != nil {
		return nil, &ContentError{Ref: ref, What: f.name, Err: err}
	}
	if name != f.name {
		return nil, &ContentError{Ref: ref, What: "the OCI manifest", Err: fmt.Errorf("its artifact layer is titled %q, the artifact's own manifest (recipe %s, plan %s) names it %s: "+
			"file names come from the artifact's manifest", f.name, m.Recipe, m.PlanKey, name)}
	}
	if d, ok := f.layers[MediaTypeManifest]; ok && d.Size != int64(len(raw)) {
		return nil, &ContentError{Ref: ref, What: name + ".manifest.json", Err: fmt.Errorf("%d bytes, the manifest.json inside the artifact %d", d.Size, len(raw))}
	}
	var suffixes []string
	for _, l := range Layers()[1:] {
		d, ok := f.layers[l.MediaType]
		if !ok {
			continue
		}
		if err := c.fetchBlob(ctx, repo, ref, d, art+l.Suffix); err != nil {
			return nil, err
		}
		suffixes = append(suffixes, l.Suffix)
		res.Layers = append(res.Layers, layerResult(d, false))
	}
	sum, _ := manifest.SumBeside(art)
	if sum != artDesc.Digest.Encoded() {
		return nil, &ContentError{Ref: ref, What: name + ".sha256", Err: fmt.Errorf("says %q, the artifact layer is %s", sum, artDesc.Digest)}
	}
	mb, err := os.ReadFile(art + ".manifest.json")
	if err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	if string(mb) != string(raw) {
		return nil, &ContentError{Ref: ref, What: name + ".manifest.json", Err: errors.New("differs from the manifest.json inside the artifact")}
	}
	ann := f.manifest.Annotations
	if ann[AnnotationPlanKey] != m.PlanKey || ann[AnnotationRecipe] != m.Recipe {
		return nil, &ContentError{Ref: ref, What: "the OCI manifest's annotations", Err: fmt.Errorf("say recipe %q plan %q, the artifact's manifest recipe %q plan %q",
			ann[AnnotationRecipe], ann[AnnotationPlanKey], m.Recipe, m.PlanKey)}
	}
	wheels, err := c.fetchWheels(ctx, repo, ref, f, m, tmp)
	if err != nil {
		return nil, err
	}
	for _, w := range wheels {
		res.Layers = append(res.Layers, layerResult(w.desc, false))
	}
	if len(wheels) > 0 {
		wd := filepath.Join(dir, manifest.WheelDir(name))
		if _, serr := os.Stat(wd); serr != nil {
			made = append(made, wd)
		}
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return nil, fmt.Errorf("pull %s: %w", ref, err)
		}
	}
	// the wheels first and the artifact last: whoever sees the artifact sees everything
	// beside it
	type move struct{ from, to string }
	var order []move
	for _, w := range wheels {
		order = append(order, move{w.staged, filepath.Join(manifest.WheelDir(name), w.file)})
	}
	for _, sfx := range suffixes {
		order = append(order, move{art + sfx, name + sfx})
	}
	order = append(order, move{art, name})
	for _, mv := range order {
		dst := filepath.Join(dir, filepath.FromSlash(mv.to))
		if err := os.Rename(mv.from, dst); err != nil {
			return nil, fmt.Errorf("pull %s: move %s into place: %w", ref, mv.to, err)
		}
		moved = append(moved, dst)
		res.Files = append(res.Files, dst)
		switch {
		case strings.HasSuffix(mv.to, ".whl"):
			res.Wheels = append(res.Wheels, dst)
		case mv.to == name+pack.SBOMSuffix:
			res.SBOM = dst
		}
	}
	res.Recipe, res.PlanKey, res.SHA256, res.Manifest = m.Recipe, m.PlanKey, sum, m
	res.Artifact = filepath.Join(dir, name)
	c.debugf("pulled", "ref", ref.String(), "artifact", res.Artifact)
	return res, nil
}

// stagedArtifact is the artifact's name in the staging directory.
const stagedArtifact = "artifact.tar.zst"

// artifactNameOf is the file name of the artifact whose checked manifest is m, as
// epbuild recipe names it: both parts must be usable in a file name.
func artifactNameOf(m *manifest.Manifest) (string, error) {
	if err := quote.Name("recipe name in the artifact's manifest", m.Recipe); err != nil {
		return "", err
	}
	if !isPlanKey(m.PlanKey) {
		return "", fmt.Errorf("the plan key in the artifact's manifest, %q, is not 64 lowercase hex digits", m.PlanKey)
	}
	return pack.ArtifactName(&plan.Plan{Recipe: m.Recipe, Key: m.PlanKey}), nil
}

// mkdirAll is os.MkdirAll that says which directories it made, outermost first, so
// that a failed pull can remove them again.
func mkdirAll(dir string) ([]string, error) {
	var missing []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		}
		missing = append(missing, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	slices.Reverse(missing)
	return missing, nil
}

// fetchArtifact downloads the artifact layer to path and checks it as it arrives: the
// download hands what it reads to two goroutines beside it (fanOut), one hashing the
// blob against its digest, one running install's checks (manifest.CheckArtifactStream:
// every entry decompressed once and hashed against the manifest the artifact carries,
// nothing written). The download reads at most the size the OCI manifest declares (and
// one byte more, to see that there is no more); it stops as soon as the checks fail, so
// that a registry streaming something else fills no disk. Its own verdict comes first,
// then the digest's, then the checks': bytes other than the digest names are called
// that, rather than a damaged archive. title names the layer in errors.
func (c *Client) fetchArtifact(ctx context.Context, repo *remote.Repository, ref Ref, d ocispec.Descriptor, path, title string) (*manifest.Manifest, []byte, error) {
	if err := d.Digest.Validate(); err != nil {
		return nil, nil, &ContentError{Ref: ref, What: "the OCI manifest", Err: fmt.Errorf("layer %s: %w", title, err)}
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	rc, err := repo.Fetch(ctx, d)
	if err != nil {
		return nil, nil, classify(ref, "fetch "+title, err)
	}
	defer rc.Close()
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	fan := newFanOut(2, chunkSize, chunksHeld)
	hashed := make(chan error, 1)
	go func() {
		h := d.Digest.Algorithm().Hash()
		_, err := io.Copy(h, fan.reader(0))
		if err == nil && digest.NewDigest(d.Digest.Algorithm(), h) != d.Digest {
			err = content.ErrMismatchedDigest
		}
		hashed <- err
	}()
	type verdict struct {
		m   *manifest.Manifest
		raw []byte
		err error
	}
	checked := make(chan verdict, 1)
	go func() {
		r := fan.reader(1)
		m, raw, err := manifest.CheckArtifactStream(ctx, r, title, d.Size)
		if err != nil {
			stop(errCheckFailed)
		}
		r.drain()
		checked <- verdict{m, raw, err}
	}()
	err = download(ctx, rc, out, fan, d.Size)
	fan.close(err)
	herr, v := <-hashed, <-checked
	if cerr := out.Close(); err == nil && cerr != nil {
		err = &writeError{cerr}
	}
	stopped := ""
	if context.Cause(ctx) == errCheckFailed && (errors.Is(err, context.Canceled) || errors.Is(err, errCheckFailed)) {
		// the checks stopped the download: theirs is the verdict
		err, herr = nil, nil
		stopped = fmt.Sprintf(" (the download stopped there, before its digest %s could be checked)", d.Digest)
	}
	if err == nil {
		err = herr
	}
	if err != nil {
		return nil, nil, blobError(ref, title, d, err)
	}
	var be *manifest.BadArtifactError
	if errors.As(v.err, &be) {
		return nil, nil, &ContentError{Ref: ref, What: title, Err: fmt.Errorf("the artifact is unusable%s: %w", stopped, be.Err)}
	}
	if v.err != nil {
		return nil, nil, fmt.Errorf("pull %s: %w", ref, v.err)
	}
	return v.m, v.raw, nil
}

// errCheckFailed is why a download stopped when the checks beside it failed.
var errCheckFailed = errors.New("the artifact failed its checks")

// stagedWheel is a wheel downloaded into the staging directory.
type stagedWheel struct {
	desc   ocispec.Descriptor
	file   string // its name, from the artifact's manifest
	staged string // where it lies now
}

// fetchWheels downloads the wheel layers into tmp, each checked against its digest and
// against the manifest's record of that wheel (name, size, sha256); the file name is the
// manifest's. A manifest wheel the OCI artifact does not carry is logged: the artifact
// was pushed without it.
func (c *Client) fetchWheels(ctx context.Context, repo *remote.Repository, ref Ref, f *fetched, m *manifest.Manifest, tmp string) ([]stagedWheel, error) {
	if len(f.wheels) == 0 && len(m.Wheels) == 0 {
		return nil, nil
	}
	want := map[string]manifest.WheelFile{}
	for _, w := range m.Wheels {
		want[w.File] = w
	}
	wd := manifest.WheelDir(f.name)
	if err := os.Mkdir(filepath.Join(tmp, "wheels"), 0o755); err != nil {
		return nil, fmt.Errorf("pull %s: %w", ref, err)
	}
	have := map[string]bool{}
	var out []stagedWheel
	for i, d := range f.wheels {
		title := d.Annotations[ocispec.AnnotationTitle]
		file := strings.TrimPrefix(title, wd+"/")
		w, ok := want[file]
		if !ok || d.Digest.Encoded() != w.SHA256 || d.Size != w.Size {
			return nil, &ContentError{Ref: ref, What: title, Err: fmt.Errorf("the artifact's manifest records no such wheel (%s, %d bytes)", d.Digest, d.Size)}
		}
		if err := quote.Name("wheel file name in the artifact's manifest", w.File); err != nil {
			return nil, &ContentError{Ref: ref, What: title, Err: err}
		}
		staged := filepath.Join(tmp, "wheels", fmt.Sprintf("%d.whl", i))
		if err := c.fetchBlob(ctx, repo, ref, d, staged); err != nil {
			return nil, err
		}
		have[file] = true
		out = append(out, stagedWheel{desc: d, file: w.File, staged: staged})
	}
	for _, w := range m.Wheels {
		if !have[w.File] {
			c.logf("the registry's copy does not carry a wheel its manifest lists", "ref", ref.String(), "wheel", quote.Term(w.File))
		}
	}
	return out, nil
}

// fetchBlob downloads one layer to path, verifying its size (it reads at most one byte
// more than the OCI manifest declares) and digest as it streams.
func (c *Client) fetchBlob(ctx context.Context, repo *remote.Repository, ref Ref, d ocispec.Descriptor, path string) error {
	title := d.Annotations[ocispec.AnnotationTitle]
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
	_, err = io.CopyBuffer(smallWrites{out}, vr, make([]byte, chunkSize))
	if err == nil {
		err = vr.Verify()
	}
	if cerr := out.Close(); err == nil && cerr != nil {
		err = &writeError{cerr}
	}
	if err != nil {
		return blobError(ref, title, d, err)
	}
	return nil
}

// blobError explains a failed download of layer d (title): a write of ours, bytes
// other than the digest names (exit 2), or the registry's failure.
func blobError(ref Ref, title string, d ocispec.Descriptor, err error) error {
	var we *writeError
	switch {
	case errors.As(err, &we):
		return fmt.Errorf("pull %s: write %s: %w", ref, title, we.err)
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
