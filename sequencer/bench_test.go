package sequencer_test

import "testing"

// BenchmarkSign is the grantor's cost per grant of a session that asks for sequencers.
func BenchmarkSign(b *testing.B) {
	s := newSigner(b, "c1", seededKey(b, "k1", 1))
	for b.Loop() {
		if _, err := s.Sign(grant); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyString is the resource's cost per fenced request in verifying mode.
func BenchmarkVerifyString(b *testing.B) {
	s := newSigner(b, "c1", seededKey(b, "k1", 1))
	v := newVerifier(b, s.KeySet())
	text, err := s.SignString(grant)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := v.VerifyString(text, grant.Name); err != nil {
			b.Fatal(err)
		}
	}
}
