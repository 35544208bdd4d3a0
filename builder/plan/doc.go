// Package plan owns what a build will be before anything runs: a recipe resolved into a
// Plan (components, pins, patch sets, env) by a Resolver, the compat catalog applied to
// it, and the facts the compatibility rules read from it (FactsFromPlan).
//
// It may import recipes, patches and compat, never another package of builder: what the
// host has (builder/toolchain) and what a build did (stages, artifacts, installs) are
// decided above it, from a Plan.
package plan
