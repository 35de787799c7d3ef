//go:build !linux

package redistest

import "syscall"

// sysProcAttr puts redis-server in its own process group, so a terminal's
// Ctrl-C reaches only our process and Kill can signal the whole group.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
