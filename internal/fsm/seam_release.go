package fsm

// holdingMatches reports whether a release's token names the holding (a
// seam: see seam_token.go).
func holdingMatches(held, given uint64) bool { return held == given }
