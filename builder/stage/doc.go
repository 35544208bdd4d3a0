// Package stage runs a plan through the stages, each through the store by key: the
// Runner (patch, build, check, package; builds that do not depend on each other at the
// same time, sharing the cores), its steps (cmake, python-extension, command), the
// reproducibility measures and the work directories (Repro, BuildHost), the sources
// (FetchSources, Materialize, ApplySets, Upstream), the build facts read from the headers
// and trees it built (facts.go), the second build of a rebuild check (Rebuild), and
// Result, the record of a run that the pipeline and the command line read.
//
// It owns the stage keys: the format constants (patch/2, build/4, check/3, package/5)
// are part of every cache key and change only when what a stage writes changes. The
// package stage's body is pack.Write: stage imports pack, never the other way round.
// The policy is the caller's: the rules after the build are asked through AfterBuild,
// the findings come in Findings; stage never imports the pipeline (builder), matrix or
// mirror.
package stage
