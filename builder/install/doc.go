// Package install puts an artifact in place: it reads the manifest from the artifact's
// first entries, checks the free space, extracts into a staging directory beside the
// prefix, verifies the staged tree (builder/verify) and only then renames it over the
// prefix with its receipt and, where it is a static binary, the running epbuild. It also
// reads the tests an install carries for `epbuild test`.
//
// It owns the staging, the receipt and the refusal of a prefix that is not epbuild's; it
// may not touch how an artifact is built (the runner, the store) nor learn anything of a
// build but what its manifest records.
package install
