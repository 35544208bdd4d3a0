//go:build !linux

package builder

// mountedNoexec is unknown here: a build root on a noexec file system fails in its first
// step instead.
func mountedNoexec(string) bool { return false }
