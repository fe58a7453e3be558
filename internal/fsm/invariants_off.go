//go:build !leasehold_invariants

package fsm

// afterApply checks the state after every Apply in a build with the tag
// leasehold_invariants (invariants.go); normal builds check nothing here.
func afterApply(*Machine, uint64, *Result) {}
