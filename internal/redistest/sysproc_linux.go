package redistest

import "syscall"

// sysProcAttr puts redis-server in its own process group (so a terminal's
// Ctrl-C reaches only our process, which then cleans up, and Kill can
// signal the whole group) and has the kernel SIGKILL it if this process
// dies without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
