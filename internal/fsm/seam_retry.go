package fsm

// retryOf returns the index of the holding an Acquire by leaseID repeats (a
// retry whose answer was lost), or -1 (a seam: see seam_token.go).
func retryOf(l *lock, leaseID string) int { return l.holderIndex(leaseID) }
