// Package gitobj is git's object store, read and written in process: it reads objects
// from a git object directory (version 2 pack indexes searched in place by binary search,
// packs mapped into memory, deltas resolved through a bounded base cache, loose objects,
// alternates) and writes packs (one pass, every object checked against its id, the index
// built as it goes), and copies the closure of commits from one object directory into a
// new pack.
//
// It owns the bytes of objects and packs and nothing around them. It may not touch a
// checkout or an index file, refs, the network, the cache's layout or locks, or what a
// recipe pins: builder/source decides what to fetch and where it goes, and reads objects
// through this package.
package gitobj
