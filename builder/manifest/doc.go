// Package manifest owns what a build and an install leave on record: the artifact's
// manifest.json (Manifest, its components and wheels, a hash of every file), the receipt
// install writes at the top of a prefix (Receipt), and the bounds and names both are read
// with; and an artifact checked against its own manifest before anything of it is
// installed (CheckArtifact, CheckTree, FileProblem), which needs the format alone, no
// install and no check kind. It is how the stages above learn what a build did: verify
// and install read these files, never the runner or the store.
//
// It may import builder/plan, builder/toolchain and the leaf packages; it runs nothing.
package manifest
