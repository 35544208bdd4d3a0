package stage

import "golang.org/x/sys/unix"

// mountedNoexec reports whether dir's file system refuses to run programs (noexec):
// a build runs what it builds (compiler checks, generated tools, epbuild's nvcc wrapper).
func mountedNoexec(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}

// setUmask sets the process's umask and returns the one before. The umask belongs to the
// process: it is set only while the builds run (Runner.buildAll), all of them wanting
// the same, and nothing else in epbuild runs then.
func setUmask(mask int) int { return unix.Umask(mask) }
