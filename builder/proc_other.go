//go:build !linux

package builder

import "syscall"

// stepProcAttr puts a build step into the process group pgid (no parent-death signal
// here: the group's watcher alone ends what epbuild leaves behind).
func stepProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
}
