package fsm

// withdrawableBy returns the wait id a holding created by the request held
// (0: none left) keeps after another request of its session, asked, acquired
// it again: held when asked is the same request (a retry), otherwise 0, so
// that no withdrawal releases a holding that more than one request learned
// (a seam: see seam_token.go).
func withdrawableBy(held, asked uint64) uint64 {
	if held == asked {
		return held
	}
	return 0
}
