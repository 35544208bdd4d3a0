package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/epbuild/epbuild/builder/archive"
	"github.com/epbuild/epbuild/builder/manifest"
	"github.com/epbuild/epbuild/builder/sign"
	"github.com/epbuild/epbuild/recipes/userfile"
)

// PushOptions tune Push.
type PushOptions struct {
	// SourceDateEpoch stamps org.opencontainers.image.created; nil means the epoch the
	// artifact's manifest records, so that the same artifact gives the same OCI manifest
	// (and digest) on every machine.
	SourceDateEpoch *int64
	// Signer, when set, signs the pushed artifact: the signature is pushed as a referrer
	// of its OCI manifest (signature.go).
	Signer *sign.Signer
}

// PushResult is a pushed artifact.
type PushResult struct {
	Ref     string        `json:"ref"`    // oci://REGISTRY/REPO:<plan key>
	Digest  string        `json:"digest"` // the OCI manifest's digest
	Tags    []string      `json:"tags"`
	Recipe  string        `json:"recipe"`
	PlanKey string        `json:"plan_key"`
	Created string        `json:"created"`
	Layers  []LayerResult `json:"layers"`
	// SignedBy is the key id of the signature pushed with it, Signature its manifest's
	// digest; empty when unsigned.
	SignedBy  string `json:"signed_by,omitempty"`
	Signature string `json:"signature,omitempty"`
	// SBOMReferrer is the digest of the manifest that refers to the artifact with its
	// SBOM (artifactType application/vnd.cyclonedx+json), when it has one.
	SBOMReferrer string `json:"sbom_referrer,omitempty"`
}

