package fsm

// Mutant: release does not check the token, so a holder's older grant
// releases its newer one.
func holdingMatches(_, _ uint64) bool { return true }
