package main

import (
	"slices"
	"time"
)

// The rule a flood is judged by (docs/operating/security.md, "The abuse
// script"): the canary's p90 under the flood stays within heldFactor times
// its idle p90, or the flood was refused with resource-exhausted and the
// canary stays within refusedFactor times; fresh clients get in at least
// freshShare of the time; nothing the canary was told is lost.
const (
	heldFactor    = 5
	refusedFactor = 20
	freshShare    = 0.9
)

// Verdicts of one flood.
const (
	verdictHeld    = "held"
	verdictRefused = "refused-and-held"
	verdictFailed  = "FAILED"
)

// result is what one flood measured.
type result struct {
	flood      string
	sent       int64         // requests (or connections) the flood sent
	refused    int64         // of them, answered resource-exhausted
	idle, busy time.Duration // the canary's p90 before and during the flood
	busyRounds int           // canary rounds that started during the flood
	freshOK    int64         // fresh clients that got a session
	freshTried int64
	lost       string // what the canary lost during the flood ("" when nothing)
	broken     string // why the flood could not run ("" when it ran)
}

// factor is the canary's p90 under the flood over its idle p90.
func (r result) factor() float64 {
	if r.idle <= 0 {
		return 0
	}
	return float64(r.busy) / float64(r.idle)
}

// unsafe says why the flood broke the rule's parts other than latency:
// it could not run, the canary lost something or measured nothing, or
// fresh clients were kept out. "" when none.
func (r result) unsafe() string {
	switch {
	case r.broken != "":
		return "the flood could not run: " + r.broken
	case r.lost != "":
		return "the canary lost " + r.lost
	case r.busyRounds == 0 || r.idle <= 0:
		return "the canary finished no round under the flood"
	case r.freshTried == 0:
		return "no fresh client was tried"
	case float64(r.freshOK) < freshShare*float64(r.freshTried):
		return "fresh clients got in less than 90 % of the time"
	}
	return ""
}

// verdict applies the rule, and says why a flood failed.
func (r result) verdict() (string, string) {
	if why := r.unsafe(); why != "" {
		return verdictFailed, why
	}
	f := r.factor()
	switch {
	case f <= heldFactor:
		return verdictHeld, ""
	case r.refused > 0 && f <= refusedFactor:
		return verdictRefused, ""
	case r.refused > 0:
		return verdictFailed, "refused, but the canary's p90 is beyond 20× idle"
	default:
		return verdictFailed, "not refused, and the canary's p90 is beyond 5× idle"
	}
}

// p90 is the 90th percentile of lats (nearest rank), 0 for none.
func p90(lats []time.Duration) time.Duration {
	if len(lats) == 0 {
		return 0
	}
	s := slices.Clone(lats)
	slices.Sort(s)
	return s[(len(s)*90+99)/100-1]
}
