package supervise

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// sysProcAttr puts the command in process group pgid (0: a group of its own) and has the
// kernel SIGKILL it when the thread that started it (see start) exits, which includes the
// supervisor dying.
func sysProcAttr(pgid int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pgid: pgid, Pdeathsig: syscall.SIGKILL}
}

// groupAlive reports whether a process of group pgid is alive. kill(-pgid, 0) also finds
// zombies (exited, not yet reaped by their new parent), so a hit is confirmed in /proc.
func groupAlive(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); err == syscall.ESRCH {
		return false
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return true // cannot tell: assume alive
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, live := procGroup(pid); live && g == pgid {
			return true
		}
	}
	return false
}

// procGroup returns the process group of pid and whether pid is alive (not a zombie).
func procGroup(pid int) (pgid int, live bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false // gone
	}
	// pid (comm) state ppid pgrp ...; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 {
		return 0, false
	}
	pgid, err = strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, false
	}
	state := f[0][0]
	return pgid, state != 'Z' && state != 'X'
}
