package api

import (
	"crypto/rand"
	"encoding/binary"
)

// NewWaitID returns a random non-zero wait id for an Acquire or
// TryAcquire: the name under which its caller can withdraw it with
// CancelWait.
func NewWaitID() uint64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}
