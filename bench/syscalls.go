package main

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// fsyncCount counts the fsync and fdatasync calls of a process with perf's
// syscall tracepoints, from start until stop. Without a working perf, stop
// reports -1.
type fsyncCount struct {
	cmd *exec.Cmd
	out bytes.Buffer
}

func startFsyncCount(pids []int) *fsyncCount {
	f := &fsyncCount{}
	perf, err := exec.LookPath("perf")
	if err != nil {
		return f
	}
	f.cmd = exec.Command(perf, "stat", "-x,", "-e", "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync", "-p", joinInts(pids))
	f.cmd.Stderr = &f.out
	if err := f.cmd.Start(); err != nil {
		f.cmd = nil
	}
	return f
}

// stop ends the count and returns it (-1 when it could not count).
func (f *fsyncCount) stop() int64 {
	if f.cmd == nil {
		return -1
	}
	_ = f.cmd.Process.Signal(syscall.SIGINT)
	if err := f.cmd.Wait(); err != nil && !strings.Contains(err.Error(), "interrupt") {
		return -1
	}
	var n int64
	found := 0
	for line := range strings.Lines(f.out.String()) {
		fields := strings.Split(line, ",")
		if len(fields) < 3 || !strings.HasPrefix(fields[2], "syscalls:sys_enter_f") {
			continue
		}
		v, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return -1
		}
		n += v
		found++
	}
	if found != 2 {
		return -1
	}
	return n
}

// joinInts is "1,2,3", as perf's -p takes a list of processes.
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}
