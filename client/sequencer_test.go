package client_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/internal/server"
	"github.com/leasehold/leasehold/sequencer"
)

// TestWithSequencers: a lock of a session created WithSequencers carries a sequencer that a
// fence guard in verifying mode accepts; a plain lock carries none.
func TestWithSequencers(t *testing.T) {
	k, err := sequencer.GenerateKey(nil, "k1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	signer, err := sequencer.NewSigner("cluster-1", k)
	if err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, func(c *server.Config) { c.Signer = signer })
	c := dial(t, ts.Addr)
	l, err := newSession(t, c, client.WithSequencers()).Acquire(testCtx(t), "report:417")
	if err != nil {
		t.Fatal(err)
	}
	v, err := sequencer.NewVerifier(signer.KeySet())
	if err != nil {
		t.Fatal(err)
	}
	guard := fence.NewSequencers(v, nil).Guard(fence.NewMemory())
	if err := guard.Write(testCtx(t), "report:417", l.Sequencer(), []byte("v")); err != nil {
		t.Fatalf("verifying guard refused the lock's sequencer: %v", err)
	}
	if last, _, _ := guard.Last(testCtx(t), "report:417"); last != l.Token() {
		t.Fatalf("last %d, want the lock's token %d", last, l.Token())
	}
	plain, err := newSession(t, c).Acquire(testCtx(t), "report:418")
	if err != nil {
		t.Fatal(err)
	}
	if plain.Sequencer() != "" {
		t.Fatal("a plain session's lock has a sequencer")
	}
}
