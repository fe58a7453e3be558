package lessor

import "time"

// promoteDeadline is the deadline a new leader gives a live session:
// renewed now, plus the old leader's authority window (a seam: see
// seam_renew.go).
func promoteDeadline(now time.Time, grace, ttl time.Duration) time.Time {
	return now.Add(grace + ttl)
}
