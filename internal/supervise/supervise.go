package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Lease is the holder's view of the lease the command runs under. client.Session (Deadline)
// together with client.Lock (Done) provide it.
type Lease interface {
	// Deadline returns the local safe deadline: until then the lease is certainly held. It
	// only ever moves later, as renewals are confirmed. Safe for concurrent use.
	Deadline() time.Time
	// Done is closed when the lease may be lost (no renewal before the deadline, or the
	// server said it expired) or the lock was released.
	Done() <-chan struct{}
}

// Defaults.
const (
	// DefaultGroupWait bounds how long Run waits for the group to vanish after SIGKILL.
	DefaultGroupWait = 5 * time.Second
	// pipeGrace is how long Wait keeps copying a pipe to a non-file Stdout/Stderr after the
	// command exited.
	pipeGrace = time.Second
	// pollInterval is how often Run checks whether the group is gone.
	pollInterval = 10 * time.Millisecond
)

// Config describes the command to supervise.
type Config struct {
	// Argv is the command and its arguments. Required.
	Argv []string
	// Shell runs strings.Join(Argv, " ") through `/bin/sh -c` instead of executing Argv.
	Shell bool
	// Env is the command's environment; nil means the caller's.
	Env []string
	// Stdin, Stdout and Stderr are the command's; nil means /dev/null (os/exec's default).
	// A writer that is not an *os.File is fed through a pipe: output that processes left in
	// the group write more than pipeGrace after the command exited is dropped.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// KillAfter is how long before the lease's deadline the group gets SIGTERM (SIGKILL
	// follows at the deadline), and how long leftover processes get after the command
	// exited. Zero sends SIGKILL only. Keep it at most MaxKillAfter.
	KillAfter time.Duration
	// GroupWait bounds the wait for the group to vanish after SIGKILL (0: DefaultGroupWait).
	GroupWait time.Duration
	// Signals, if not nil, carries signals to forward to the command's group (the caller
	// subscribes with signal.Notify).
	Signals <-chan os.Signal
	// Logger receives a line for every signal Run decides to send. Nil discards.
	Logger *slog.Logger
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	switch {
	case len(c.Argv) == 0 || c.Argv[0] == "":
		return fmt.Errorf("%w: no command", ErrInvalidConfig)
	case c.KillAfter < 0:
		return fmt.Errorf("%w: kill-after %v is negative", ErrInvalidConfig, c.KillAfter)
	case c.GroupWait < 0:
		return fmt.Errorf("%w: group wait %v is negative", ErrInvalidConfig, c.GroupWait)
	}
	return nil
}

// MaxKillAfter returns the longest KillAfter for a lease whose deadline is window after each
// renewal was sent and which is renewed every interval. SIGTERM goes at deadline − KillAfter;
// for a healthy lease the deadline never comes closer than window − interval (minus the
// renewal's round trip), so KillAfter must stay below that, with a slack of half an interval
// (at most 1 s) for the round trip and a retry. A lease whose window does not exceed its
// interval by that much gets 0: SIGKILL at the deadline, no SIGTERM.
func MaxKillAfter(window, interval time.Duration) time.Duration {
	slack := min(interval/2, time.Second)
	return max(window-interval-slack, 0)
}

// Result is how the command ended.
type Result struct {
	// ExitCode is the command's exit status, or 128+N when signal N killed it.
	ExitCode int
	// LeaseLost reports that the lease's Done closed while the command ran.
	LeaseLost bool
	// TermSent and KillSent are when Run sent SIGTERM and SIGKILL to the group because the
	// deadline came near (zero when it did not).
	TermSent, KillSent time.Time
}

