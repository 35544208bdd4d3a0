package builder

import "syscall"

// stepProcAttr puts a build step into the process group pgid and has the kernel kill it
// when epbuild dies.
func stepProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGKILL}
}
