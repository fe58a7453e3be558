//go:build leasehold_sim

package sim

import (
	"context"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
	"github.com/leasehold/leasehold/internal/harness/linz"
)

// W5 shapes: sessions that take read/write locks in both modes and acquire
// again what they hold, with cut replies.
const (
	w5TTL     = 10 * time.Second
	w5Clients = 2
)

var w5Names = []string{"m0", "m1"}

// isModeName reports whether name belongs to W5, whose names have several
// holders at once (readers): P6's one-holder check does not apply to them;
// checkModes does.
func isModeName(name string) bool { return slices.Contains(w5Names, name) }

// checkModes is P12 on a replica's state after an entry: a W5 name held
// exclusive has exactly one holder (never a writer beside readers).
func checkModes(c *Cluster, id string, index uint64, m *fsm.Machine) {
	for _, name := range w5Names {
		hs := m.Lock(name).Holders
		if len(hs) > 1 && slices.ContainsFunc(hs, func(h *fsmpb.Holding) bool { return h.GetMode() == fsmpb.Mode_MODE_EXCLUSIVE }) {
			c.violate("P12", "%s index %d: %q has an exclusive holder beside %d other(s): %v", id, index, name, len(hs)-1, hs)
		}
	}
}

// w5Holding is what a W5 session learned it holds.
type w5Holding struct {
	token uint64
	mode  fsmpb.Mode
}

// modeMix is W5: sessions with a long TTL kept alive try-acquire W5 names
// shared or exclusive and release them; and they check the two rules of
// a session's standing on a name:
//
//   - modes never mix (P12): a grant is in the mode asked for, and a
//     session that holds a name in one mode is refused the other;
//   - a withdrawal withdraws only what its request created (P13): a
//     re-entrant acquire of a held name whose reply is cut is withdrawn
//     (as AcquireIn does), and the holding the session learned stays; an
//     acquire retried under its own wait id, both replies lost, is
//     withdrawn, and the grant nobody learned is gone.
func (cl *client) modeMix(stop <-chan struct{}) {
	var lease string
	var lastAck time.Time
	held := map[string]w5Holding{}
	// late names a name once a request of the session on it had an
	// unknown outcome: an acquire may still apply, at any later time
	// (queued in a paused node's socket), after a withdrawal or a release,
	// and a withdrawal or a release may not have applied; either leaves a
	// grant nobody learned. The session may then hold the name without
	// knowing it until it ends, so P13's "not held" is not checked on it.
	late := map[string]bool{}
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(10+cl.rng.IntN(190)) * time.Millisecond):
		}
		if lease != "" && time.Since(lastAck) > w5TTL/4 {
			sent := time.Now()
			if cl.keepalive(lease, w5TTL) {
				lastAck = sent
			} else {
				lease = ""
			}
		}
		if lease == "" {
			clear(held)
			clear(late)
			lastAck = time.Now()
			if lease = cl.createSession(w5TTL); lease == "" {
				continue
			}
		}
		name := w5Names[cl.rng.IntN(len(w5Names))]
		h, holds := held[name]
		switch p := cl.rng.IntN(10); {
		case p < 4 && !holds:
			mode := fsmpb.Mode_MODE_SHARED
			if cl.rng.IntN(3) == 0 {
				mode = fsmpb.Mode_MODE_EXCLUSIVE
			}
			res, err := cl.tryAcquire(name, lease, mode, cl.nextWait())
			late[name] = late[name] || err != nil
			if err == nil && res.Err == nil && res.Holding != nil {
				if got := res.Holding.GetMode(); got != mode {
					cl.c.violate("P12", "%s asked for %q %v and was granted it %v (token %d)", lease, name, mode, got, res.Holding.GetToken())
				}
				held[name] = w5Holding{res.Holding.GetToken(), res.Holding.GetMode()}
			}
		case p < 4:
			other := fsmpb.Mode_MODE_SHARED
			if h.mode == fsmpb.Mode_MODE_SHARED {
				other = fsmpb.Mode_MODE_EXCLUSIVE
			}
			res, err := cl.tryAcquire(name, lease, other, cl.nextWait())
			late[name] = late[name] || err != nil
			switch {
			case err != nil || res.Err != nil:
			case res.Holding.GetToken() == h.token:
				cl.c.violate("P12", "%s holds %q %v (token %d) and asked for it %v: granted %v, want a refusal", lease, name, h.mode, h.token, other, res.Holding)
			default:
				cl.c.violate("P13", "%s holds %q %v (token %d) and was granted it anew (%v): the holding it learned ended without its release", lease, name, h.mode, h.token, res.Holding)
			}
		case p < 6 && holds:
			// A re-entrant acquire whose reply is cut, withdrawn.
			w := cl.nextWait()
			_, err := cl.tryAcquire(name, lease, h.mode, w)
			late[name] = late[name] || err != nil
			if cl.cancelWait(name, lease, w) {
				cl.expectHolding(name, lease, h.token, "a withdrawn re-entrant acquire released the holding the session learned")
			}
		case p < 6:
			// A request whose reply and withdrawal were lost, retried
			// under its own wait id with its reply lost again, withdrawn.
			w := cl.nextWait()
			_, err1 := cl.tryAcquire(name, lease, fsmpb.Mode_MODE_SHARED, w)
			_, err2 := cl.tryAcquire(name, lease, fsmpb.Mode_MODE_SHARED, w)
			late[name] = late[name] || err1 != nil || err2 != nil
			switch {
			case !cl.cancelWait(name, lease, w):
				// The grant may stay: the next acquire of the name, under
				// another wait id, takes it over (a real client reuses w).
				late[name] = true
			case !late[name]:
				cl.expectHolding(name, lease, 0, "a withdrawn retry kept a grant nobody learned")
			}
		case p < 9 && holds:
			if out := cl.releaseUnrecorded(name, lease, h.token); out != "" {
				delete(held, name)
				late[name] = late[name] || out == linz.OutUnknown
			}
		}
	}
}

