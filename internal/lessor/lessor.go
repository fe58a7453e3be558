// Package lessor runs the leader's timers: it decides when a session has
// expired and when a lock-delay is over, and makes each decision by proposing
// a command (Expire, EndLockDelay) through the Raft log. It is the only
// server code that reads a clock, through clock.Clock.
//
// Keepalives are not log entries: a renewal only moves a deadline in the
// leader's memory, as etcd's lessor does. That is safe because expiry is
// the only thing the deadline decides, and only the leader proposes it:
//
//	holder:  sent ──────────── TTL·(1−drift) − margin ──┤ gives up
//	grantor:      answered ─────────── TTL·(1+drift) ─────────┤ may expire
//
// The holder counts from the moment it sent the request, the grantor from
// the moment it answered, and each widens its bound by the largest clock-rate
// drift either side may have, so the holder stops before the grantor frees
// the lock unless rates differ by more than Drift.
//
// A new leader does not know the old leader's deadlines. On Promote it
// treats every live session as renewed at that moment and adds Grace, the
// longest a deposed leader may keep acknowledging renewals without a quorum
// (raft's LeaderLeaseTimeout). Two leaders can coexist for at most that long,
// so a renewal the old leader acknowledged is covered. A lessor never
// shortens a deadline: expiring late only delays failover, expiring early
// would break exclusivity as the holder sees it.
package lessor

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Errors of Renew.
var (
	// ErrNotLeader: this lessor is not running (the node is not the leader).
	ErrNotLeader = errors.New("lessor: not the leader")
	// ErrNotFound: the session is unknown or its expiry is already decided.
	ErrNotFound = errors.New("lessor: session not found or expiring")
)

// Proposer submits a command to the Raft log and returns its result. It
// must not be called with any lessor lock held.
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (fsm.Result, error)
}

// Config configures a Lessor.
type Config struct {
	// Clock is the time source. Default clock.Real{}.
	Clock clock.Clock
	// Drift is the largest relative clock-rate difference tolerated between
	// grantor and holder. The grantor expires a session no earlier than
	// answered + TTL·(1+Drift). Default 0.02; must be in [0, 0.5].
	Drift float64
	// Grace is added to every deadline on Promote: the old leader's longest
	// authority window. Default 500 ms; must be ≥ 0.
	Grace time.Duration
	// Tick is how often deadlines are checked. Default 50 ms; floor 1 ms.
	Tick time.Duration
	// MaxInflight bounds concurrent Expire/EndLockDelay proposals. Default 64.
	MaxInflight int
	// Logger receives decisions. Default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults described on Config.
func DefaultConfig() Config {
	return Config{Clock: clock.Real{}, Drift: 0.02, Grace: 500 * time.Millisecond, Tick: 50 * time.Millisecond, MaxInflight: 64, Logger: slog.Default()}
}

// Validate reports a Config outside its floors.
func (c Config) Validate() error {
	switch {
	case c.Clock == nil:
		return errors.New("lessor: Clock is nil")
	case c.Drift < 0 || c.Drift > 0.5:
		return errors.New("lessor: Drift must be in [0, 0.5]")
	case c.Grace < 0:
		return errors.New("lessor: Grace must be ≥ 0")
	case c.Tick < time.Millisecond:
		return errors.New("lessor: Tick must be ≥ 1ms")
	case c.MaxInflight < 1:
		return errors.New("lessor: MaxInflight must be ≥ 1")
	case c.Logger == nil:
		return errors.New("lessor: Logger is nil")
	}
	return nil
}

// Lessor tracks deadlines while its node leads. Methods are safe for
// concurrent use. Lock order: Lessor.mu is a leaf; it is never held while
// proposing.
type Lessor struct {
	cfg      Config
	proposer Proposer

	mu       sync.Mutex // protects following
	leading  bool
	stop     chan struct{} // closed by Demote/Close; nil when not leading
	sessions map[string]*entry
	delays   map[delayKey]time.Time // lock-delay → earliest end
	closed   bool

	wg sync.WaitGroup // the loop and in-flight proposals
}

type entry struct {
	ttl      time.Duration
	deadline time.Time
	expiring bool // an Expire is in flight: renewals are refused
}

type delayKey struct {
	name  string
	token uint64
}

// New returns a Lessor that is not leading.
func New(cfg Config, p Proposer) (*Lessor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Lessor{cfg: cfg, proposer: p, sessions: map[string]*entry{}, delays: map[delayKey]time.Time{}}, nil
}

// grantorTTL is how long the grantor waits, from its answer, before it may
// expire a session with this TTL.
func (l *Lessor) grantorTTL(ttl time.Duration) time.Duration {
	return ttl + time.Duration(float64(ttl)*l.cfg.Drift)
}

// Promote starts the lessor on a new leader. sessions and delays are the
// applied state after the leader's barrier: every session is treated as
// renewed now, plus Grace; every lock-delay restarts in full, plus Grace.
func (l *Lessor) Promote(sessions []*fsmpb.Session, delays []fsm.LockDelay) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.leading {
		return
	}
	l.leading = true
	l.stop = make(chan struct{})
	now := l.cfg.Clock.Now()
	for _, s := range sessions {
		ttl := time.Duration(s.GetTtlMs()) * time.Millisecond
		l.extendLocked(s.GetLeaseId(), ttl, promoteDeadline(now, l.cfg.Grace, l.grantorTTL(ttl)))
	}
	for _, d := range delays {
		l.delays[delayKey{d.Name, d.Token}] = now.Add(l.cfg.Grace + l.grantorTTL(time.Duration(d.Ms)*time.Millisecond))
	}
	l.cfg.Logger.Info("lessor promoted", "sessions", len(sessions), "lock_delays", len(delays), "grace", l.cfg.Grace)
	stop := l.stop
	l.wg.Go(func() { l.loop(stop) })
}

