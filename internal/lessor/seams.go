package lessor

import (
	"context"
	"time"
)

// Seams of the lessor's deadline decisions. A build with a mutant_* tag
// replaces one (see the mutant_*.go files) so that internal/sim can prove it
// catches the bug. Normal builds never change them.
var (
	// renewTo is a session's deadline after a renewal: never earlier.
	renewTo = func(cur, proposed time.Time) time.Time {
		if proposed.After(cur) {
			return proposed
		}
		return cur
	}
	// promoteDeadline is the deadline a new leader gives a live session:
	// renewed now, plus the old leader's authority window.
	promoteDeadline = func(now time.Time, grace, ttl time.Duration) time.Time { return now.Add(grace + ttl) }
	// refuseExpiring: a session whose Expire was proposed is not renewed
	// until the proposal is known not to have applied.
	refuseExpiring = true
	// renewConfirm confirms leadership before a keepalive is answered.
	renewConfirm = func(l *Lessor, ctx context.Context) error { return l.cfg.Confirmer.ConfirmLeadership(ctx) }
)
