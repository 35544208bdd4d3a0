// Package envsh owns the environment a build's products run in: the {{ }} templates of
// recipe values, environ lists (WithEnv), the runtime environment a plan gives its
// installed components (RuntimeEnv, InstallEnv), and env.sh, the script an artifact
// carries, baked with its install prefix at install time (BakeEnvScript) and read back by
// verify (UnbakeEnv).
//
// It may import builder/plan, builder/manifest and the leaf packages; it runs no build
// step and checks nothing.
package envsh
