package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
)

// emitHolding prints a grant: the lines of acquire, or its JSON.
func emitHolding(cmd *cobra.Command, g *globals, h *client.Holding, seq string, ttl time.Duration) {
	ttlText := ttl.String()
	if ttl == 0 {
		ttlText = "the session's" // acquire --session
	}
	text := fmt.Sprintf("acquired %s\nlease_id %s\ntoken    %d\nttl      %s\nowner    %s", h.GetName(), h.GetLeaseId(), h.GetToken(), ttlText, h.GetOwner())
	if h.GetSlot() > 0 {
		text += fmt.Sprintf("\nslot     %d", h.GetSlot())
	}
	if seq != "" {
		text += "\nsequencer " + seq
	}
	emit(cmd, g, holdingJSON{Name: h.GetName(), LeaseID: h.GetLeaseId(), Token: h.GetToken(), TTLMs: ttl.Milliseconds(), Owner: h.GetOwner(), Slot: h.GetSlot(), Sequencer: seq}, text)
}

// newSession creates a session within --timeout and returns it with a
// function that closes it (releasing its locks) within --timeout.
func (g *globals) newSession(ctx context.Context, c *client.Client, opts []client.SessionOption) (*client.Session, func(), error) {
	cctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	s, err := c.NewSession(cctx, opts...)
	if err != nil {
		return nil, nil, err
	}
	return s, func() {
		ctx, cancel := context.WithTimeout(context.Background(), g.timeout)
		defer cancel()
		_ = s.Close(ctx) // releases the locks too
	}, nil
}

// acquireInSession is acquire --session: the grant goes to an existing
// session, which the command neither renews nor closes.
func acquireInSession(cmd *cobra.Command, g *globals, leaseID, name string, wait time.Duration, opts []client.AcquireOption) error {
	c, err := g.dial(cmd.Context())
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := cmd.Context()
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	h, err := c.AcquireIn(ctx, leaseID, name, wait == 0, opts...)
	if err != nil {
		return err
	}
	emitHolding(cmd, g, h, "", 0)
	return nil
}

// holdUntilInterrupted takes a lock with take in a new session, prints the
// grant and holds it until SIGINT or SIGTERM (then closes the session,
// releasing it) or until the lease may be lost (an error, lease-expired).
func holdUntilInterrupted(cmd *cobra.Command, g *globals, opts []client.SessionOption,
	take func(context.Context, *client.Session) (*client.Lock, error)) error {
	c, err := g.dial(cmd.Context())
	if err != nil {
		return err
	}
	defer c.Close()
	s, closeSession, err := g.newSession(cmd.Context(), c, opts)
	if err != nil {
		return err
	}
	defer closeSession()
	l, err := take(cmd.Context(), s)
	if err != nil {
		return err
	}
	emitHolding(cmd, g, l.Holding(), l.Sequencer(), s.TTL())
	select {
	case <-cmd.Context().Done():
		return nil
	case <-l.Done():
		cause := context.Cause(l.Context())
		if errors.Is(cause, client.ErrLeaseLost) {
			return api.Errorf(api.CodeLeaseExpired, "%s: no longer holding %s", cause, l.Name())
		}
		return cause
	}
}

func newLockCmd(g *globals) *cobra.Command {
	var (
		ttl   time.Duration
		owner string
		mf    modeFlags
	)
	cmd := &cobra.Command{
		Use:   "lock NAME",
		Short: "Take a lock and hold it until interrupted",
		Long: `Take the lock NAME (waiting in the queue), print the grant, and keep its session alive until
SIGINT or SIGTERM; then close the session, releasing the lock. If the lease may be lost
(no renewal confirmed before the local safe deadline), exit with code lease-expired.`,
		Example: `  leasehold lock report:417:rebuild --ttl 10s`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := mf.options()
			if err != nil {
				return err
			}
			return holdUntilInterrupted(cmd, g, sessionOptions(ttl, owner, false), func(ctx context.Context, s *client.Session) (*client.Lock, error) {
				return s.Acquire(ctx, args[0], opts...)
			})
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "session TTL, at most 1h (below 1s is raised to 1s); renewed every TTL/3")
	cmd.Flags().StringVar(&owner, "owner", "", "owner label shown to operators (default: user@host:pid)")
	mf.register(cmd)
	return cmd
}