// nextWait returns a new wait id of this client.
func (cl *client) nextWait() uint64 {
	cl.waits++
	return uint64(cl.waits)
}

// tryAcquire proposes a TryAcquire of name in mode; its outcome is not
// recorded in the history (W5 is checked by P12 and P13).
func (cl *client) tryAcquire(name, lease string, mode fsmpb.Mode, waitID uint64) (fsm.Result, error) {
	return cl.apply(&fsmpb.Command{UnixMs: time.Now().UnixMilli(), Op: &fsmpb.Command_Acquire{Acquire: &fsmpb.Acquire{
		Name: name, LeaseId: lease, Try: true, WaitId: waitID, Mode: mode}}})
}

// cancelWait withdraws the wait waitID and reports whether it was applied.
func (cl *client) cancelWait(name, lease string, waitID uint64) bool {
	_, err := cl.apply(&fsmpb.Command{UnixMs: time.Now().UnixMilli(), Op: &fsmpb.Command_Withdraw{Withdraw: &fsmpb.CancelWait{
		Name: name, LeaseId: lease, WaitId: waitID}}})
	return err == nil
}

// expectHolding is P13: while lease lives, it holds name with token (0:
// does not hold it), read through a linearizable read.
func (cl *client) expectHolding(name, lease string, token uint64, what string) {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	n := readTarget(ctx, cl)
	if n == nil {
		return
	}
	var got uint64
	var live bool
	err := n.read(ctx, func(m *fsm.Machine) {
		live = m.Session(lease) != nil
		for _, h := range m.Lock(name).Holders {
			if h.GetLeaseId() == lease {
				got = h.GetToken()
			}
		}
	})
	if err == nil && live && got != token {
		cl.c.violate("P13", "%s: %q holds %q with token %d, want %d", what, lease, name, got, token)
	}
}
