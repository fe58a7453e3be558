package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/supervise"
)

// runFlags are the flags run and elect share.
type runFlags struct {
	ttl, killAfter time.Duration
	owner          string
	shell, seq     bool
	verbose        bool
	// queues is set by the command when its acquire may wait in the
	// queue: then a waiting run says so (with -v, or on a terminal).
	queues bool
}

func (f *runFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.DurationVar(&f.ttl, "ttl", 10*time.Second, "session TTL, at most 1h (below 1s is raised to 1s); renewed every TTL/3")
	fs.StringVar(&f.owner, "owner", "", "owner label shown to operators (default: user@host:pid)")
	fs.DurationVar(&f.killAfter, "kill-after", 3*time.Second, "SIGTERM the command this long before SIGKILL at the lease's safe deadline; capped at TTL·0.98 − 0.1s − TTL/3 − min(TTL/6, 1s) (5.4s for a 10s TTL)")
	fs.BoolVar(&f.shell, "shell", false, "run CMD ARGS... joined by spaces through /bin/sh -c")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "say on stderr when it waits in the queue, and for whom (always when stderr is a terminal)")
	sequencerFlag(fs, &f.seq)
}

// announceWait prints, when the lock is held by someone else, that this
// command waits for it and for whom: a run started by hand or from cron
// that sits in the queue says so instead of hanging silently.
func announceWait(ctx context.Context, cmd *cobra.Command, c *client.Client, name string, rf runFlags) {
	if !rf.queues || !(rf.verbose || isTerminal(cmd.ErrOrStderr())) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	info, err := c.Status(ctx, name, client.Stale())
	if err != nil {
		return // only a courtesy: the acquire reports what matters
	}
	holders := info.GetHolders()
	if h := info.GetHolder(); h != nil {
		holders = []*pb.Holding{h}
	}
	if len(holders) == 0 {
		return
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "leasehold %s: waiting for %s: held by %q (token %d)", cmd.Name(), name, holders[0].GetOwner(), holders[0].GetToken())
	if n := len(holders); n > 1 {
		fmt.Fprintf(cmd.ErrOrStderr(), " and %d more", n-1)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "; position %d in the queue\n", len(info.GetWaiters())+1)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// errSkipped ends a run --if-free whose lock is held: nothing ran, exit 0.
var errSkipped = errors.New("skipped: the lock is held")

func newRunCmd(g *globals) *cobra.Command {
	var (
		wait, lockDelay time.Duration
		rf              runFlags
		mf              modeFlags
		ifFree          bool
	)
	cmd := &cobra.Command{
		Use:   "run NAME [flags] -- CMD [ARGS...]",
		Short: "Hold a lock while a command runs; stop the command before the lease may be lost",
		Long: `Acquire NAME (waiting in the queue by default), keep the session alive, and run CMD with
LEASEHOLD_NAME, LEASEHOLD_TOKEN, LEASEHOLD_LEASE_ID, LEASEHOLD_SLOT (the permit's slot with
--permits, else 0) and LEASEHOLD_SEQUENCER (empty without --sequencer) in its environment, in a process group
of its own. If no renewal is confirmed in time, the group gets SIGTERM at --kill-after before
the local safe deadline and SIGKILL at the deadline; if the server says the lease expired, it
gets SIGTERM at once and SIGKILL --kill-after later (at the latest at the deadline). On Linux,
CMD is killed if leasehold run itself is killed. When CMD exits, processes it left in its group
get SIGTERM, then SIGKILL after --kill-after, and the lock is released only once the whole
group is gone. The exit status is CMD's (128+N if signal N killed it), or 5 (lease-expired)
when the lease was lost while CMD ran, whatever CMD answered; before CMD starts, failures
exit with the error code's status (docs/operating/limits-and-errors.md). With --if-free a held NAME is not waited
for: run exits 0 without starting CMD. A run that waits in the queue says so on stderr (with
-v, or when stderr is a terminal). SIGINT, SIGTERM and SIGHUP sent
to leasehold run are passed on to CMD's group.`,
		Example: `  leasehold run report:417:rebuild --ttl 10s -- ./rebuild.sh --report 417
  leasehold run nightly:backup --if-free -- ./backup.sh     # from cron: skip if the last run still runs
  leasehold run report:417:rebuild --shell -- './rebuild.sh 417 && ./publish.sh 417'`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return usageErr("usage: leasehold run NAME [flags] -- CMD [ARGS...]")
			}
			opts, err := mf.options()
			if err != nil {
				return err
			}
			opts = append(opts, client.WithLockDelay(lockDelay))
			if ifFree {
				if cmd.Flags().Changed("wait") {
					return usageErr("--if-free and --wait exclude each other")
				}
				return holdAndRun(cmd, g, args[0], args[1:], rf, func(ctx context.Context, s *client.Session) (*client.Lock, error) {
					l, err := s.TryAcquire(ctx, args[0], opts...)
					if errors.Is(err, client.ErrLocked) || errors.Is(err, client.ErrLockDelay) {
						fmt.Fprintf(cmd.ErrOrStderr(), "leasehold run: %s; %s not started (--if-free)\n", errorMessage(err, api.CodeOf(err)), args[1])
						return nil, errSkipped
					}
					return l, err
				})
			}
			rf.queues = wait != 0
			return holdAndRun(cmd, g, args[0], args[1:], rf, func(ctx context.Context, s *client.Session) (*client.Lock, error) {
				return acquireLock(ctx, s, args[0], wait, opts...)
			})
		},
	}
	rf.register(cmd)
	mf.register(cmd)
	f := cmd.Flags()
	f.DurationVar(&wait, "wait", -1, "wait in the queue up to this long; 0 fails at once with code locked; negative waits until granted")
	f.Lookup("wait").DefValue = "forever"
	f.BoolVar(&ifFree, "if-free", false, "run CMD only if NAME is free now; when it is held, exit 0 at once without running it (a cron job that must not overlap itself)")
	f.DurationVar(&lockDelay, "lock-delay", 0, "after this holding ends by expiry, keep the name free for this long (max 60s)")
	return cmd
}

