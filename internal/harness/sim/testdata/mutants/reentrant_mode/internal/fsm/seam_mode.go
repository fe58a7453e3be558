package fsm

import "github.com/leasehold/leasehold/internal/fsm/fsmpb"

// Mutant: the re-entrant path ignores the mode: a session that holds a
// name shared and asks for it exclusive gets its shared holding back (a
// "writer" beside other readers), and the other way round.
func sameMode(_, _ fsmpb.Mode) bool { return true }
