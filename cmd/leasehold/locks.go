package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/client"
)

// holdingJSON is the CLI's JSON form of a grant.
type holdingJSON struct {
	Name    string `json:"name"`
	LeaseID string `json:"lease_id"`
	Token   uint64 `json:"token"`
	TTLMs   int64  `json:"ttl_ms"`
	Owner   string `json:"owner"`
	Slot    uint32 `json:"slot,omitempty"` // the semaphore slot (--permits)

	Sequencer string `json:"sequencer,omitempty"` // with --sequencer (sequencer.go)
}

// acquireLock applies the shared meaning of --wait: negative waits until granted,
// 0 fails at once when the name is held, d waits at most d.
func acquireLock(ctx context.Context, s *client.Session, name string, wait time.Duration, opts ...client.AcquireOption) (*client.Lock, error) {
	if wait == 0 {
		l, err := s.TryAcquire(ctx, name, opts...)
		if errors.Is(err, client.ErrLocked) {
			return nil, api.Errorf(api.CodeLocked, "%s; --wait D queues for it", errorMessage(err, api.CodeLocked))
		}
		return l, err
	}
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, wait)
		defer cancel()
	}
	l, err := s.Acquire(ctx, name, opts...)
	if err != nil && wait > 0 && ctx.Err() == context.DeadlineExceeded {
		return nil, api.Errorf(api.CodeDeadlineExceeded, "%q still held after waiting %s", name, wait)
	}
	return l, err
}

