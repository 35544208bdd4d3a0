// Package disk owns how the builder puts bytes on a file system: whole-or-absent writes
// (WriteFileAtomic, WriteOutput), renames that never replace or that swap two trees, free
// space, and the NoSpaceError that names the full directory and how to make room.
//
// It knows nothing of plans, stages, artifacts or installs: it may import only the
// standard library, golang.org/x/sys and builder/archive (whose file hash FileSHA256 uses).
package disk
