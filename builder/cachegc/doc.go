// Package cachegc owns what is measured and removed in a cache directory: usage by kind
// (CacheDU), the list of stage outputs (CacheList) and gc (CacheGC), which removes only
// names epbuild gives and never what a run in progress uses (read from the store's run
// records and locks).
//
// It reads the store's layout through builder/store's exported names and the sources'
// through builder/cache; it builds nothing and is imported by the command line only.
package cachegc
