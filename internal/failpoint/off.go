//go:build !leasehold_failpoints

package failpoint

// Enabled reports whether this build has failpoints.
const Enabled = false

// Inject does nothing in a normal build.
func Inject(Point) {}

// Leading does nothing in a normal build.
func Leading(bool) {}
