//go:build mutant_no_grace

package lessor

import "time"

// Mutant: a new leader gives live sessions their TTL from its promotion,
// without the grace that covers renewals a deposed leader still
// acknowledges.
func init() {
	promoteDeadline = func(now time.Time, _, ttl time.Duration) time.Time { return now.Add(ttl) }
}
