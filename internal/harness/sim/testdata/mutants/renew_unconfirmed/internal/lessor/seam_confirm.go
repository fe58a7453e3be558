package lessor

import "context"

// Mutant: a keepalive is answered from the leader's memory without a
// leadership confirmation.
func renewConfirm(*Lessor, context.Context) error { return nil }