// Run starts the command in a process group of its own and supervises it under lease until
// the command and every process left in its group are gone (see the package comment). ctx
// ending is treated like a lost lease: SIGTERM now, SIGKILL KillAfter later or at the
// deadline. Run returns an error wrapping ErrStart when the command cannot start (nothing
// ran), ErrGroupSurvived when the group outlived SIGKILL by GroupWait, and otherwise the
// command's Result.
func Run(ctx context.Context, lease Lease, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if cfg.GroupWait == 0 {
		cfg.GroupWait = DefaultGroupWait
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The sentinel starts first and leads the group the command joins, so that no moment
	// exists in which the command runs and a dying supervisor would leave its children.
	sentinel, err := startSentinel()
	if err != nil { // no /bin/sh: Pdeathsig still covers the command
		log.Debug("no sentinel for the command's group", "err", err)
	}
	cmd := command(cfg, sentinel.pgid())
	exited, err := start(cmd)
	if err != nil {
		sentinel.stop()
		return Result{}, fmt.Errorf("%w: %s: %w", ErrStart, cmd.Args[0], err)
	}
	started()
	pgid := sentinel.pgid()
	if pgid == 0 {
		pgid = cmd.Process.Pid
	}
	s := &supervisor{cfg: cfg, log: log, lease: lease, pgid: pgid, name: cfg.Argv[0]}
	waitErr := s.watch(ctx, exited)
	sentinel.stop()
	res := s.res
	res.ExitCode = exitCode(waitErr)
	if err := s.reapGroup(); err != nil {
		return res, err
	}
	return res, nil
}

// started is called once the command started; a test replaces it to stall Run there.
var started = func() {}

// command is the command of cfg, to run in process group pgid (0: a group of its own).
func command(cfg Config, pgid int) *exec.Cmd {
	var cmd *exec.Cmd
	if cfg.Shell {
		cmd = exec.Command("/bin/sh", "-c", strings.Join(cfg.Argv, " "))
	} else {
		cmd = exec.Command(cfg.Argv[0], cfg.Argv[1:]...)
	}
	cmd.Env = cfg.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = cfg.Stdin, cfg.Stdout, cfg.Stderr
	cmd.SysProcAttr = sysProcAttr(pgid)
	// Leftover processes may hold the output pipes open; Wait must still return when the
	// command exits, so that they can be stopped.
	cmd.WaitDelay = pipeGrace
	return cmd
}

// start starts cmd from a goroutine locked to its OS thread, which stays locked until the
// child is reaped: the parent-death signal fires when the thread that forked the child
// exits, and a locked thread is never handed to another goroutine that could end it. The
// goroutine is owned by the returned channel: it ends once it has sent Wait's error there.
func start(cmd *exec.Cmd) (<-chan error, error) {
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// sentinel is a shell that leads the command's process group and SIGKILLs the whole group
// when the pipe from this process reaches EOF, which happens when this process dies, however
// it dies: the parent-death signal reaches only the command itself, the sentinel also its
// descendants. It ignores the signals Run forwards.
type sentinel struct {
	cmd  *exec.Cmd
	pipe *os.File // write end; closing it (or dying) fires the sentinel
}

const sentinelScript = `trap "" INT TERM HUP; read _; kill -9 0`

// startSentinel starts the sentinel in a new process group of its own, for the command to join.
func startSentinel() (*sentinel, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", sentinelScript)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = r.Close()
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	return &sentinel{cmd: cmd, pipe: w}, nil
}

// pgid is the group the sentinel leads; 0 for a nil sentinel.
func (s *sentinel) pgid() int {
	if s == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// stop kills the sentinel alone (the group is left as it is) and reaps it. A nil sentinel is
// a no-op.
func (s *sentinel) stop() {
	if s == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = s.pipe.Close()
}

// supervisor is the state of one Run; used by Run's goroutine only.
type supervisor struct {
	cfg   Config
	log   *slog.Logger
	lease Lease
	pgid  int
	name  string
	res   Result

	stopAt time.Time // when the lease was lost or ctx ended (zero while neither)
}

// watch waits for the command to exit, forwarding signals and sending SIGTERM and SIGKILL
// on the lease's schedule. It returns Wait's error.
func (s *supervisor) watch(ctx context.Context, exited <-chan error) error {
	leaseDone, ctxDone := s.lease.Done(), ctx.Done()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		if at, ok := s.nextAction(); ok {
			timer.Reset(time.Until(at))
		}
		select {
		case err := <-exited:
			return err
		case sig := <-s.cfg.Signals:
			if ss, ok := sig.(syscall.Signal); ok {
				s.signal(ss, "forwarding "+ss.String())
			}
		case <-leaseDone:
			leaseDone = nil
			s.res.LeaseLost = true
			s.stopAt = time.Now()
		case <-ctxDone:
			ctxDone = nil
			if s.stopAt.IsZero() {
				s.stopAt = time.Now()
			}
		case <-timer.C:
			s.act()
		}
		timer.Stop()
		select { // drain a fire that raced Stop
		case <-timer.C:
		default:
		}
	}
}

// termAt and killAt are when SIGTERM and SIGKILL are due now.
func (s *supervisor) termAt() time.Time {
	at := s.lease.Deadline().Add(-s.cfg.KillAfter)
	if !s.stopAt.IsZero() && s.stopAt.Before(at) {
		at = s.stopAt
	}
	return at
}

func (s *supervisor) killAt() time.Time {
	at := s.lease.Deadline()
	if !s.stopAt.IsZero() {
		at = minTime(at, s.stopAt.Add(s.cfg.KillAfter))
	}
	return at
}

// nextAction returns when the next signal is due; false when both were sent.
func (s *supervisor) nextAction() (time.Time, bool) {
	switch {
	case s.res.TermSent.IsZero() && s.cfg.KillAfter > 0:
		return s.termAt(), true
	case s.res.KillSent.IsZero():
		return s.killAt(), true
	}
	return time.Time{}, false
}

// act sends whichever signal is due, re-reading the deadline (a renewal may have moved it).
func (s *supervisor) act() {
	now := time.Now()
	if s.res.TermSent.IsZero() && s.cfg.KillAfter > 0 {
		if now.Before(s.termAt()) {
			return
		}
		s.res.TermSent = now
		s.signal(syscall.SIGTERM, fmt.Sprintf("%s: sending SIGTERM to %s (SIGKILL follows at %s)",
			s.reason(), s.name, s.killAt().Format(time.RFC3339Nano)))
		_ = syscall.Kill(-s.pgid, syscall.SIGCONT) // a stopped process must run to handle SIGTERM
		return
	}
	if s.res.KillSent.IsZero() && !now.Before(s.killAt()) {
		s.res.KillSent = now
		s.signal(syscall.SIGKILL, s.reason()+": sending SIGKILL to "+s.name)
	}
}

func (s *supervisor) reason() string {
	switch {
	case s.res.LeaseLost:
		return "lease lost"
	case !time.Now().Before(s.lease.Deadline()):
		return "lease lost: no renewal confirmed before the safe deadline"
	case !s.stopAt.IsZero():
		return "stopping"
	default:
		return "no renewal confirmed and the lease's safe deadline is near"
	}
}

func (s *supervisor) signal(sig syscall.Signal, msg string) {
	s.log.Warn(msg, "pgid", s.pgid)
	if err := syscall.Kill(-s.pgid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.log.Error("signal the command's process group", "pgid", s.pgid, "signal", sig.String(), "err", err)
	}
}

// reapGroup returns once no live process is left in the group: leftovers of a command that
// exited get SIGTERM, then SIGKILL after KillAfter (or at the deadline if sooner).
func (s *supervisor) reapGroup() error {
	if !groupAlive(s.pgid) {
		return nil
	}
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	killAt := time.Now()
	if s.res.KillSent.IsZero() && s.cfg.KillAfter > 0 {
		s.signal(syscall.SIGTERM, s.name+" exited: sending SIGTERM to the processes left in its group")
		_ = syscall.Kill(-s.pgid, syscall.SIGCONT)
		killAt = minTime(killAt.Add(s.cfg.KillAfter), s.lease.Deadline())
	}
	var giveUp time.Time
	for range ticker.C {
		if !groupAlive(s.pgid) {
			return nil
		}
		now := time.Now()
		if giveUp.IsZero() && !now.Before(killAt) {
			s.signal(syscall.SIGKILL, "sending SIGKILL to the processes left in the group of "+s.name)
			giveUp = now.Add(s.cfg.GroupWait)
		}
		if !giveUp.IsZero() && now.After(giveUp) {
			return fmt.Errorf("%w: group %d of %s still has live processes %v after SIGKILL", ErrGroupSurvived, s.pgid, s.name, s.cfg.GroupWait)
		}
	}
	return nil // unreachable: a ticker's channel is never closed
}

// exitCode maps Wait's error to an exit status: the command's own, or 128+N for signal N.
func exitCode(err error) int {
	if errors.Is(err, exec.ErrWaitDelay) { // exited 0; a leftover held a pipe open
		return 0
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		if err != nil {
			return 1
		}
		return 0
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
