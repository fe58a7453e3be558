package fsm

import (
	"slices"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// withdrawWait removes the queue entry of an ended session leaseID from l
// and returns its WaitId: only live sessions wait, so a grant to the queue's
// head needs no further check (a seam: see seam_token.go).
func withdrawWait(l *lock, leaseID string) (waitID uint64) {
	l.waiters = slices.DeleteFunc(l.waiters, func(w *fsmpb.Waiter) bool {
		if w.LeaseId == leaseID {
			waitID = w.WaitId
			return true
		}
		return false
	})
	return waitID
}
