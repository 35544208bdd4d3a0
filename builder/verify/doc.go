// Package verify owns the checks: the registry of check kinds (Checks) that the build's
// check stage runs on a staged prefix and verify-install runs on an installed one (files,
// env.sh, imports, the process's NCCL and NVSHMEM, smoke, host and rules) and the node's
// check (CheckHost).
//
// It learns what a build did only from what the build left on record: the manifest, the
// install receipt and env.sh (builder/manifest, builder/envsh). It may not import the
// pipeline, the runner or the store's stages; the runner imports it to run the checks.
package verify