// Demote stops the lessor when leadership is lost and forgets every
// deadline; the next leader rebuilds them from the log.
func (l *Lessor) Demote() {
	l.mu.Lock()
	l.demoteLocked()
	l.mu.Unlock()
}

func (l *Lessor) demoteLocked() {
	if !l.leading {
		return
	}
	l.leading = false
	close(l.stop)
	l.stop = nil
	clear(l.sessions)
	clear(l.delays)
}

// Close stops the lessor and waits for its goroutines. It is idempotent.
func (l *Lessor) Close() {
	l.mu.Lock()
	l.closed = true
	l.demoteLocked()
	l.mu.Unlock()
	l.wg.Wait()
}

// extendLocked moves a deadline later, never earlier, and inserts unknown
// sessions.
func (l *Lessor) extendLocked(leaseID string, ttl time.Duration, deadline time.Time) {
	e, ok := l.sessions[leaseID]
	if !ok {
		l.sessions[leaseID] = &entry{ttl: ttl, deadline: deadline}
		return
	}
	e.ttl = ttl
	if deadline.After(e.deadline) {
		e.deadline = deadline
	}
}

// Renew records that the leader is answering a request of session leaseID
// now (keepalive, acquire, create): its deadline becomes at least
// now + TTL·(1+Drift). It refuses sessions it does not know or whose expiry
// is already decided; on a non-leader it returns ErrNotLeader.
func (l *Lessor) Renew(leaseID string) (time.Duration, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading {
		return 0, ErrNotLeader
	}
	e, ok := l.sessions[leaseID]
	if !ok || e.expiring {
		return 0, ErrNotFound
	}
	e.deadline = renewTo(e.deadline, l.cfg.Clock.Now().Add(l.grantorTTL(e.ttl)))
	return e.ttl, nil
}

// Remaining returns how long session leaseID has before the leader may
// expire it; ok is false when this lessor does not track it.
func (l *Lessor) Remaining(leaseID string) (time.Duration, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.sessions[leaseID]
	if !ok || !l.leading {
		return 0, false
	}
	return max(0, e.deadline.Sub(l.cfg.Clock.Now())), true
}

// Observe updates deadlines from one applied log entry: sessions created
// start their TTL now, ended sessions are forgotten, lock-delays that began
// start their timers. It is called for every applied entry, on every node;
// a lessor that is not leading ignores it.
func (l *Lessor) Observe(res *fsm.Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.leading || res.Err != nil {
		return
	}
	now := l.cfg.Clock.Now()
	if s := res.Session; s != nil {
		ttl := time.Duration(s.GetTtlMs()) * time.Millisecond
		l.extendLocked(s.GetLeaseId(), ttl, now.Add(l.grantorTTL(ttl)))
	}
	for _, id := range res.EndedSessions {
		delete(l.sessions, id)
	}
	for _, d := range res.LockDelays {
		l.delays[delayKey{d.Name, d.Token}] = now.Add(l.grantorTTL(time.Duration(d.Ms) * time.Millisecond))
	}
}

func (l *Lessor) loop(stop chan struct{}) {
	sem := make(chan struct{}, l.cfg.MaxInflight)
	for {
		select {
		case <-stop:
			return
		case <-l.cfg.Clock.After(l.cfg.Tick):
		}
		for _, cmd := range l.due() {
			select {
			case <-stop:
				return
			case sem <- struct{}{}:
			}
			l.wg.Go(func() {
				defer func() { <-sem }()
				l.propose(stop, cmd)
			})
		}
	}
}

// due collects the commands whose time has come and marks them in flight.
func (l *Lessor) due() []*fsmpb.Command {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.cfg.Clock.Now()
	var cmds []*fsmpb.Command
	for id, e := range l.sessions {
		if !e.expiring && now.After(e.deadline) {
			e.expiring = true
			cmds = append(cmds, &fsmpb.Command{UnixMs: now.UnixMilli(), Op: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{LeaseId: id}}})
		}
	}
	for k, at := range l.delays {
		if now.After(at) {
			delete(l.delays, k) // EndLockDelay is idempotent; a failed one is retried by the next leader
			cmds = append(cmds, &fsmpb.Command{UnixMs: now.UnixMilli(), Op: &fsmpb.Command_EndLockDelay{EndLockDelay: &fsmpb.EndLockDelay{Name: k.name, Token: k.token}}})
		}
	}
	return cmds
}

func (l *Lessor) propose(stop chan struct{}, cmd *fsmpb.Command) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	res, err := l.proposer.Propose(ctx, cmd)
	exp := cmd.GetExpire()
	if exp == nil {
		if err != nil {
			l.retryDelay(cmd.GetEndLockDelay())
		}
		return
	}
	id := exp.GetLeaseId()
	switch {
	case err == nil && (res.Err == nil || errors.Is(res.Err, fsm.ErrSessionNotFound)):
		l.cfg.Logger.Info("session expired", "lease_id", id, "released", res.Released)
		l.mu.Lock()
		delete(l.sessions, id)
		l.mu.Unlock()
	default:
		// Not applied, or unknown: keep the session expiring only if still
		// leading; the next tick proposes again.
		l.cfg.Logger.Warn("expire not applied", "lease_id", id, "err", err)
		l.mu.Lock()
		if e, ok := l.sessions[id]; ok {
			e.expiring = false
		}
		l.mu.Unlock()
	}
}

func (l *Lessor) retryDelay(d *fsmpb.EndLockDelay) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading {
		l.delays[delayKey{d.GetName(), d.GetToken()}] = l.cfg.Clock.Now()
	}
}
