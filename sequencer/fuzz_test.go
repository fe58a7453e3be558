package sequencer_test

import (
	"bytes"
	"testing"

	"github.com/leasehold/leasehold/sequencer"
)

// FuzzDecode feeds arbitrary bytes to Parse and Verify. Whatever is accepted must be canonical
// (signing the decoded fields again with the same key gives the same bytes), and nothing but
// the exact signed bytes may verify. The seed corpus is in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	s := newSigner(f, "c1", seededKey(f, "k1", 1))
	v := newVerifier(f, s.KeySet())
	good, err := s.Sign(grant)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{sequencer.Version})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := sequencer.Parse(b)
		if err != nil {
			if _, verr := v.Verify(b, grant.Name); verr == nil {
				t.Fatalf("Verify accepted what Parse refused (%v)", err)
			}
			return
		}
		// Parse accepted: the text form round-trips.
		back, err := sequencer.DecodeString(sequencer.EncodeToString(b))
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("text round trip: %x, %v", back, err)
		}
		vq, err := v.Verify(b, q.Name)
		if err != nil {
			return // forged, another key or cluster: fine, as long as it is refused
		}
		if vq != q {
			t.Fatalf("Verify returned %+v, Parse %+v", vq, q)
		}
		again, err := s.Sign(q)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("a verified sequencer is not canonical: %x re-signs as %x (%v)", b, again, err)
		}
	})
}
