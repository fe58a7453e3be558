package fsm

// Mutant: an ended session's queue entry stays queued, and the grant to the
// queue's head does not recheck that its session still exists.
func withdrawWait(*lock, string) uint64 { return 0 }
