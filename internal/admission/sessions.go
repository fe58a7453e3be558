package admission

import (
	"context"
)

// ownedSet is the sessions one principal created through this node while
// it led: true for a CreateSession still in flight.
type ownedSet map[string]bool

// ReserveSession admits a new session id for the caller in ctx, or
// refuses it, in time independent of how many sessions the caller has:
// the count of its live sessions is kept as they are created here and
// end (SessionsEnded), never recounted. Call the returned func once the
// CreateSession is answered, whatever the answer, with failed true when
// it failed: an id that did not become a live session (ended says which
// of the ids given are not live) then gives its place back.
//
// The count lives in the leader's memory: the replicated state does not
// record who created a session. After a leader change the new leader
// counts only the sessions created through it, so a principal can for a
// while hold up to twice the limit; the old leader's sessions stop
// mattering as they end. After a snapshot replaced the state (whose
// ended sessions were never observed here) the first reservation looks
// every counted id up once.
func (l *Limiter) ReserveSession(ctx context.Context, id string, ended func(ids []string) []string) (func(failed bool), error) {
	max := l.cfg.SessionsPerPrincipal
	if max <= 0 {
		return func(bool) {}, nil
	}
	p := Principal(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stale {
		l.stale = false
		var ids []string
		for id, q := range l.ownerOf {
			if !l.owned[q][id] { // one still being created stays
				ids = append(ids, id)
			}
		}
		l.forgetLocked(ended(ids))
	}
	set := l.owned[p]
	if len(set) >= max {
		l.refuse("sessions-per-principal")
		return nil, Exhausted("sessions-per-principal", "principal %s has %d live sessions, the limit: close some", p, len(set))
	}
	if set == nil {
		set = ownedSet{}
		l.owned[p] = set
	}
	set[id] = true
	l.ownerOf[id] = p
	return func(failed bool) {
		if failed && len(ended([]string{id})) == 0 {
			failed = false // it was created after all
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if failed {
			l.forgetLocked([]string{id})
		} else if s, ok := l.owned[p]; ok && l.ownerOf[id] == p {
			s[id] = false
		}
	}, nil
}

// SessionsEnded gives back the places of the sessions ids that ended
// (fsm.Result.EndedSessions, on every applied entry).
func (l *Limiter) SessionsEnded(ids []string) {
	if len(ids) == 0 || l.cfg.SessionsPerPrincipal <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.forgetLocked(ids)
}

// Restored marks the session counts stale: a snapshot replaced the state,
// and the sessions that ended in the entries it covers were never seen.
func (l *Limiter) Restored() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stale = len(l.ownerOf) > 0
}

// forgetLocked drops ids from the session counts.
func (l *Limiter) forgetLocked(ids []string) {
	for _, id := range ids {
		p, ok := l.ownerOf[id]
		if !ok {
			continue
		}
		delete(l.ownerOf, id)
		set := l.owned[p]
		if delete(set, id); len(set) == 0 {
			delete(l.owned, p)
		}
	}
}
