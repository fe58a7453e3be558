package lessor

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// Confirmer confirms that this node leads, with evidence gathered after the
// call began (raftnode.Node.ConfirmLeadership). It must not be called with
// any lessor lock held. An error that wraps ErrNotLeader means another node
// leads; any other error means leadership could not be confirmed now.
type Confirmer interface {
	ConfirmLeadership(ctx context.Context) error
}

// Proposer submits a command to the Raft log and returns its result. It
// must not be called with any lessor lock held. An error wraps
// ErrNotApplied when the command certainly did not apply; any other error
// leaves the outcome unknown.
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
	// Grace is added to every deadline on Promote: a margin for failover
	// on top of what the safety argument needs (renewals are confirmed, so
	// a deposed leader acknowledges none; see the package comment).
	// Default 500 ms; must be ≥ 0.
	Grace time.Duration
	// Tick is the grid deadlines are checked on: a deadline is acted on
	// within one Tick after it, and never twice within one Tick. A tick
	// with nothing due is skipped (an idle lessor does not wake). Default
	// 50 ms; floor 1 ms.
	Tick time.Duration
	// MaxInflight bounds concurrent Expire/EndLockDelay proposals. Default 64.
	MaxInflight int
	// CheckpointInterval is the longest time between two checkpoints of an
	// unrenewed session (each session uses min(CheckpointInterval, TTL/10)).
	// Default 1 s; 0 disables checkpoints (every promotion then restarts
	// every session's full TTL); otherwise at least Tick.
	CheckpointInterval time.Duration
	// Confirmer confirms leadership before a renewal is answered
	// (RenewMany). Required.
	Confirmer Confirmer
	// Logger receives decisions. Default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults described on Config.
func DefaultConfig() Config {
	return Config{Clock: clock.Real{}, Drift: 0.02, Grace: 500 * time.Millisecond, Tick: 50 * time.Millisecond, MaxInflight: 64, CheckpointInterval: time.Second, Logger: slog.Default()}
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
	case c.CheckpointInterval < 0 || (c.CheckpointInterval > 0 && c.CheckpointInterval < c.Tick):
		return errors.New("lessor: CheckpointInterval must be 0 (off) or ≥ Tick")
	case c.Logger == nil:
		return errors.New("lessor: Logger is nil")
	case c.Confirmer == nil:
		return errors.New("lessor: Confirmer is nil")
	}
	return nil
}

const (
	// maxCheckpointBatch caps the sessions of one Checkpoint entry.
	maxCheckpointBatch = 4096
	// clearTimeout bounds the log write that clears a checkpoint before a
	// renewal of a checkpointed session is acknowledged (RenewMany).
	clearTimeout = 2 * time.Second
)
