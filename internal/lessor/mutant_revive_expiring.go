//go:build mutant_revive_expiring

package lessor

// Mutant: a session whose Expire was proposed is still renewed, so a
// holder is told "renewed" for a session whose end may commit.
func init() { refuseExpiring = false }
