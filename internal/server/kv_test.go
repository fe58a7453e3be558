package server_test

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/server"
	"github.com/leasehold/leasehold/internal/validate"
)

// TestKvDelete: a fenced delete removes the value, keeps the fence (an
// older token is still refused), and a newer write brings the key back.
func TestKvDelete(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	cl := c.Client
	a := newSession(t, cl, 60_000, "A")
	t1 := acquire(t, cl, "x", a.GetLeaseId()).GetToken()
	b := newSession(t, cl, 60_000, "B")
	t2 := acquire(t, cl, "y", b.GetLeaseId()).GetToken()
	_, err := cl.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "k", Value: []byte("v1"), Token: t1}))
	mustOK(t, "KvPut", err)

	_, err = cl.KvDelete(ctxT(t), req(&pb.KvDeleteRequest{Key: "missing", Token: t1}))
	wantCode(t, "KvDelete of a key never written", err, api.CodeNotFound)
	_, err = cl.KvDelete(ctxT(t), req(&pb.KvDeleteRequest{Key: "k", Token: 0}))
	wantCode(t, "KvDelete with token 0", err, api.CodeInvalidArgument)
	_, err = cl.KvDelete(ctxT(t), req(&pb.KvDeleteRequest{Key: "bad key", Token: t1}))
	wantCode(t, "KvDelete of a bad key", err, api.CodeInvalidArgument)
	_, err = cl.KvDelete(ctxT(t), req(&pb.KvDeleteRequest{Key: "k", Token: t1, Strict: true}))
	wantCode(t, "strict KvDelete with the last token", err, api.CodeStaleToken)

	res, err := cl.KvDelete(ctxT(t), req(&pb.KvDeleteRequest{Key: "k", Token: t2}))
	mustOK(t, "KvDelete", err)
	if res.Msg.GetToken() != t2 || res.Msg.GetKey() != "k" {
		t.Fatalf("KvDelete answered %v", res.Msg)
	}
	_, err = cl.KvGet(ctxT(t), req(&pb.KvGetRequest{Key: "k"}))
	wantCode(t, "KvGet of a deleted key", err, api.CodeNotFound)
	_, err = cl.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "k", Value: []byte("late"), Token: t1}))
	wantCode(t, "KvPut with the token before the delete", err, api.CodeStaleToken)
	if ae := api.FromError(err); ae.LastToken != t2 {
		t.Fatalf("stale-token after delete carries last token %d, want %d", ae.LastToken, t2)
	}
	_, err = cl.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "k", Value: []byte("v2"), Token: t2}))
	mustOK(t, "KvPut after delete", err)
	got, err := cl.KvGet(ctxT(t), req(&pb.KvGetRequest{Key: "k"}))
	mustOK(t, "KvGet", err)
	if string(got.Msg.GetValue()) != "v2" {
		t.Fatalf("KvGet = %v", got.Msg)
	}
}

// TestKVFloodEndsInQuota: a flood of fenced KV writes ends in
// resource-exhausted with the operator's message; the state's accounted
// size stays within the quota; a write that cannot fit is refused before
// it is proposed (the log does not grow); deletes and reads still work.
func TestKVFloodEndsInQuota(t *testing.T) {
	t.Parallel()
	const quota = 1 << 20
	c, _ := startManual(t, servertest.Options{Configure: func(cfg *server.Config) { cfg.Raft.Limits.MaxStateBytes = quota }})
	cl := c.Client
	a := newSession(t, cl, 60_000, "A")
	tok := acquire(t, cl, "x", a.GetLeaseId()).GetToken()
	value := bytes.Repeat([]byte("v"), validate.MaxValueLen)
	var refused error
	for i := range 64 { // 64 × 64 KiB = 4 MiB, four times the quota: the loop ends by refusal
		if _, err := cl.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: fmt.Sprintf("k%02d", i), Value: value, Token: tok})); err != nil {
			refused = err
			break
		}
	}
	wantCode(t, "KvPut past the quota", refused, api.CodeResourceExhausted)
	if msg := api.FromError(refused).Message; !strings.Contains(msg, "state quota of 1 MiB reached: delete KV keys or raise --quota-bytes") {
		t.Fatalf("quota refusal says %q", msg)
	}
	var used int64
	c.Server().Node().Read(func(m *fsm.Machine) { used = m.Bytes() })
	if used > quota || used < quota-2*int64(len(value)) {
		t.Fatalf("accounted %d bytes with a quota of %d", used, quota)
	}
	resp, err := c.HTTP.Get(c.URL + "/metrics")
	mustOK(t, "GET /metrics", err)
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{fmt.Sprintf("leasehold_state_bytes %d\n", used), "leasehold_state_quota_bytes 1.048576e+06\n"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	last := c.Server().Node().Raft().LastIndex()
	_, err = cl.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "again", Value: value, Token: tok}))
	wantCode(t, "KvPut on a full state", err, api.CodeResourceExhausted)
	if got := c.Server().Node().Raft().LastIndex(); got != last {
		t.Fatalf("a refused write grew the log from %d to %d", last, got)
	}
	_, err = cl.KvGet(ctxT(t), req(&pb.KvGetRequest{Key: "k00"}))
	mustOK(t, "KvGet on a full state", err)
	_, err = cl.KvDelete(ctxT(t), req(&pb.KvDeleteRequest{Key: "k00", Token: tok}))
	mustOK(t, "KvDelete on a full state", err)
	_, err = cl.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "again", Value: value, Token: tok}))
	mustOK(t, "KvPut after a delete made room", err)
	_, err = cl.Release(ctxT(t), req(&pb.ReleaseRequest{Name: "x", LeaseId: a.GetLeaseId(), Token: tok}))
	mustOK(t, "Release on a full state", err)
}
