package fsm

import (
	"testing"
)

func TestLimits(t *testing.T) {
	small := Limits{MaxSessions: 3, MaxLocksPerSession: 2, MaxWaitersPerName: 1, MaxKVKeys: 1}
	runCases(t, []applyCase{
		{name: "MaxSessions", limits: small, setup: sessions("A", "B", "C"), cmd: create("D", "worker-D"), wantErr: ErrTooManySessions},
		{
			name: "MaxSessions frees up when a session ends", limits: small,
			setup: append(sessions("A", "B", "C"), closeSession("B")),
			cmd:   create("D", "worker-D"),
		},
		{name: "lease id reused", setup: sessions("A"), cmd: create("A", "worker-A2"), wantErr: ErrSessionExists},
		{
			name: "MaxLocksPerSession counts holdings", limits: small,
			setup:   append(sessions("A"), acquire("x", "A"), acquire("y", "A")),
			cmd:     acquire("z", "A"),
			wantErr: ErrTooManyLocks,
		},
		{
			name: "MaxLocksPerSession counts queue entries", limits: small,
			setup:   append(sessions("A", "B"), acquire("x", "B"), acquire("y", "B"), acquire("x", "A"), acquire("y", "A")),
			cmd:     acquire("z", "A", try()),
			wantErr: ErrTooManyLocks,
		},
		{
			name: "MaxLocksPerSession allows re-acquiring a held name", limits: small,
			setup: append(sessions("A"), acquire("x", "A"), acquire("y", "A")),
			cmd:   acquire("x", "A"),
			check: func(t *testing.T, r *rig, res Result) { wantHolding(t, res, "A", 1) },
		},
		{
			name: "MaxLocksPerSession frees up on release", limits: small,
			setup: append(sessions("A"), acquire("x", "A"), acquire("y", "A"), release("x", "A", 1)),
			cmd:   acquire("z", "A"),
			check: func(t *testing.T, r *rig, res Result) { wantHolding(t, res, "A", 3) },
		},
		{
			name: "MaxLocksPerSession frees up on cancel", limits: small,
			setup: append(sessions("A", "B"), acquire("x", "B"), acquire("x", "A", waitID(1)), acquire("y", "A"), cancelWait("x", "A", 1)),
			cmd:   acquire("z", "A"),
			check: func(t *testing.T, r *rig, res Result) { wantHolding(t, res, "A", 3) },
		},
		{
			name: "MaxWaitersPerName", limits: small,
			setup:   append(sessions("A", "B", "C"), acquire("x", "A"), acquire("x", "B")),
			cmd:     acquire("x", "C"),
			wantErr: ErrTooManyWaiters,
		},
		{
			name: "MaxWaitersPerName: try still says locked", limits: small,
			setup:   append(sessions("A", "B", "C"), acquire("x", "A"), acquire("x", "B")),
			cmd:     acquire("x", "C", try()),
			wantErr: ErrLocked,
		},
		{
			name: "MaxWaitersPerName allows the queued session to re-acquire", limits: small,
			setup: append(sessions("A", "B"), acquire("x", "A"), acquire("x", "B")),
			cmd:   acquire("x", "B"),
			check: func(t *testing.T, r *rig, res Result) { wantWaiters(t, r, "x", "B") },
		},
		{
			name: "MaxKVKeys", limits: small,
			setup:   append(sessions("A"), acquire("x", "A"), kvPut("k", "v", 1)),
			cmd:     kvPut("k2", "v", 1),
			wantErr: ErrTooManyKeys,
		},
		{
			name: "MaxKVKeys allows overwriting a key", limits: small,
			setup: append(sessions("A"), acquire("x", "A"), kvPut("k", "v", 1)),
			cmd:   kvPut("k", "v2", 1),
			check: func(t *testing.T, r *rig, res Result) { wantKV(t, r, "k", "v2", 1) },
		},
	})
}
