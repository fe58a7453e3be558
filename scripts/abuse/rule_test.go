package main

import (
	"testing"
	"time"
)

func TestP90(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	for _, tc := range []struct {
		lats []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{ms(7), 7 * time.Millisecond},
		{ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 9 * time.Millisecond}, // the 9th of 10
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11), 10 * time.Millisecond},
		{ms(1, 1, 1, 1, 1, 1, 1, 1, 1, 500), time.Millisecond}, // one outlier in 10 is not the p90
		{ms(1, 1, 1, 1, 1, 1, 1, 1, 500, 500), 500 * time.Millisecond},
	} {
		if got := p90(tc.lats); got != tc.want {
			t.Errorf("p90(%v) = %v, want %v", tc.lats, got, tc.want)
		}
	}
}

func TestVerdict(t *testing.T) {
	ok := result{idle: 4 * time.Millisecond, busyRounds: 100, freshOK: 18, freshTried: 20}
	with := func(f func(*result)) result { r := ok; f(&r); return r }
	for _, tc := range []struct {
		name   string
		r      result
		want   string
		unsafe bool // the failure is not the latency alone (-latency-open does not excuse it)
	}{
		{"within 5x", with(func(r *result) { r.busy = 20 * time.Millisecond }), verdictHeld, false},
		{"within 5x and refused", with(func(r *result) { r.busy = 20 * time.Millisecond; r.refused = 3 }), verdictHeld, false},
		{"beyond 5x, not refused", with(func(r *result) { r.busy = 21 * time.Millisecond }), verdictFailed, false},
		{"beyond 5x, refused, within 20x", with(func(r *result) { r.busy = 80 * time.Millisecond; r.refused = 1 }), verdictRefused, false},
		{"refused, beyond 20x", with(func(r *result) { r.busy = 81 * time.Millisecond; r.refused = 1000 }), verdictFailed, false},
		{"fresh clients at 90 %", with(func(r *result) { r.busy = 4 * time.Millisecond; r.freshOK = 18 }), verdictHeld, false},
		{"fresh clients under 90 %", with(func(r *result) { r.busy = 4 * time.Millisecond; r.freshOK = 17 }), verdictFailed, true},
		{"no fresh client tried", with(func(r *result) { r.busy = 4 * time.Millisecond; r.freshOK, r.freshTried = 0, 0 }), verdictFailed, true},
		{"canary lost its lock", with(func(r *result) { r.busy = 4 * time.Millisecond; r.lost = "its lock" }), verdictFailed, true},
		{"no canary round under the flood", with(func(r *result) { r.busyRounds = 0 }), verdictFailed, true},
		{"flood could not run", with(func(r *result) { r.busy = 4 * time.Millisecond; r.broken = "setup" }), verdictFailed, true},
	} {
		if got, why := tc.r.verdict(); got != tc.want {
			t.Errorf("%s: verdict %s (%s), want %s", tc.name, got, why, tc.want)
		}
		if got := tc.r.unsafe() != ""; got != tc.unsafe {
			t.Errorf("%s: unsafe %q, want unsafe %v", tc.name, tc.r.unsafe(), tc.unsafe)
		}
	}
}

func TestConnCode(t *testing.T) {
	for in, want := range map[string]string{
		"HTTP/1.1 429 Too Many Requests\r\nConnection: close\r\n\r\nresource-exhausted: 512 connections are open": codeExhausted,
		"\x00\x00\x12\x04\x00\x00\x00\x00\x00": "", // the node's SETTINGS: accepted
		"":                                     "closed",
	} {
		if got := connCode([]byte(in)); got != want {
			t.Errorf("connCode(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestKeptWrite(t *testing.T) {
	maybe := []string{"write-9-token-5"}
	for _, tc := range []struct {
		got  string
		want bool
	}{
		{"write-7-token-4", true},  // the last acknowledged write
		{"write-9-token-5", true},  // a later write whose answer was lost
		{"write-3-token-2", false}, // an older write: the acknowledged one is lost
		{"", false},
	} {
		if got := keptWrite(tc.got, "write-7-token-4", maybe); got != tc.want {
			t.Errorf("keptWrite(%q) = %v, want %v", tc.got, got, tc.want)
		}
	}
}
