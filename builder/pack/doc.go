// Package pack writes an artifact and what lies beside it: the package stage's body
// (Write: env.sh and the manifest packed with the staged prefixes, reproducibly, in
// artifact format 2), the exporters of what a build recorded (the wheels, the CycloneDX
// SBOM, an install's modulefile), the artifact's name and its .sha256, the whole-or-nothing
// publishing of an output set into an output directory (Publish, PublishFetched,
// PublishArtifact), the locked staging directories of downloads (StagingDir) and the
// comparison of two artifacts or installs (Diff).
//
// It owns the artifact's bytes: what Write packs, at which zstd level, in what order.
// It takes what it packs explicitly (Input: the plan, the components as built, the
// toolchain, the findings and build facts), never a runner: it may import manifest,
// envsh, archive, install (to read an artifact it did not write), sbom, wheel and the
// leaves, never stage, the pipeline, or anything that builds.
package pack
