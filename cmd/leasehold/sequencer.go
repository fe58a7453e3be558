package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/client"
)

// sequencerFlag adds --sequencer to acquire and run.
func sequencerFlag(f *pflag.FlagSet, seq *bool) {
	f.BoolVar(seq, "sequencer", false, "ask for a signed sequencer with the grant (for resources in verifying mode; the cluster needs serve --sequencer-key)")
}

// sessionOptions are the session options of acquire, lock, run and elect;
// an empty owner is defaultOwner().
func sessionOptions(ttl time.Duration, owner string, seq bool) []client.SessionOption {
	opts := []client.SessionOption{client.WithTTL(ttl), client.WithOwner(ownerOr(owner))}
	if seq {
		opts = append(opts, client.WithSequencers())
	}
	return opts
}
