// Command epbuild builds DeepEP + NVSHMEM from a pinned recipe, checks the result,
// packages it, and verifies installs on cluster nodes. This package is the command
// line only: flags, output and exit codes; the work is in builder, recipes, patches
// and compat.
package main

import "os"

// version is set at link time by the Makefile (-X main.version=...).
var version = "dev"

func main() {
	os.Exit(Main(os.Args[1:], Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}, os.Getenv))
}
