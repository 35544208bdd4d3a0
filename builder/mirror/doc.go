// Package mirror writes `epbuild mirror`: every pinned source of a set of plans and every
// upstream commit their patch sets read, laid out by URL for a builder without network,
// with an index of the recipes it holds whole and the Python packages the plans take from
// the build host's environment (named, never fetched).
//
// It owns the mirror directory's layout and its whole-or-nothing write. It takes plans and
// a fetcher (Job); it may import plan, store, source, disk, embedded and quote, never the
// pipeline that made the plans nor anything that builds.
package mirror
