// Package source brings pinned sources into the cache and out into workspaces: git commits
// fetched shallowly by SHA (go-git), archives checked against their sha256, both served
// from a mirror directory instead of the network when one is set, so that an air-gapped
// site builds exactly what a connected one builds.
//
// It owns the fetch (remote, mirror, archive), the cache's git repositories and archives
// (what is published there, in which order), writing the mirror, checkouts of a pinned
// commit (the tree planned and written, its index), upstream diffs and files, and the
// history that compat and drift ask about. It may not touch the build, recipes beyond the
// pins it is handed (recipes.CheckRefName is the one rule it shares), nor the bytes of
// git objects and packs: those are builder/source/gitobj's, and the system calls that
// write a checkout's files are builder/source/dirhandle's.
package source
