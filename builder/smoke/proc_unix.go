//go:build unix

package smoke

import (
	"os/exec"
	"syscall"
)

// ownGroup starts the command in a process group of its own, so that killGroup ends
// it with everything it started (and a terminal's ^C reaches epbuild, which ends it).
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killGroup kills the command's process group. Once the leader is reaped the group's
// id stays taken while any member lives, so this reaches only what the rank started.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
