// Package oci stores epbuild artifacts in OCI registries and fetches them back, checked,
// with oras-go: the build cache that CI runners and sites share, and the way an artifact
// travels to an air-gapped cluster through the registry it already runs (Harbor, GHCR,
// ECR, Artifact Registry, distribution).
//
// # What is stored
//
// One OCI image manifest (image-spec 1.1) with artifactType ArtifactType, the empty
// config, and the layers of Layers(), each titled with its file name
// (org.opencontainers.image.title, which `oras pull` uses too):
//
//	<recipe>-<plan>.tar.zst                 MediaTypeArtifact  the artifact
//	<recipe>-<plan>.tar.zst.manifest.json   MediaTypeManifest  its manifest.json (read without the artifact)
//	<recipe>-<plan>.tar.zst.cdx.json        MediaTypeSBOM      its CycloneDX SBOM, when beside the artifact
//	<recipe>-<plan>.tar.zst.sha256          MediaTypeSHA256    its sha256 line
//	<recipe>-<plan>.wheels/<wheel>.whl      MediaTypeWheel     each wheel its manifest lists, when beside it
//
// The manifest's annotations carry the recipe, the plan key, the pins (a JSON array of
// Pin) and the epbuild that built it; org.opencontainers.image.created is
// SOURCE_DATE_EPOCH or the artifact's recorded epoch, never the clock, so the same
// artifact gives the same OCI manifest digest everywhere. It is tagged with the plan key.
//
// # The cache API
//
// The shared build cache (epbuild recipe --cache-from/--cache-to) is BuildCache, the
// builder.ArtifactCache of a repository: NewBuildCache(c, "oci://REGISTRY/REPO"), on a
// *Client from New(Options{PlainHTTP: ..., DockerConfig: ..., UserAgent: ..., Log: ...}).
// The builder owns the policy (builder/buildcache.go); BuildCache makes these calls:
//
//	found, err := c.Lookup(ctx, ref, plan.Key)          // one manifest request; absent = false, nil
//	res, err := c.PullPlan(ctx, ref, plan.Key, outDir)  // → res.Artifact, checked as install checks it
//	res, err := c.Push(ctx, artifactPath, ref, oci.PushOptions{})  // after a successful build
//
// Pull checks the artifact as it downloads: the download hands its buffers to two
// goroutines (stream.go), one hashing the blob against its digest, one feeding
// manifest.CheckArtifactStream, which decompresses the archive once and hashes each entry
// against the manifest without writing anything; push runs manifest.CheckArtifact (the
// same check, reading the file once) beside the upload.
//
// Errors carry exit codes (ExitCode() int): *UnreachableError and *AuthError are 3 (the
// environment lacks the registry or the credentials: a cache should log them and build
// locally), *RefError, *PlainHTTPError, *NotFoundError, *ContentError and
// manifest.BadArtifactError are 2. A registry that is down fails at once (a refused
// connection is not retried); 5xx and 429 are retried by oras-go's policy, timeouts are
// not. Every exchange has a deadline (Deadlines: an answer within Response, a transfer
// that never brings fewer than MinBytes within Window): *TimeoutError, exit 3. Every read
// is bounded by the size the OCI manifest declares, the manifest by 4 MiB.
//
// # Signatures
//
// Push with PushOptions.Signer pushes a DSSE envelope (builder/sign) as an OCI referrer of
// the artifact's manifest (signature.go); Pull takes only an artifact that a key of
// Options.Trust signed (*SignatureError, exit 2), unless Options.AllowUnsigned.
//
// # What pull writes
//
// File names come from the manifest inside the artifact (recipe, plan key), never from
// layer titles, which must agree. Pull downloads into a flocked staging directory in the
// output directory (pack.StagingDir), moves the files into place once checked, and
// removes the staging directories of runs that died.
//
// Credentials come from the Docker config and its credential helpers, as docker and oras
// read them; plain HTTP is refused for any registry not on this machine.
package oci
