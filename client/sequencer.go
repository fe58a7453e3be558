package client

import "github.com/leasehold/leasehold/sequencer"

// WithSequencers asks for a signed sequencer with every lock of the session (Lock.Sequencer):
// a resource in verifying mode checks it offline against the cluster's key set (GET /v1/keys),
// so a forged token cannot be recorded. Creating the session fails with invalid-argument when
// the cluster has no signing key. Sessions without it never pay for signing.
func WithSequencers() SessionOption { return func(o *sessionOptions) { o.sequencers = true } }

// Sequencer returns the lock's signed sequencer in text form (unpadded base64url, for the
// Fencing-Sequencer header), or "" when the session was created without WithSequencers.
func (l *Lock) Sequencer() string {
	if b := l.h.holding.GetSequencer(); len(b) > 0 {
		return sequencer.EncodeToString(b)
	}
	return ""
}
