// Package toolchain owns what the build host offers a plan: the probe of compilers, CUDA,
// Python and its packages, CMake packages and the NCCL a job would load (Probe, ProbeNCCL),
// cached by key in the store, and Preflight, which says what a plan needs that the host
// lacks (Missing, PreflightError) and which facts the compatibility rules read from it.
//
// It reads a plan.Plan and may import builder/plan, builder/store and the leaf packages;
// it never runs a stage nor reads what a build made.
package toolchain
