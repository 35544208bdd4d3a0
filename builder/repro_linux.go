package builder

import "golang.org/x/sys/unix"

// mountedNoexec reports whether dir's file system refuses to run programs (noexec):
// a build runs what it builds (compiler checks, generated tools, epbuild's nvcc wrapper).
func mountedNoexec(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}
