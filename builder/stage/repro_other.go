//go:build !linux

package builder

import "syscall"

// mountedNoexec is unknown here: a build root on a noexec file system fails in its first
// step instead.
func mountedNoexec(string) bool { return false }

// setUmask sets the process's umask and returns the one before (see repro_linux.go).
func setUmask(mask int) int { return syscall.Umask(mask) }
