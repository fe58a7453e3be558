package fsm

import (
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// The grant clock. A state restored from a backup, or an old copy of a
// data dir, knows its token counter but not how many tokens the cluster
// it came from issued after it was copied. Tokens are issued only by
// grants, and every command is stamped with its leader's wall clock, so the
// state keeps, deterministically from those stamps, the newest one (of any
// command: the state was current then, so a lost history issued its later
// tokens after it) and the most grants stamped in any one second. The floor a restarted or
// restored state resumes from (Floor) assumes that the lost cluster went
// on granting at most at twice that peak, and at least at
// MinFloorRate per second, until the moment of the restore:
//
//	floor = token + ceil(max(0, now − last_grant) × max(2·peak, MinFloorRate)/s) + 1
//
// The argument holds when the restoring machine's wall clock does not run
// behind the old cluster's leaders, and when the lost cluster's grant rate
// stayed under the bound; an operator who knows a larger token (the
// largest a resource accepted) gives it explicitly instead.

// MinFloorRate is the least grant rate per second Floor assumes.
const MinFloorRate = 1000

// GrantClock is what the floor of a restore is computed from.
type GrantClock struct {
	Token           uint64 // newest token issued
	LastGrantUnixMs int64  // newest leader stamp of any command
	PeakRate        uint64 // most grants stamped in one second
}

// GrantClock returns the state's grant clock.
func (m *Machine) GrantClock() GrantClock {
	return GrantClock{Token: m.token, LastGrantUnixMs: m.lastGrantMs, PeakRate: m.peakRate}
}

// Floor returns the token counter a state with this grant clock resumes
// from at nowMs (see the argument above). It saturates at the largest
// counter BumpToken and TokenFloor accept.
func (g GrantClock) Floor(nowMs int64) uint64 {
	elapsed := uint64(max(0, nowMs-g.LastGrantUnixMs))
	rate := uint64(MinFloorRate)
	if g.PeakRate > rate/2 {
		rate = satMul(2, g.PeakRate)
	}
	hi, lo := bits.Mul64(elapsed, rate)
	if hi != 0 {
		return maxBumpToken
	}
	gap := lo / 1000
	if lo%1000 != 0 {
		gap++
	}
	f := g.Token + gap + 1
	if f < g.Token || f > maxBumpToken {
		return max(g.Token, maxBumpToken)
	}
	return f
}

func satMul(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// noteGrant advances the grant clock for a grant stamped ms. A stamp older
// than the current second (another leader's clock) counts in the current
// second, which only raises the peak.
func (m *Machine) noteGrant(ms int64) {
	m.lastGrantMs = max(m.lastGrantMs, ms)
	if sec := ms / 1000; sec > m.rateSecond {
		m.rateSecond, m.rateCount = sec, 0
	}
	m.rateCount++
	m.peakRate = max(m.peakRate, m.rateCount)
}

// raiseFloor raises the token counter to at least v, and the grant clock's
// newest stamp to the command's (BumpToken, TokenFloor).
func (m *Machine) raiseFloor(a *applyCtx, v uint64) error {
	if v > maxBumpToken {
		return fmt.Errorf("%w: cannot bump the token counter to %d (the maximum is %d)", ErrInvalidToken, v, uint64(maxBumpToken))
	}
	m.token = max(m.token, v)
	m.lastGrantMs = max(m.lastGrantMs, a.unixMs)
	return nil
}

func (m *Machine) tokenFloor(a *applyCtx, c *fsmpb.TokenFloor) {
	if err := m.raiseFloor(a, c.GetMin()); err != nil {
		a.res.Err = err
		return
	}
	if c.GetDropSessions() {
		for id := range m.sessions {
			a.res.EndedSessions = append(a.res.EndedSessions, id)
		}
		slices.Sort(a.res.EndedSessions)
		m.sessions = map[string]*session{}
		m.locks = map[string]*lock{}
		m.bytes = m.recount()
		m.counts = Census{}
	}
}
