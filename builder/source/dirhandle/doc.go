// Package dirhandle writes the files of a checkout through open directories: each entry is
// made relative to its directory's handle (openat, mkdirat, symlinkat on Linux; paths
// elsewhere), so the kernel resolves one name per file and a name from a tree cannot lead
// outside the directory it belongs to, and each file's stat data goes into its git index
// entry as it is written.
//
// It is a room of builder/source of its own because it is the only part that speaks to
// the kernel and differs by platform, and it stands alone: it owns system calls on the
// checkout's directories and files, and may not touch git objects, the index file, the
// cache, the network or recipes (it is told which name to write with which bytes).
package dirhandle
