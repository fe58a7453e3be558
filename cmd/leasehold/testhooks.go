//go:build leasehold_testhooks

package main

import (
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/leasehold/leasehold/internal/clock"
	"github.com/leasehold/leasehold/internal/server"
)

// Test hooks, compiled only with -tags leasehold_testhooks (the fault suite
// in internal/harness/faults builds the binary so). They are read from the
// environment so that no flag a user could see exists for them:
//
//   - LEASEHOLD_TESTHOOK_CLOCK_RATE=R runs the lessor's (and the server's)
//     clock at R times real speed, as a machine whose oscillator is off;
//   - LEASEHOLD_TESTHOOK_SNAPSHOT_THRESHOLD=N snapshots every N entries
//     (checked every 200 ms) and keeps N/2 entries after it, so that a
//     follower that falls behind is sent a snapshot.
func applyTestHooks(cfg *server.Config, logger *slog.Logger) error {
	if v := os.Getenv("LEASEHOLD_TESTHOOK_CLOCK_RATE"); v != "" {
		rate, err := strconv.ParseFloat(v, 64)
		if err != nil || rate <= 0 {
			return usageErr("LEASEHOLD_TESTHOOK_CLOCK_RATE=%q: want a rate > 0", v)
		}
		base := cfg.Lessor.Clock
		if base == nil {
			base = clock.Real{}
		}
		cfg.Lessor.Clock = clock.NewScaled(base, rate)
		logger.Warn("test hook: the lease clock runs at a skewed rate", "rate", rate)
	}
	if v := os.Getenv("LEASEHOLD_TESTHOOK_SNAPSHOT_THRESHOLD"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n < 2 {
			return usageErr("LEASEHOLD_TESTHOOK_SNAPSHOT_THRESHOLD=%q: want an entry count ≥ 2", v)
		}
		cfg.Raft.SnapshotThreshold, cfg.Raft.TrailingLogs = n, n/2
		cfg.Raft.SnapshotInterval = 200 * time.Millisecond
		logger.Warn("test hook: frequent snapshots", "threshold", n, "trailing_logs", n/2)
	}
	return nil
}