func newAcquireCmd(g *globals) *cobra.Command {
	var (
		ttl, wait, lockDelay time.Duration
		owner, session       string
		waitID               uint64
		mf                   modeFlags
		seq                  bool
	)
	cmd := &cobra.Command{
		Use:   "acquire NAME",
		Short: "Take a lock and print its lease id and fencing token",
		Long: `Take the lock NAME under a new session and print the grant. The session is not kept alive
after the command exits: the lock is held until the TTL runs out, unless released with
'leasehold release NAME --lease ID --token N'. Use 'leasehold run' to hold a lock while a
command runs.`,
		Example: `  leasehold acquire report:417:rebuild --ttl 10s --owner worker-A -o json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := mf.options()
			if err != nil {
				return err
			}
			opts = append(opts, client.WithLockDelay(lockDelay))
			if waitID != 0 {
				if session == "" {
					return usageErr("--wait-id retries a request made with --session; give --session too")
				}
				opts = append(opts, client.WithWaitID(waitID))
			}
			if session != "" {
				return acquireInSession(cmd, g, session, args[0], wait, opts)
			}
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				s, err := c.NewSession(ctx, sessionOptions(ttl, owner, seq)...)
				if err != nil {
					return err
				}
				defer s.Orphan() // the lease outlives the command, until its TTL
				l, err := acquireLock(cmd.Context(), s, args[0], wait, opts...)
				if err != nil {
					_ = s.Close(context.WithoutCancel(ctx)) // nothing acquired: do not leave the session behind
					return err
				}
				emitHolding(cmd, g, l.Holding(), l.Sequencer(), s.TTL())
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.DurationVar(&ttl, "ttl", 10*time.Second, "session TTL, at most 1h (below 1s is raised to 1s)")
	f.StringVar(&owner, "owner", "", "owner label shown to operators (default: user@host:pid)")
	f.DurationVar(&wait, "wait", 0, "wait in the queue up to this long; 0 fails at once with code locked; negative waits until granted")
	f.DurationVar(&lockDelay, "lock-delay", 0, "after this holding ends by expiry, keep the name free for this long (max 60s)")
	f.StringVar(&session, "session", "", "acquire in this existing session (see 'leasehold session create'), which stays open; --ttl and --owner are ignored")
	f.Uint64Var(&waitID, "wait-id", 0, "with --session: retry the request of this wait id, which an outcome-unknown error named (answered with its grant, if it was granted)")
	mf.register(cmd)
	sequencerFlag(f, &seq)
	return cmd
}

func newReleaseCmd(g *globals) *cobra.Command {
	var (
		lease string
		token uint64
	)
	cmd := &cobra.Command{
		Use:     "release NAME --lease ID --token N",
		Short:   "Release a holding; refused with not-holder unless it is the current one",
		Example: `  leasehold release report:417:rebuild --lease 6e37c08f0eef27b0ff99b2072b4d950b --token 1`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if lease == "" || token == 0 {
				return usageErr("--lease and --token are required")
			}
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.Release(ctx, args[0], lease, token); err != nil {
					return err
				}
				emit(cmd, g, map[string]any{"name": args[0], "released": true}, "released "+args[0])
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&lease, "lease", "", "lease id of the holding")
	cmd.Flags().Uint64Var(&token, "token", 0, "fencing token of the holding")
	return cmd
}

type waiterJSON struct {
	LeaseID  string `json:"lease_id"`
	Owner    string `json:"owner"`
	QueuedMs int64  `json:"queued_unix_ms"`
}

type holderJSON struct {
	Owner       string `json:"owner"`
	LeaseID     string `json:"lease_id"`
	Token       uint64 `json:"token"`
	RemainingMs int64  `json:"remaining_ttl_ms"`
	AcquiredMs  int64  `json:"acquired_unix_ms"`
	LockDelayMs int64  `json:"lock_delay_ms,omitempty"`
	Mode        string `json:"mode,omitempty"`  // shared for a reader; omitted when exclusive
	Slot        uint32 `json:"slot,omitempty"`  // the semaphore slot
	Value       string `json:"value,omitempty"` // an election's value
}

type lockJSON struct {
	Name      string       `json:"name"`
	Held      bool         `json:"held"`
	Holder    *holderJSON  `json:"holder,omitempty"`
	Holders   []holderJSON `json:"holders"`
	Permits   uint32       `json:"permits"`
	Waiters   []waiterJSON `json:"waiters"`
	LockDelay bool         `json:"lock_delay"`
}

func lockView(info *client.LockInfo) lockJSON {
	v := lockJSON{Name: info.GetName(), LockDelay: info.GetDelayed(), Waiters: []waiterJSON{}, Holders: holdersView(info), Permits: max(info.GetPermits(), 1)}
	if len(v.Holders) > 0 {
		v.Held = true
		v.Holder = &v.Holders[0]
	}
	for _, w := range info.GetWaiters() {
		v.Waiters = append(v.Waiters, waiterJSON{LeaseID: w.GetLeaseId(), Owner: w.GetOwner(), QueuedMs: w.GetQueuedUnixMs()})
	}
	return v
}

func (v lockJSON) text() string {
	var b strings.Builder
	switch {
	case len(v.Holders) > 1 || v.Permits > 1:
		fmt.Fprintf(&b, "%s  held by %s", v.Name, holdersText(v))
	case v.Holder != nil:
		fmt.Fprintf(&b, "%s  held by %s", v.Name, v.Holder.text())
	case v.LockDelay:
		fmt.Fprintf(&b, "%s  free, in lock-delay", v.Name)
	default:
		fmt.Fprintf(&b, "%s  free", v.Name)
	}
	if len(v.Waiters) > 0 {
		fmt.Fprintf(&b, "  waiters %d", len(v.Waiters))
	}
	b.WriteString("\n")
	for i, w := range v.Waiters {
		fmt.Fprintf(&b, "  %d. %q lease %s\n", i+1, w.Owner, w.LeaseID)
	}
	return b.String()
}

func newStatusCmd(g *globals) *cobra.Command {
	var stale bool
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a lock's holder (owner, lease, token, remaining TTL) and waiters",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				opts := readOpts(stale)
				info, err := c.Status(ctx, args[0], opts...)
				if err != nil {
					return err
				}
				v := lockView(info)
				emit(cmd, g, v, v.text())
				return nil
			})
		},
	}
	staleFlag(cmd, &stale)
	return cmd
}

func newLsCmd(g *globals) *cobra.Command {
	var (
		stale bool
		limit int32
	)
	cmd := &cobra.Command{
		Use:   "ls [PREFIX]",
		Short: "List held, queued and delayed locks whose name has PREFIX",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				opts := append(readOpts(stale), client.ListLimit(limit))
				infos, truncated, err := c.List(ctx, prefix, opts...)
				if err != nil {
					return err
				}
				views := make([]lockJSON, 0, len(infos))
				var b strings.Builder
				for _, info := range infos {
					v := lockView(info)
					views = append(views, v)
					b.WriteString(v.text())
				}
				if truncated {
					b.WriteString("(more locks match; raise --limit)\n")
				}
				if len(infos) == 0 {
					b.WriteString("no locks\n")
				}
				emit(cmd, g, map[string]any{"locks": views, "truncated": truncated}, b.String())
				return nil
			})
		},
	}
	staleFlag(cmd, &stale)
	cmd.Flags().Int32Var(&limit, "limit", 0, "at most this many locks (0 = the server maximum, 1000)")
	return cmd
}

type eventJSON struct {
	Type    string `json:"type"`
	Name    string `json:"name"`
	LeaseID string `json:"lease_id,omitempty"`
	Owner   string `json:"owner,omitempty"`
	Token   uint64 `json:"token,omitempty"`
	Index   uint64 `json:"index"`
	UnixMs  int64  `json:"unix_ms"`
}

func newWatchCmd(g *globals) *cobra.Command {
	var (
		fromIndex uint64
		resync    bool
	)
	cmd := &cobra.Command{
		Use:   "watch [PREFIX] [--from-index N] [--resync]",
		Short: "Print lock events (acquired, released, expired, queued, ...) as they happen",
		Long: "Print lock events of names with PREFIX as they are applied, one per line with its log index (one JSON object per line with -o json), until interrupted. " +
			"With --from-index N, first print every event from log index N on that the server's history still holds. " +
			"When a node stops or the connection breaks, the watch resumes on the next of --endpoints after the last event printed, with no gap and no duplicate; " +
			"When the events to resume from are no longer in the history it exits with the compacted code (15): read the state (ls) and watch again; " +
			"with --resync it prints the current state instead (a compacted line with the log index it is taken at, then the locks as ls prints them; " +
			"with -o json one object {\"type\":\"compacted\",\"index\":N,\"locks\":[...],\"truncated\":false}) and goes on with the events after that index.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			var opts []client.WatchOption
			if fromIndex != 0 {
				opts = append(opts, client.FromIndex(fromIndex))
			}
			if resync {
				opts = append(opts, client.OnCompacted(func(st *client.Compacted) { emitCompacted(cmd, g, st) }))
			}
			events, err := c.Watch(cmd.Context(), prefix, opts...)
			if err != nil {
				return err
			}
			for ev, err := range events {
				if err != nil {
					return err
				}
				typ := strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_"))
				v := eventJSON{Type: typ, Name: ev.GetName(), LeaseID: ev.GetLeaseId(), Owner: ev.GetOwner(), Token: ev.GetToken(), Index: ev.GetIndex(), UnixMs: ev.GetUnixMs()}
				text := fmt.Sprintf("%s %-16s %s index=%d", time.UnixMilli(v.UnixMs).Format(time.RFC3339Nano), typ, v.Name, v.Index)
				if v.Token != 0 {
					text += " token=" + strconv.FormatUint(v.Token, 10)
				}
				if v.LeaseID != "" {
					text += fmt.Sprintf(" lease=%s owner=%q", v.LeaseID, v.Owner)
				}
				emit(cmd, g, v, text)
			}
			return nil
		},
	}
	cmd.Flags().Uint64Var(&fromIndex, "from-index", 0, "replay the events from this log index on (0: from now)")
	cmd.Flags().BoolVar(&resync, "resync", false, "when the events are no longer held, print the current state and go on after it (default: exit 15)")
	return cmd
}

// emitCompacted prints the state a watch resynced to.
func emitCompacted(cmd *cobra.Command, g *globals, st *client.Compacted) {
	views := make([]lockJSON, 0, len(st.GetLocks()))
	var b strings.Builder
	fmt.Fprintf(&b, "compacted index=%d: the events up to it are gone; the state at it follows\n", st.GetIndex())
	for _, info := range st.GetLocks() {
		v := lockView(info)
		views = append(views, v)
		b.WriteString(v.text())
	}
	if st.GetTruncated() {
		b.WriteString("(more locks match than the list maximum)\n")
	}
	emit(cmd, g, map[string]any{"type": "compacted", "index": st.GetIndex(), "locks": views, "truncated": st.GetTruncated()}, b.String())
}
