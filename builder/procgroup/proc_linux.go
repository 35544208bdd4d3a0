package procgroup

import "syscall"

// procAttr puts a command into the process group pgid and has the kernel kill it
// when epbuild dies.
func procAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGKILL}
}
