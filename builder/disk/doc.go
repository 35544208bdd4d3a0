// Package disk owns how the builder puts bytes on a file system: whole-or-absent writes
// (WriteFileAtomic, WriteOutput), renames that never replace or that swap two trees, free
// space, and the NoSpaceError that names the full directory and how to make room.
//
// It is a leaf: it knows nothing of plans, stages, artifacts or installs, and may import
// only the standard library and golang.org/x/sys.
package disk
