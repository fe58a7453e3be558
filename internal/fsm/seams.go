package fsm

import (
	"slices"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Seams of the state machine's core decisions. A build with a mutant_* tag
// replaces one (see the mutant_*.go files) so that internal/sim can prove it
// catches the bug; a build with leasehold_invariants sets afterApply. Normal
// builds never change them.
var (
	// holdingMatches reports whether a release's token names the holding.
	holdingMatches = func(held, given uint64) bool { return held == given }
	// staleKV reports whether a fenced write with token is stale over the
	// key's last accepted token.
	staleKV = func(token, last uint64, strict bool) bool { return token < last || (strict && token == last) }
	// nextToken advances the counter for a grant of name and returns the token.
	nextToken = func(m *Machine, name string) uint64 {
		m.token++
		return m.token
	}
	// retryOf returns the index of the holding an Acquire by leaseID
	// repeats (a retry whose answer was lost), or -1.
	retryOf = func(l *lock, leaseID string) int { return l.holderIndex(leaseID) }
	// sameMode reports whether a request asking for mode asked repeats a
	// standing (holding or queue entry) held in mode held.
	sameMode = func(held, asked fsmpb.Mode) bool { return held == asked }
	// withdrawableBy returns the wait id a holding created by the request
	// held (0: none left) keeps after another request of its session,
	// asked, acquired it again: held when asked is the same request (a
	// retry), otherwise 0, so that no withdrawal releases a holding that
	// more than one request learned.
	withdrawableBy = func(held, asked uint64) uint64 {
		if held == asked {
			return held
		}
		return 0
	}
	// withdrawWait removes the queue entry of an ended session leaseID
	// from l and returns its WaitId: only live sessions wait, so a grant
	// to the queue's head needs no further check.
	withdrawWait = func(l *lock, leaseID string) (waitID uint64) {
		l.waiters = slices.DeleteFunc(l.waiters, func(w *fsmpb.Waiter) bool {
			if w.LeaseId == leaseID {
				waitID = w.WaitId
				return true
			}
			return false
		})
		return waitID
	}
	// afterApply, when set, checks the state after every Apply.
	afterApply func(m *Machine, index uint64, res *Result)
)
