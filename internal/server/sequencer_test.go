package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
	"github.com/leasehold/leasehold/sequencer"
)

func testSigner(t *testing.T) *sequencer.Signer {
	t.Helper()
	k, err := sequencer.GenerateKey(nil, "k1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s, err := sequencer.NewSigner("cluster-1", k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSequencers: a session that asks for sequencers gets, with each grant, a sequencer that
// verifies against the key set GET /v1/keys serves; a plain session gets none.
func TestSequencers(t *testing.T) {
	t.Parallel()
	signer := testSigner(t)
	c := servertest.Start(t, servertest.Options{Configure: func(cfg *server.Config) { cfg.Signer = signer }})

	resp, err := c.HTTP.Get(c.URL + server.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	var ks sequencer.KeySet
	err = json.NewDecoder(resp.Body).Decode(&ks)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", server.KeysPath, resp.StatusCode, err)
	}
	v, err := sequencer.NewVerifier(ks)
	if err != nil {
		t.Fatal(err)
	}

	sr, err := c.Client.CreateSession(ctxT(t), req(&pb.CreateSessionRequest{TtlMs: 5000, Sequencers: true}))
	mustOK(t, "CreateSession", err)
	h := acquire(t, c.Client, "seq:a", sr.Msg.GetLeaseId())
	q, err := v.Verify(h.GetSequencer(), "seq:a")
	if err != nil {
		t.Fatalf("the grant's sequencer does not verify: %v", err)
	}
	if q.Token != h.GetToken() || q.LeaseID != h.GetLeaseId() || q.ClusterID != "cluster-1" || q.IssuedUnixMs != h.GetAcquiredUnixMs() {
		t.Fatalf("sequencer %+v for holding %+v", q, h)
	}
	tr, err := c.Client.TryAcquire(ctxT(t), req(&pb.TryAcquireRequest{Name: "seq:b", LeaseId: sr.Msg.GetLeaseId()}))
	mustOK(t, "TryAcquire", err)
	if _, err := v.Verify(tr.Msg.GetHolding().GetSequencer(), "seq:b"); err != nil {
		t.Fatalf("TryAcquire's sequencer: %v", err)
	}
	if _, err := v.Verify(tr.Msg.GetHolding().GetSequencer(), "seq:a"); !errors.Is(err, sequencer.ErrWrongLock) {
		t.Fatalf("seq:b's sequencer presented for seq:a: %v", err)
	}

	// A reader's grant is signed as shared, a semaphore's with its slot.
	sr2, err := c.Client.CreateSession(ctxT(t), req(&pb.CreateSessionRequest{TtlMs: 5000, Sequencers: true}))
	mustOK(t, "CreateSession", err)
	for _, tc := range []struct {
		r    *pb.AcquireRequest
		mode sequencer.Mode
		slot uint32
	}{
		{&pb.AcquireRequest{Name: "seq:rw", LeaseId: sr.Msg.GetLeaseId(), Mode: pb.LockMode_LOCK_MODE_SHARED}, sequencer.Shared, 0},
		{&pb.AcquireRequest{Name: "seq:sem", LeaseId: sr.Msg.GetLeaseId(), Permits: 3}, sequencer.Exclusive, 0},
		{&pb.AcquireRequest{Name: "seq:sem", LeaseId: sr2.Msg.GetLeaseId(), Permits: 3}, sequencer.Exclusive, 1},
	} {
		resp, err := c.Client.Acquire(ctxT(t), req(tc.r))
		mustOK(t, "Acquire "+tc.r.GetName(), err)
		q, err := v.Verify(resp.Msg.GetHolding().GetSequencer(), tc.r.GetName())
		if err != nil || q.Mode != tc.mode || q.Slot != tc.slot {
			t.Fatalf("sequencer of %v = %+v, %v; want mode %v slot %d", tc.r, q, err, tc.mode, tc.slot)
		}
	}

	plain := newSession(t, c.Client, 5000, "plain")
	if h := acquire(t, c.Client, "seq:c", plain.GetLeaseId()); len(h.GetSequencer()) != 0 {
		t.Fatalf("a plain session got a sequencer (%d bytes)", len(h.GetSequencer()))
	}
}

// TestSequencersWithoutSigner: asking for sequencers from a cluster without a key is
// invalid-argument, and GET /v1/keys is 404.
func TestSequencersWithoutSigner(t *testing.T) {
	t.Parallel()
	c := servertest.Start(t, servertest.Options{})
	_, err := c.Client.CreateSession(ctxT(t), req(&pb.CreateSessionRequest{TtlMs: 5000, Sequencers: true}))
	wantCode(t, "CreateSession with sequencers", err, api.CodeInvalidArgument)
	resp, err := c.HTTP.Get(c.URL + server.KeysPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET %s without a signer: %d", server.KeysPath, resp.StatusCode)
	}
}
