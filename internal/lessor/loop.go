package lessor

import (
	"container/heap"
	"context"
	"errors"
	"time"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// loop runs the ticks. It looks at the lessor on a grid of Tick from its
// last look, at the first point of the grid after the earliest thing
// scheduled, and sleeps while nothing is: a due deadline is acted on
// within a Tick, no two looks are closer than a Tick, and an idle lessor
// costs no wakeups.
func (l *Lessor) loop(stop chan struct{}) {
	sem := make(chan struct{}, l.cfg.MaxInflight)
	last := l.cfg.Clock.Now()
	for {
		l.mu.Lock()
		var timer <-chan time.Time
		l.wakeAt = farFuture
		if next, ok := l.nextLocked(); ok {
			ticks := max(next.Sub(last)/l.cfg.Tick+1, 1)
			l.wakeAt = last.Add(ticks * l.cfg.Tick)
			timer = l.cfg.Clock.After(l.wakeAt.Sub(l.cfg.Clock.Now()))
		}
		l.mu.Unlock()
		select {
		case <-stop:
			return
		case <-l.wake:
			continue // something came due earlier: plan again
		case <-timer:
		}
		last = l.cfg.Clock.Now()
		expires, other := l.due()
		jobs := make([]func(), 0, len(expires)+len(other))
		for _, e := range expires {
			jobs = append(jobs, func() { l.proposeExpire(stop, e) })
		}
		for _, cmd := range other {
			jobs = append(jobs, func() { l.propose(stop, cmd) })
		}
		for _, job := range jobs {
			select {
			case <-stop:
				return
			case sem <- struct{}{}:
			}
			l.wg.Go(func() {
				defer func() { <-sem }()
				job()
			})
		}
	}
}

// farFuture is the wakeAt of a loop with nothing scheduled.
var farFuture = time.Unix(1<<62, 0)

// due collects what came due: sessions to expire (marked in flight),
// checkpoints (batched) and lock-delays to end.
func (l *Lessor) due() (expires []*entry, cmds []*fsmpb.Command) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wakeAt = time.Time{} // looking now: whatever is scheduled meanwhile is planned after
	now := l.cfg.Clock.Now()
	var cps []*fsmpb.SessionCheckpoint
	for len(l.timers) > 0 && now.After(l.timers[0].at) {
		e := heap.Pop(&l.timers).(*entry)
		switch {
		case e.expiring || now.After(e.deadline):
			// Expiring already (an unknown outcome): propose it again.
			e.expiring, e.inflight = true, true
			expires = append(expires, e)
			continue
		case l.cfg.CheckpointInterval > 0 && e.clearing == 0 && l.checkpointDue(e, now):
			e.short, e.nextCP = true, now.Add(l.checkpointEvery(e.ttl))
			cps = append(cps, &fsmpb.SessionCheckpoint{LeaseId: e.id, RemainingMs: e.deadline.Sub(now).Milliseconds(), Generation: e.gen})
		}
		l.scheduleLocked(e)
	}
	for chunk := range chunks(cps, maxCheckpointBatch) {
		cmds = append(cmds, &fsmpb.Command{UnixMs: now.UnixMilli(), Op: &fsmpb.Command_Checkpoint{Checkpoint: &fsmpb.Checkpoint{Sessions: chunk}}})
	}
	for k, at := range l.delays {
		if now.After(at) {
			delete(l.delays, k) // EndLockDelay is idempotent; a failed one is retried by the next leader
			cmds = append(cmds, &fsmpb.Command{UnixMs: now.UnixMilli(), Op: &fsmpb.Command_EndLockDelay{EndLockDelay: &fsmpb.EndLockDelay{Name: k.name, Token: k.token}}})
		}
	}
	return expires, cmds
}

// checkpointDue reports whether e's remaining time should be recorded now.
func (l *Lessor) checkpointDue(e *entry, now time.Time) bool {
	if e.short {
		return !now.Before(e.nextCP)
	}
	return now.Sub(e.renewed) >= idleAfter(e.ttl)
}

func chunks[T any](s []T, n int) func(func([]T) bool) {
	return func(yield func([]T) bool) {
		for len(s) > 0 {
			k := min(n, len(s))
			if !yield(s[:k]) {
				return
			}
			s = s[k:]
		}
	}
}

// proposeCtx is a context for one proposal: at most 10 s, cancelled when
// the lessor stops leading.
func (l *Lessor) proposeCtx(stop chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// proposeExpire proposes the Expire of e. Applied (or the session already
// gone): e is forgotten. Certainly not applied: renewals are accepted again.
// Unknown: e stays expiring and the next tick proposes it again.
func (l *Lessor) proposeExpire(stop chan struct{}, e *entry) {
	ctx, cancel := l.proposeCtx(stop)
	defer cancel()
	now := l.cfg.Clock.Now()
	res, err := l.proposer.Propose(ctx, &fsmpb.Command{UnixMs: now.UnixMilli(), Op: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{LeaseId: e.id}}})
	l.mu.Lock()
	defer l.mu.Unlock()
	e.inflight = false
	if l.sessions[e.id] != e {
		return // forgotten: demoted, or ended through the log meanwhile
	}
	switch {
	case err == nil && (res.Err == nil || errors.Is(res.Err, fsm.ErrSessionNotFound)):
		l.cfg.Logger.Info("session expired", "lease_id", e.id, "released", res.Released)
		l.removeLocked(e)
		return
	case err == nil, errors.Is(err, ErrNotApplied):
		// Refused, or certainly not applied: the session is live again
		// until the next tick decides.
		l.cfg.Logger.Warn("expire not applied", "lease_id", e.id, "err", cmp(err, res.Err))
		e.expiring = false
	default:
		l.cfg.Logger.Warn("expire of unknown outcome; proposing it again", "lease_id", e.id, "err", err)
	}
	l.scheduleAtLocked(e, l.cfg.Clock.Now())
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// propose proposes a Checkpoint or an EndLockDelay. A failed EndLockDelay
// is retried on the next tick; a failed Checkpoint needs nothing: the
// sessions stay marked as possibly checkpointed and are checkpointed again.
func (l *Lessor) propose(stop chan struct{}, cmd *fsmpb.Command) {
	ctx, cancel := l.proposeCtx(stop)
	defer cancel()
	_, err := l.proposer.Propose(ctx, cmd)
	if err == nil {
		return
	}
	if d := cmd.GetEndLockDelay(); d != nil {
		l.retryDelay(d)
		return
	}
	l.cfg.Logger.Debug("checkpoint not applied", "sessions", len(cmd.GetCheckpoint().GetSessions()), "err", err)
}

func (l *Lessor) retryDelay(d *fsmpb.EndLockDelay) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.leading {
		l.delayLocked(delayKey{d.GetName(), d.GetToken()}, l.cfg.Clock.Now())
	}
}

// timerHeap is a min-heap of entries by at.
type timerHeap []*entry

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *timerHeap) Push(x any) {
	e := x.(*entry)
	e.idx = len(*h)
	*h = append(*h, e)
}
func (h *timerHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.idx = -1
	return e
}
