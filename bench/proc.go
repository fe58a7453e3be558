package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clkTck is USER_HZ, the unit of utime and stime in /proc/PID/stat (100
// on every Linux this runs on).
const clkTck = 100

// procCPU returns the CPU time process pid has used: the sum over its
// threads of the scheduler's run time (/proc/PID/task/TID/schedstat, in
// nanoseconds), or user+system time from /proc/PID/stat (in 10 ms ticks,
// too coarse for a quiet server) where schedstat is missing.
func procCPU(pid int) (time.Duration, error) {
	if d, err := schedCPU(pid); err == nil {
		return d, nil
	}
	return statCPU(pid)
}

// schedCPU is the run time of pid's live threads. A Go server's threads
// live as long as it does, so none of its time is lost to a thread that
// ended.
func schedCPU(pid int) (time.Duration, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread ended meanwhile
		}
		if err != nil {
			return 0, err
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return 0, fmt.Errorf("/proc/%d/task/%s/schedstat: empty", pid, t.Name())
		}
		ns, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, err
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// statCPU is pid's user+system time from /proc/PID/stat.
func statCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after its ")" are fixed.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clkTck, nil
}

// procsCPU is the CPU time of every process in pids together.
func procsCPU(pids []int) (time.Duration, error) { return sumOver(pids, procCPU) }

// procsRSS is the resident set size of every process in pids together.
func procsRSS(pids []int) (int64, error) { return sumOver(pids, procRSS) }

// sumOver is the sum of f over pids, or f's first error.
func sumOver[T time.Duration | int64](pids []int, f func(int) (T, error)) (T, error) {
	var sum T
	for _, pid := range pids {
		v, err := f(pid)
		if err != nil {
			return 0, err
		}
		sum += v
	}
	return sum, nil
}

// procRSS returns the resident set size of process pid in bytes.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// selfCPU returns the user+system CPU time of this process (the clients).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// freePort returns a port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// freePorts returns n distinct ports on 127.0.0.1 that were free a moment
// ago (all listened on at once, so none repeats).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// pids are the ids of the processes in ps.
func pids(ps []*process) []int {
	var ids []int
	for _, p := range ps {
		if p != nil {
			ids = append(ids, p.pid())
		}
	}
	return ids
}

// stopAll stops every process in ps that was started, all at once.
func stopAll(ps []*process) error {
	errc := make(chan error, len(ps))
	for _, p := range ps {
		go func() {
			if p == nil {
				errc <- nil
				return
			}
			errc <- p.stop()
		}()
	}
	var errs []error
	for range ps {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

// process is a server process started by the harness.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // Wait's result; read after done
	log  *bytes.Buffer // stderr and stdout, for errors
}

func startProcess(name string, args []string, env []string) (*process, error) {
	p := &process{cmd: exec.Command(name, args...), done: make(chan struct{}), log: &bytes.Buffer{}}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout = &syncWriter{b: p.log}
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// kill sends SIGKILL (a crash: no shutdown, no final fsync) and waits
// for the process to exit.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// stop sends SIGTERM and waits up to 10 s, then kills.
func (p *process) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop on SIGTERM", p.cmd.Path)
	}
}

// waitReady polls ready every 20 ms until it succeeds, the process exits,
// or 60 s pass.
func (p *process) waitReady(ctx context.Context, ready func(context.Context) error) error {
	err := pollUntil(ctx, time.Minute, 20*time.Millisecond, p.done, ready)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errGaveUp):
		return fmt.Errorf("%s exited (%v): %s", p.cmd.Path, p.err, p.output())
	default:
		return fmt.Errorf("%s not ready: %w", p.cmd.Path, err)
	}
}

// errGaveUp: pollUntil's stop channel closed.
var errGaveUp = errors.New("gave up")

// pollUntil calls f every interval until it returns nil, and returns f's
// last error when ctx ends or d has passed, or errGaveUp when stop closes
// (nil stop: never).
func pollUntil(ctx context.Context, d, interval time.Duration, stop <-chan struct{}, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		err := f(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-stop:
			return errGaveUp
		case <-ctx.Done():
			return fmt.Errorf("%w (%v)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

func (p *process) output() string {
	w := p.cmd.Stdout.(*syncWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.b.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}
