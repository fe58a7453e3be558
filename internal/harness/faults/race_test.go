//go:build leasehold_faults && race

package faults

// raceEnabled: the tests run under -race, so the binary is built with it.
const raceEnabled = true
