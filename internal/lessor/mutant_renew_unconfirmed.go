//go:build mutant_renew_unconfirmed

package lessor

import "context"

// Mutant: a keepalive is answered from the leader's memory without a
// leadership confirmation.
func init() { renewConfirm = func(*Lessor, context.Context) error { return nil } }
