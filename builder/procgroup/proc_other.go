//go:build !linux

package procgroup

import "syscall"

// procAttr puts a command into the process group pgid (no parent-death signal
// here: the group's watcher alone ends what epbuild leaves behind).
func procAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
}
