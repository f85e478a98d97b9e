package bench

import "syscall"

// childSysProcAttr makes the kernel kill the child node when the bench's
// thread that started it exits, the bench killed or interrupted included.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
