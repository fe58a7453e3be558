package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/client"
)

func newRunCmd(g *globals) *cobra.Command {
	var (
		ttl, wait, lockDelay, killAfter time.Duration
		owner                           string
		seq                             bool
	)
	cmd := &cobra.Command{
		Use:   "run NAME [flags] -- CMD [ARGS...]",
		Short: "Hold a lock while a command runs; SIGTERM the command if the lease is lost",
		Long: `Acquire NAME (waiting in the queue by default), keep the session alive, and run CMD with
LEASEHOLD_NAME, LEASEHOLD_TOKEN, LEASEHOLD_LEASE_ID and LEASEHOLD_SEQUENCER (empty without
--sequencer) in its environment. If the lease may be
lost (no renewal confirmed before the local safe deadline, or the server expired it), CMD gets
SIGTERM, then SIGKILL after --kill-after. When CMD ends the lock is released. The exit status is
CMD's; before CMD starts, failures exit with the error code's status (see the README).
SIGINT and SIGTERM sent to leasehold run are passed on to CMD.`,
		Example: `  leasehold run report:417:rebuild --ttl 10s -- ./rebuild.sh --report 417`,
		Args:    cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, argv := args[0], args[1:]
			if cmd.ArgsLenAtDash() != 1 {
				return usageErr("usage: leasehold run NAME [flags] -- CMD [ARGS...]")
			}
			// Signals go to the child; leasehold run ends when it does.
			sigs := make(chan os.Signal, 4)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				select {
				case <-sigs:
					cancel() // interrupted while waiting for the lock
				case <-ctx.Done():
				}
			}()

			c, err := g.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			cctx, ccancel := context.WithTimeout(ctx, g.timeout)
			s, err := c.NewSession(cctx, sessionOptions(ttl, owner, seq)...)
			ccancel()
			if err != nil {
				return err
			}
			closeSession := func() {
				cctx, ccancel := context.WithTimeout(context.Background(), g.timeout)
				defer ccancel()
				_ = s.Close(cctx) // releases the lock too
			}
			l, err := acquireLock(ctx, s, name, wait, client.WithLockDelay(lockDelay))
			if err != nil {
				closeSession()
				return err
			}
			cancel() // stop the signal goroutine above; the child gets signals now

			child := exec.Command(argv[0], argv[1:]...)
			child.Stdin, child.Stdout, child.Stderr = os.Stdin, cmd.OutOrStdout(), cmd.ErrOrStderr()
			child.Env = append(os.Environ(),
				"LEASEHOLD_NAME="+name,
				"LEASEHOLD_TOKEN="+strconv.FormatUint(l.Token(), 10),
				"LEASEHOLD_LEASE_ID="+l.LeaseID(),
				"LEASEHOLD_SEQUENCER="+l.Sequencer(),
			)
			if err := child.Start(); err != nil {
				closeSession()
				return usageErr("start %s: %v", argv[0], err)
			}
			exited := make(chan error, 1)
			go func() { exited <- child.Wait() }()
			var waitErr error
			killed := (<-chan time.Time)(nil)
		loop:
			for {
				select {
				case waitErr = <-exited:
					break loop
				case sig := <-sigs:
					_ = child.Process.Signal(sig)
				case <-l.Done():
					if killed == nil {
						fmt.Fprintf(cmd.ErrOrStderr(), "leasehold run: lease lost (%v): sending SIGTERM to %s\n", context.Cause(l.Context()), argv[0])
						_ = child.Process.Signal(syscall.SIGTERM)
						killed = time.After(killAfter)
					}
				case <-killed:
					_ = child.Process.Kill()
				}
			}
			closeSession()
			var ee *exec.ExitError
			if errors.As(waitErr, &ee) {
				code := ee.ExitCode()
				if code < 0 { // killed by a signal
					if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
						code = 128 + int(ws.Signal())
					}
				}
				return exitError{code}
			}
			if waitErr != nil {
				return waitErr
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&ttl, "ttl", 10*time.Second, "session TTL (granted within [1s, 1h]); renewed every TTL/3")
	f.StringVar(&owner, "owner", "", "owner label shown to operators (default: hostname:pid)")
	f.DurationVar(&wait, "wait", -1, "wait in the queue up to this long; 0 fails at once with code locked; negative waits until granted")
	f.DurationVar(&lockDelay, "lock-delay", 0, "after this holding ends by expiry, keep the name free for this long (max 60s)")
	sequencerFlag(f, &seq)
	f.DurationVar(&killAfter, "kill-after", 10*time.Second, "SIGKILL the command this long after SIGTERM for a lost lease")
	cmd.PreRun = func(*cobra.Command, []string) {
		if owner == "" {
			host, _ := os.Hostname()
			owner = fmt.Sprintf("%s:%d", host, os.Getpid())
		}
	}
	return cmd
}
