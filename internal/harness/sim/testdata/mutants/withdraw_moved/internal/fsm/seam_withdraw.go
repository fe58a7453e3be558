package fsm

// Mutant: a re-entrant Acquire moves the holding's wait id onto its own
// request, so that request's withdrawal releases a holding another
// request of the session learned.
func withdrawableBy(_, asked uint64) uint64 { return asked }
