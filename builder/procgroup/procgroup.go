// Package procgroup runs a command in a process group of its own that nothing outlives:
// the build steps and `epbuild test`'s tests run through it, so that an interrupt or a
// deadline stops the command and everything it started, and what it leaves behind when
// it exits is killed too. It uses only the standard library.
package procgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// KillGrace is how long a group has to exit after SIGTERM before it is killed.
const KillGrace = 3 * time.Second

// Run runs cmd in a process group of its own and waits for it. When ctx ends, the
// group gets SIGTERM, then SIGKILL after KillGrace. When cmd exits, whatever it left
// running in its group is killed.
//
// The group belongs to a watcher started first: /bin/sh reading a pipe whose only
// writer is this process. cmd joins the watcher's group. When the pipe closes (cmd
// finished, or this process died, even by SIGKILL, since the kernel closes its files),
// the watcher kills the group, itself included. The direct child also gets SIGKILL when
// this process dies (PR_SET_PDEATHSIG on Linux), the grandchildren through the watcher.
func Run(ctx context.Context, cmd *exec.Cmd) error {
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	watcher := exec.Command("/bin/sh", "-c", watcherScript)
	watcher.Stdin = r
	watcher.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = watcher.Start()
	r.Close()
	if err != nil {
		w.Close()
		return fmt.Errorf("start the process-group watcher (/bin/sh): %w", err)
	}
	pgid := watcher.Process.Pid
	stopWatcher := func() {
		w.Close() // the watcher kills what is left of the group, then itself
		_ = watcher.Wait()
	}
	cmd.SysProcAttr = procAttr(pgid)
	if err := cmd.Start(); err != nil {
		stopWatcher()
		return err
	}
	exited, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(KillGrace):
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
		case <-exited:
		}
	}()
	err = cmd.Wait()
	close(exited)
	<-stopped // no signal goes to the group once its watcher is reaped (its id is free)
	stopWatcher()
	return err
}

// watcherScript ignores the signals meant for the command (the group's SIGTERM above, a
// terminal's SIGINT or SIGHUP), waits for the end of its stdin, and kills its group.
const watcherScript = `trap '' HUP INT TERM; read x; kill -KILL 0`
