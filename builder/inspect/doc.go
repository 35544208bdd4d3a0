// Package inspect holds the checks epbuild makes on built and installed
// files: ELF dynamic facts, the CUDA architectures embedded in fat binaries,
// NVSHMEM's recorded version and build variables, and what a Python
// interpreter really imports and maps. `epbuild recipe` (after a build) and
// `epbuild verify-install` (on an installed prefix) share this one
// implementation, so the two can never disagree about what "present" means.
//
// Every check returns a check.Result; readers return plain data so that callers can
// make several checks from one read.
package inspect
