//go:build mutant_release_token

package fsm

// Mutant: release does not check the token, so a holder's older grant
// releases its newer one.
func init() { holdingMatches = func(_, _ uint64) bool { return true } }
