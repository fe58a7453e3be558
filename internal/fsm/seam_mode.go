package fsm

import "github.com/leasehold/leasehold/internal/fsm/fsmpb"

// sameMode reports whether a request asking for mode asked repeats a
// standing (holding or queue entry) held in mode held (a seam: see
// seam_token.go).
func sameMode(held, asked fsmpb.Mode) bool { return held == asked }