// holdAndRun runs argv under the lock that take acquires in a new session,
// as leasehold run and leasehold elect do (see run's help).
func holdAndRun(cmd *cobra.Command, g *globals, name string, argv []string, rf runFlags,
	take func(context.Context, *client.Session) (*client.Lock, error)) error {
	killAfter := rf.killAfter
	if killAfter < 0 {
		return usageErr("--kill-after %v is negative", killAfter)
	}
	// Signals go to the command's group; leasehold run ends when it does.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	interrupted := false // written by the goroutine, read after wg.Wait
	wg.Go(func() {
		select {
		case <-sigs:
			interrupted = true
			cancel() // interrupted while waiting for the lock
		case <-ctx.Done():
		}
	})

	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	sent := time.Now()
	s, closeSession, err := g.newSession(ctx, c, sessionOptions(rf.ttl, rf.owner, rf.seq))
	if err != nil {
		return err
	}
	// The lease's window, measured before a wait in the queue moves the
	// deadline away from sent.
	window := s.Deadline().Sub(sent)
	announceWait(ctx, cmd, c, name, rf)
	l, err := take(ctx, s)
	if errors.Is(err, errSkipped) {
		closeSession()
		return nil
	}
	if err != nil {
		closeSession()
		return err
	}
	cancel() // stop the signal goroutine above; the command's group gets signals now
	wg.Wait()
	if interrupted { // a signal raced the grant: do not start the command
		closeSession()
		return fmt.Errorf("leasehold %s: interrupted before %s started: %w", cmd.Name(), argv[0], context.Canceled)
	}

	// SIGTERM must only ever go to a command whose renewal is overdue: cap
	// --kill-after by the lease's window and keepalive interval (the client's TTL/3).
	maxKill := supervise.MaxKillAfter(window, s.TTL()/3)
	if killAfter > maxKill {
		if cmd.Flags().Changed("kill-after") {
			fmt.Fprintf(cmd.ErrOrStderr(), "leasehold %s: --kill-after %v lowered to %v: with a %v TTL a longer one would stop a healthy command\n",
				cmd.Name(), killAfter, maxKill.Round(time.Millisecond), s.TTL())
		}
		killAfter = maxKill
	}
	res, err := supervise.Run(context.Background(), runLease{s, l}, supervise.Config{
		Argv:  argv,
		Shell: rf.shell,
		Env: append(os.Environ(),
			"LEASEHOLD_NAME="+name,
			"LEASEHOLD_TOKEN="+strconv.FormatUint(l.Token(), 10),
			"LEASEHOLD_LEASE_ID="+l.LeaseID(),
			"LEASEHOLD_SLOT="+strconv.FormatUint(uint64(l.Slot()), 10),
			"LEASEHOLD_SEQUENCER="+l.Sequencer(),
		),
		Stdin: os.Stdin, Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(),
		KillAfter: killAfter,
		Signals:   sigs,
		Logger:    runLogger(cmd, l),
	})
	switch {
	case errors.Is(err, supervise.ErrStart):
		closeSession()
		return usageErr("%v", err)
	case errors.Is(err, supervise.ErrGroupSurvived):
		s.Orphan() // not released: the server expires it after the TTL
		return fmt.Errorf("leasehold %s: %w; the lock is not released and expires after the TTL", cmd.Name(), err)
	case err != nil:
		closeSession()
		return err
	}
	closeSession()
	if res.LeaseLost || !res.TermSent.IsZero() || !res.KillSent.IsZero() {
		// The lease was lost, or its safe deadline came with no renewal
		// confirmed and CMD was stopped for it: whatever CMD answered, a
		// wrapper must be able to tell this from CMD's own failure.
		return api.Errorf(api.CodeLeaseExpired, "the lease of %s was lost while %s ran; it was stopped (its status %d)", name, argv[0], res.ExitCode)
	}
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	return nil
}

// runLease is the lease a command runs under: the session's safe deadline, and the lock's
// loss (which includes the session's).
type runLease struct {
	s *client.Session
	l *client.Lock
}

func (r runLease) Deadline() time.Time   { return r.s.Deadline() }
func (r runLease) Done() <-chan struct{} { return r.l.Done() }

// runLogger prints the supervisor's decisions as "leasehold run: MSG (CAUSE) key=value"
// lines on stderr, CAUSE being why the lock's lease ended, once it has.
func runLogger(cmd *cobra.Command, l *client.Lock) *slog.Logger {
	return slog.New(&lineHandler{w: cmd.ErrOrStderr(), lock: l, cmd: cmd.Name()})
}

// lineHandler is a slog.Handler writing one plain line per record at Info and above.
type lineHandler struct {
	w    io.Writer // written by Run's goroutine only
	lock *client.Lock
	cmd  string // run or elect
}

func (h *lineHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString("leasehold " + h.cmd + ": " + r.Message)
	if cause := context.Cause(h.lock.Context()); cause != nil {
		b.WriteString(" (" + cause.Error() + ")")
	}
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	b.WriteString("\n")
	_, err := io.WriteString(h.w, b.String())
	return err
}

func (h *lineHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *lineHandler) WithGroup(string) slog.Handler      { return h }
