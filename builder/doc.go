// Package builder is the pipeline: Open makes a Job of a recipe, and the Job runs the
// stages in their order (fetch, patch, build, check, package) with its policy (the
// compatibility rules at each stage, the cache, the rebuild check), then install and
// verify-install of what it made.
//
// The stages live in packages of their own, one floor per step, and imports run one way,
// downward (layering_test.go keeps it so):
//
//	builder (Open, Job: order and policy: the rules, the cache, the rebuild check)
//	  -> matrix               the matrix run: cells built by the pipeline, installed, tested
//	  -> stage                the stage runner: patch, build, check, package; a run's Result
//	  -> pack                 an artifact from staged prefixes; SBOM, wheels; publishing
//	  -> install              an artifact put in place, checked, its receipt; its tests
//	  -> cachegc, verify      what a cache holds; what is checked of a build and an install
//	  -> envsh                the environment of a build's products, env.sh
//	  -> manifest             what a build and an install leave on record
//	  -> toolchain            what the build host offers a plan
//	  -> mirror               the sources a set of plans needs, for a builder offline
//	  -> plan, store          what a build will be; where its stages are kept
//	  -> disk, source, ...    leaves: files on disk, sources, archives, inspection, quoting
//
// Why these seams. A package above learns what a build did from what the build left on
// record, never from the code that did it: verify reads the manifest, the install receipt
// and env.sh (builder/manifest, builder/envsh) and never the runner or the store, so that
// changing how an install is checked needs no reading of how a build runs. The check
// kinds are one registry (builder/verify) because the build's check stage runs the same
// checks on the staged prefix that verify-install runs on the installed one: the runner
// imports verify, not the other way round. The toolchain sits under the manifest because
// the manifest records it; the store under the toolchain because the probe is cached by
// key. builder/disk holds how bytes reach a file system (atomic writes, renames, free
// space), which every floor needs and none owns.
//
// A package under builder holds one room: past 3,000 lines of Go (layering_test.go) the
// next part that stands alone moves into a package of its own, as the git object store
// (source/gitobj), a checkout's system calls (source/dirhandle), the node's sysroot
// (host/sysroot) and the zstd seekable format of artifact format 2 (archive/seekable) did.
//
// The root keeps the order and the policy only: Open and the Job's methods, the rules at
// each stage (RulesError, rulesAfterBuild, CheckInstall), the shared build cache's policy
// (buildcache.go: when to take an artifact from it, when to store one) and the rebuild
// check's verdict. Each piece below it was turned around to move out, so that it needs
// no Job: the mirror writer takes plans and a fetcher (mirror.Job); the runner takes a
// store, sources and a toolchain, and asks the rules after the build through a function
// the Job gives it (stage.Runner.AfterBuild); the matrix run gets the matrix and a cell's
// build as functions (matrix.Options), a rule that stops a cell as a *matrix.RefusedError.
//
// Why stage sits on pack, and pack on install: the package stage's body is pack.Write,
// which takes what it packs (pack.Input) and no runner, so that how an artifact's bytes
// are made reads without how a build runs; pack reads an artifact it did not write (the
// SBOM of a pushed artifact) through install's checked reader. stage.Result records what
// the root's policy added to a run too (its rebuild check and cache report), so that the
// command line prints one record; those two types are data, in stage beside Result.
package builder
