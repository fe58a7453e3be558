//go:build unix && !linux

package supervise

import "syscall"

// sysProcAttr puts the command in process group pgid (0: a group of its own). There is no
// parent-death signal outside Linux; the sentinel (see startSentinel) kills the group when
// the supervisor dies.
func sysProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid}
}

// groupAlive reports whether a process of group pgid exists (zombies included).
func groupAlive(pgid int) bool {
	return syscall.Kill(-pgid, 0) != syscall.ESRCH
}
