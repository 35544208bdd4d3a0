package builder

import "golang.org/x/sys/unix"

// mountedNoexec reports whether dir's file system refuses to run programs (noexec):
// a build runs what it builds (compiler checks, generated tools, epbuild's nvcc wrapper).
func mountedNoexec(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}

// setUmask sets the process's umask and returns the one before. The umask belongs to the
// process: it is set only while a build stage runs, which nothing else in epbuild does
// at the same time.
func setUmask(mask int) int { return unix.Umask(mask) }