// LayerResult is one layer of a pushed or pulled artifact.
type LayerResult struct {
	Title     string `json:"title"`
	MediaType string `json:"media_type"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
	// Existed: the registry had the blob already, nothing was uploaded.
	Existed bool `json:"existed,omitempty"`
}

// Push stores the artifact at path, with its manifest, its SBOM (<artifact>.cdx.json,
// when beside it) and its .sha256, as one OCI artifact in ref's repository, tagged with
// the plan key (and with ref's tag too, when it has one).
//
// The artifact gets install's checks (manifest.CheckArtifact) while its blob uploads; the
// OCI manifest, which is what makes the upload visible under a tag, is pushed only when
// both succeeded. A registry that already has a blob is not sent it again. The OCI
// manifest is reproducible: its created time is SOURCE_DATE_EPOCH or the artifact's own.
func (c *Client) Push(ctx context.Context, path string, ref Ref, opts PushOptions) (*PushResult, error) {
	if ref.isDigest() {
		return nil, &RefError{Ref: ref.String(), Err: errors.New("push takes a tag (or none: the plan key is always one), not a digest")}
	}
	art, err := filepath.Abs(path)
	if err != nil {
		return nil, &manifest.BadArtifactError{Artifact: path, Err: err}
	}
	name := filepath.Base(art)
	if !strings.HasSuffix(name, artifactSuffix) || !plainName(name) {
		return nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("not an epbuild artifact name (<recipe>-<plan>%s)", artifactSuffix)}
	}
	st, err := os.Stat(art)
	if err != nil || !st.Mode().IsRegular() {
		if err == nil {
			err = errors.New("not a regular file")
		}
		return nil, &manifest.BadArtifactError{Artifact: art, Err: err}
	}
	repo, err := c.repository(ref)
	if err != nil {
		return nil, err
	}

	// The check and the upload run side by side; the check's verdict wins over the
	// registry's (a damaged file is better named by its .sha256 than by DIGEST_INVALID).
	var (
		wg                 sync.WaitGroup
		m                  *manifest.Manifest
		raw                []byte
		checkErr, upErr    error
		artDesc            ocispec.Descriptor
		artExisted         bool
		uploadCtx, stopUp  = context.WithCancel(ctx)
		checkCtx, stopChck = context.WithCancel(ctx)
	)
	defer stopUp()
	defer stopChck()
	wg.Go(func() {
		m, raw, _, checkErr = manifest.CheckArtifact(checkCtx, art)
		if checkErr != nil {
			stopUp()
		}
	})
	wg.Go(func() {
		artDesc, artExisted, upErr = c.pushArtifactBlob(uploadCtx, repo, art, st.Size())
		if upErr != nil && !errors.Is(upErr, context.Canceled) {
			stopChck()
		}
	})
	wg.Wait()
	if checkErr != nil && !errors.Is(checkErr, context.Canceled) {
		return nil, checkErr
	}
	if upErr != nil {
		return nil, classify(ref, "push "+name, upErr)
	}
	if checkErr != nil {
		return nil, checkErr
	}
	artDesc.Annotations = map[string]string{ocispec.AnnotationTitle: name}
	res := &PushResult{Recipe: m.Recipe, PlanKey: m.PlanKey}
	res.Layers = append(res.Layers, layerResult(artDesc, artExisted))

	layers := []ocispec.Descriptor{artDesc}
	builtBy := m.Epbuild // artifacts made before the version left the manifest
	for _, l := range Layers()[1:] {
		if l.PerWheel {
			ws, err := c.pushWheels(ctx, repo, ref, art, m)
			if err != nil {
				return nil, err
			}
			for _, w := range ws {
				layers = append(layers, w.desc)
				res.Layers = append(res.Layers, layerResult(w.desc, w.existed))
			}
			continue
		}
		data, err := c.sidecar(art, l, raw, artDesc.Digest)
		if err != nil {
			return nil, err
		}
		if data == nil {
			continue
		}
		if l.MediaType == MediaTypeSBOM && builtBy == "" {
			builtBy = sbomBuiltBy(data)
		}
		d := ocispec.Descriptor{MediaType: l.MediaType, Digest: digest.FromBytes(data), Size: int64(len(data)),
			Annotations: map[string]string{ocispec.AnnotationTitle: name + l.Suffix}}
		existed, err := pushIfAbsent(ctx, repo, d, data)
		if err != nil {
			return nil, classify(ref, "push "+name+l.Suffix, err)
		}
		layers = append(layers, d)
		res.Layers = append(res.Layers, layerResult(d, existed))
	}

	epoch := m.SourceDateEpoch
	if opts.SourceDateEpoch != nil {
		epoch = *opts.SourceDateEpoch
	}
	res.Created = time.Unix(epoch, 0).UTC().Format(time.RFC3339)
	pins, err := pinsAnnotation(m.Plan)
	if err != nil {
		return nil, err
	}
	ann := map[string]string{
		ocispec.AnnotationCreated: res.Created,
		AnnotationRecipe:          m.Recipe,
		AnnotationPlanKey:         m.PlanKey,
		AnnotationPins:            pins,
		AnnotationEpbuild:         builtBy,
		AnnotationArtifact:        name,
	}
	if !validTag(m.PlanKey) {
		return nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("its plan key %q cannot be an OCI tag", m.PlanKey)}
	}
	desc, err := oras.PackManifest(ctx, tagPusher{Repository: repo, tag: m.PlanKey}, oras.PackManifestVersion1_1, ArtifactType,
		oras.PackManifestOptions{Layers: layers, ManifestAnnotations: ann})
	if err != nil {
		return nil, classify(ref, "push the OCI manifest of "+name, err)
	}
	res.Digest, res.Tags = desc.Digest.String(), []string{m.PlanKey}
	if t := ref.Reference; t != "" && t != m.PlanKey {
		if err := repo.Tag(ctx, desc, t); err != nil {
			return nil, classify(ref, "tag "+name+" as "+t, err)
		}
		res.Tags = append(res.Tags, t)
	}
	for _, l := range layers {
		if l.MediaType != MediaTypeSBOM {
			continue
		}
		// the SBOM again as a referrer, for `oras discover` and the tools that look for
		// SBOMs there; the layer stays for older epbuilds and `oras pull`. Same blob: no
		// second upload.
		sd, err := oras.PackManifest(ctx, repo, oras.PackManifestVersion1_1, MediaTypeSBOM, oras.PackManifestOptions{
			Subject: &desc, Layers: []ocispec.Descriptor{l}, ManifestAnnotations: map[string]string{ocispec.AnnotationCreated: res.Created}})
		if err != nil {
			return nil, classify(ref, "push the SBOM referrer of "+name, err)
		}
		res.SBOMReferrer = sd.Digest.String()
	}
	if opts.Signer != nil {
		st := sign.Statement{Manifest: desc.Digest.String(), SHA256: artDesc.Digest.Encoded(), Recipe: m.Recipe, PlanKey: m.PlanKey}
		sd, err := c.pushSignature(ctx, repo, opts.Signer, desc, st, res.Created)
		if err != nil {
			return nil, classify(ref, "push the signature of "+name, err)
		}
		res.SignedBy, res.Signature = opts.Signer.ID, sd.Digest.String()
	}
	res.Ref = ref.WithTag(m.PlanKey).String()
	c.debugf("pushed", "ref", res.Ref, "digest", res.Digest)
	return res, nil
}

func layerResult(d ocispec.Descriptor, existed bool) LayerResult {
	return LayerResult{Title: d.Annotations[ocispec.AnnotationTitle], MediaType: d.MediaType, Digest: d.Digest.String(), Size: d.Size, Existed: existed}
}

// pushArtifactBlob uploads the artifact unless the registry has it. Its digest is its
// .sha256 when there is one (the registry verifies what it receives against it, and the
// check beside this verifies the file against it), else the file's hash.
func (c *Client) pushArtifactBlob(ctx context.Context, repo *remote.Repository, art string, size int64) (ocispec.Descriptor, bool, error) {
	sum, err := manifest.SumBeside(art) // an error is the check's to report
	if err != nil || sum == "" {
		if sum, err = hashFile(ctx, art); err != nil {
			return ocispec.Descriptor{}, false, err
		}
	}
	d := ocispec.Descriptor{MediaType: MediaTypeArtifact, Digest: digest.NewDigestFromEncoded(digest.SHA256, sum), Size: size}
	if ok, err := repo.Exists(ctx, d); err != nil {
		return d, false, err
	} else if ok {
		c.debugf("the registry has the artifact already", "digest", d.Digest)
		return d, true, nil
	}
	f, err := os.Open(art)
	if err != nil {
		return d, false, err
	}
	defer f.Close()
	c.logf("uploading", "artifact", filepath.Base(art), "bytes", size)
	return d, false, repo.Push(ctx, d, f)
}

// hashFile is the file's sha256, with archive's one file hasher.
func hashFile(ctx context.Context, name string) (string, error) {
	sum, _, err := archive.HashFile(ctx, name, sha256.New(), make([]byte, 1<<20))
	if err != nil {
		return "", fmt.Errorf("hash %s: %w", name, err)
	}
	return sum, nil
}

// maxSidecar bounds a file pushed beside the artifact (an SBOM of a large build is a few
// MiB).
const maxSidecar = 64 << 20

// sidecar returns the bytes of layer l of the artifact at art: its file beside the
// artifact, or what push generates; nil for an optional layer with no file.
func (c *Client) sidecar(art string, l Layer, manifestJSON []byte, sum digest.Digest) ([]byte, error) {
	p := art + l.Suffix
	limit := int64(maxSidecar)
	if l.MediaType == MediaTypeSHA256 {
		limit = maxSum
	}
	// opened, then checked on the descriptor: a FIFO swapped in after a stat would hang
	b, err := userfile.ReadFile(p, limit)
	switch {
	case errors.Is(err, fs.ErrNotExist) && l.MediaType == MediaTypeManifest:
		return manifestJSON, nil
	case errors.Is(err, fs.ErrNotExist) && l.MediaType == MediaTypeSHA256:
		return []byte(sum.Encoded() + "  " + filepath.Base(art) + "\n"), nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case err != nil:
		var nr *userfile.NotRegularError
		if errors.As(err, &nr) {
			nr.Fix = "push sends the file beside the artifact; remove it, or put the file itself there"
		}
		return nil, &manifest.BadArtifactError{Artifact: art, Err: err}
	}
	switch l.MediaType {
	case MediaTypeManifest:
		if !bytes.Equal(b, manifestJSON) {
			return nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("%s differs from the manifest.json inside the artifact: remove it or copy it again", filepath.Base(p))}
		}
	case MediaTypeSBOM:
		if !json.Valid(b) {
			return nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("%s is not JSON: regenerate the SBOM", filepath.Base(p))}
		}
	}
	return b, nil
}

type pushedWheel struct {
	desc    ocispec.Descriptor
	existed bool
}

// pushWheels uploads the wheels the artifact's manifest lists that lie in the wheel
// directory beside it (as epbuild recipe writes them), each checked against the
// manifest's record (size and sha256) first. A wheel that is not there is logged and
// left out: pull then says so, and a build cache builds rather than serve an artifact
// without its wheels.
func (c *Client) pushWheels(ctx context.Context, repo *remote.Repository, ref Ref, art string, m *manifest.Manifest) ([]pushedWheel, error) {
	name := filepath.Base(art)
	var out []pushedWheel
	for _, w := range m.Wheels {
		title := wheelTitle(name, w.File)
		p := filepath.Join(filepath.Dir(art), filepath.FromSlash(title))
		if !plainName(w.File) {
			return nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("its manifest lists a wheel %q that is not a plain file name", w.File)}
		}
		st, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			c.logf("not pushed: a wheel the manifest lists is not beside the artifact", "wheel", title)
			continue
		}
		if err != nil || !st.Mode().IsRegular() {
			if err == nil {
				err = errors.New("not a regular file")
			}
			return nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("wheel %s: %w", title, err)}
		}
		sum, err := hashFile(ctx, p)
		if err != nil {
			return nil, err
		}
		if sum != w.SHA256 || st.Size() != w.Size {
			return nil, &manifest.BadArtifactError{Artifact: art, Err: fmt.Errorf("wheel %s: %d bytes, sha256 %s; the manifest records %d bytes, sha256 %s: copy the wheel directory again with the artifact",
				title, st.Size(), sum, w.Size, w.SHA256)}
		}
		d := ocispec.Descriptor{MediaType: MediaTypeWheel, Digest: digest.NewDigestFromEncoded(digest.SHA256, sum), Size: w.Size,
			Annotations: map[string]string{ocispec.AnnotationTitle: title}}
		existed, err := repo.Exists(ctx, d)
		if err == nil && !existed {
			err = pushFile(ctx, repo, d, p)
		}
		if err != nil {
			return nil, classify(ref, "push "+title, err)
		}
		out = append(out, pushedWheel{desc: d, existed: existed})
	}
	return out, nil
}

func pushFile(ctx context.Context, repo *remote.Repository, d ocispec.Descriptor, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return repo.Push(ctx, d, f)
}

// pushIfAbsent uploads a small blob unless the registry has it.
func pushIfAbsent(ctx context.Context, repo *remote.Repository, d ocispec.Descriptor, data []byte) (bool, error) {
	if ok, err := repo.Exists(ctx, d); err != nil || ok {
		return ok, err
	}
	return false, repo.Push(ctx, d, bytes.NewReader(data))
}

// tagPusher pushes the OCI manifest under its tag in one request (PackManifest pushes
// it by digest otherwise, and a tag would cost a second round trip); blobs go as usual.
type tagPusher struct {
	*remote.Repository
	tag string
}

func (t tagPusher) Push(ctx context.Context, d ocispec.Descriptor, r io.Reader) error {
	if d.MediaType == ocispec.MediaTypeImageManifest {
		return t.Repository.PushReference(ctx, d, r, t.tag)
	}
	return t.Repository.Push(ctx, d, r)
}

// sbomBuiltBy is the epbuild that built an artifact, as its SBOM records it (the
// property epbuild:built-by of the BOM's metadata); "" when it does not say.
func sbomBuiltBy(data []byte) string {
	var bom struct {
		Metadata struct {
			Properties []struct{ Name, Value string } `json:"properties"`
		} `json:"metadata"`
	}
	if json.Unmarshal(data, &bom) != nil {
		return ""
	}
	for _, p := range bom.Metadata.Properties {
		if p.Name == "epbuild:built-by" {
			return p.Value
		}
	}
	return ""
}
