//go:build leasehold_faults && !race

package faults

const raceEnabled = false
