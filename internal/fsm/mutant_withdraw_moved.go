//go:build mutant_withdraw_moved

package fsm

// Mutant: a re-entrant Acquire moves the holding's wait id onto its own
// request, so that request's withdrawal releases a holding another
// request of the session learned.
func init() { withdrawableBy = func(_, asked uint64) uint64 { return asked } }
