// Package patches owns patching: the patch sets shipped with epbuild (embedded
// set.yaml files), where each patch comes from, and the engine that applies a
// set to a source tree.
//
// A patch either does what it says, provably, or the build stops and says
// exactly where: context is matched strictly unless a bounded offset search is
// asked for (and each moved hunk is reported), a set applies fully or not at
// all, a patch that is already present is detected and reported, and nothing
// is written outside the tree, into .git, or through a symlink.
package patches
