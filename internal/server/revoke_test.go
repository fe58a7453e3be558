package server_test

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// revokeSetup starts a node with auth on: "ops" is admin, every other
// principal named gets a token and the policy given (nil: none).
func revokeSetup(t *testing.T, policies ...*pb.Policy) (*servertest.Cluster, bearerClients, map[string]*pb.CreateTokenResponse) {
	t.Helper()
	c, node := startAuth(t)
	ctx := ctxT(t)
	toks := map[string]*pb.CreateTokenResponse{}
	for _, who := range []string{"ops", "worker", "reader"} {
		res, err := node.auth.CreateToken(ctx, req(&pb.CreateTokenRequest{Principal: who}))
		mustOK(t, "create token "+who, err)
		toks[who] = res.Msg
	}
	ops := withToken(t, c, toks["ops"].GetToken())
	for _, p := range policies {
		_, err := node.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: p}))
		mustOK(t, "set policy "+p.GetName(), err)
	}
	_, err := node.auth.SetEnabled(ctx, req(&pb.SetEnabledRequest{Enabled: true}))
	mustOK(t, "enable auth", err)
	return c, ops, toks
}

// ended waits at most a second for f (a stream's next receive, an RPC) to
// fail, and returns its error.
func ended(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(time.Second):
		t.Fatalf("%s still open a second after the auth change", what)
		return nil
	}
}

// drainUntilError receives from a stream until it fails.
func drainUntilError(receive func() error) <-chan error {
	return async(func() error {
		for {
			if err := receive(); err != nil {
				return err
			}
		}
	})
}

// releaseUngranted waits for the queue of held's name to be empty, has the
// admin release held, and checks that nobody was granted the name.
func releaseUngranted(t *testing.T, admin client, held *pb.Holding, why string) {
	t.Helper()
	waitQueued(t, admin, held.GetName())
	_, err := admin.Release(ctxT(t), req(&pb.ReleaseRequest{Name: held.GetName(), LeaseId: held.GetLeaseId(), Token: held.GetToken()}))
	mustOK(t, "release "+held.GetName(), err)
	if h := status(t, admin, held.GetName()).GetHolder(); h != nil {
		t.Fatalf("%s was granted to %v after %s", held.GetName(), h, why)
	}
}

// TestRevokedTokenEndsOpenStreams: revoking a token ends, within a second
// and with permission-denied, every stream its principal has open (Watch,
// KeepAliveStream, LockStream) and its queued Acquires, which leave the
// queue: the lock is not granted to them when its holder releases it.
func TestRevokedTokenEndsOpenStreams(t *testing.T) {
	c, ops, toks := revokeSetup(t, &pb.Policy{Name: "w", Principals: []string{"worker"}, Permissions: []string{"lock", "read"}, Prefixes: []string{"a:"}})
	ctx := ctxT(t)
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	worker, admin := as(c, rt, toks["worker"].GetToken()), as(c, rt, toks["ops"].GetToken())
	held := acquire(t, admin, "a:q", newSession(t, admin, 60_000, "ops").GetLeaseId())
	lease := newSession(t, worker, 60_000, "worker").GetLeaseId()
	lease2 := newSession(t, worker, 60_000, "worker").GetLeaseId()

	ka := worker.KeepAliveStream(ctx)
	mustOK(t, "keepalive send", ka.Send(&pb.KeepAliveStreamRequest{LeaseId: lease}))
	if r, err := ka.Receive(); err != nil || r.GetErrorCode() != "" {
		t.Fatalf("renewal before the revocation: %v %v", r, err)
	}
	w, err := worker.Watch(ctx, req(&pb.WatchRequest{Prefix: "a:", ProgressNotify: true}))
	mustOK(t, "watch", err)
	if !w.Receive() {
		t.Fatalf("watch before the revocation: %v", w.Err())
	}
	ls := openLockStream(t, worker)
	lsSend(t, ls, lsAcquire(1, "a:q", lease))
	unary := async(func() error {
		_, err := worker.Acquire(ctx, req(&pb.AcquireRequest{Name: "a:q", LeaseId: lease2}))
		return err
	})
	if err := servertest.Eventually(5*time.Second, func() bool { return len(waiters(status(t, admin, "a:q"))) == 2 }); err != nil {
		t.Fatalf("the worker's Acquires never queued: %v", waiters(status(t, admin, "a:q")))
	}

	kaEnd := drainUntilError(func() error { _, err := ka.Receive(); return err })
	wEnd := drainUntilError(func() error {
		if w.Receive() {
			return nil
		}
		return w.Err()
	})
	lsAnswer := async(func() error {
		m, err := ls.Receive()
		if err != nil {
			return err
		}
		if m.GetId() != 1 || m.GetError() == nil {
			t.Errorf("the queued Acquire on the lock stream answered %v", m)
			return nil
		}
		return api.Errorf(api.Code(m.GetError().GetCode()), "%s", m.GetMessage())
	})
	_, err = ops.auth.RevokeToken(ctx, req(&pb.RevokeTokenRequest{Id: toks["worker"].GetId()}))
	mustOK(t, "revoke the worker's token", err)

	wantCode(t, "KeepAliveStream after the revocation", ended(t, "KeepAliveStream", kaEnd), api.CodePermissionDenied)
	wantCode(t, "Watch after the revocation", ended(t, "Watch", wEnd), api.CodePermissionDenied)
	wantCode(t, "queued Acquire after the revocation", ended(t, "the queued unary Acquire", unary), api.CodePermissionDenied)
	wantCode(t, "queued Acquire on the LockStream after the revocation", ended(t, "the queued LockStream Acquire", lsAnswer), api.CodePermissionDenied)
	lsEnd := drainUntilError(func() error { _, err := ls.Receive(); return err })
	wantCode(t, "LockStream after the revocation", ended(t, "LockStream", lsEnd), api.CodePermissionDenied)

	releaseUngranted(t, admin, held, "the worker's token was revoked")
}

// TestPolicyChangeReauthorizesOpenStreams: a changed policy decides every
// open stream and queued Acquire again within a second: what the
// principal may still do goes on (its KeepAliveStream while it may lock
// some name), what it may not ends with permission-denied (a Watch or a
// queued Acquire outside its prefixes now; the KeepAliveStream once its
// policy is deleted).
func TestPolicyChangeReauthorizesOpenStreams(t *testing.T) {
	c, ops, toks := revokeSetup(t,
		&pb.Policy{Name: "w", Principals: []string{"worker"}, Permissions: []string{"lock", "read"}, Prefixes: []string{"a:"}},
		&pb.Policy{Name: "r", Principals: []string{"reader"}, Permissions: []string{"read"}, Prefixes: []string{"a:"}})
	ctx := ctxT(t)
	rt := h2c()
	t.Cleanup(rt.CloseIdleConnections)
	worker, reader, admin := as(c, rt, toks["worker"].GetToken()), as(c, rt, toks["reader"].GetToken()), as(c, rt, toks["ops"].GetToken())
	held := acquire(t, admin, "a:q", newSession(t, admin, 60_000, "ops").GetLeaseId())
	lease := newSession(t, worker, 60_000, "worker").GetLeaseId()

	ka := worker.KeepAliveStream(ctx)
	renew := func() (*pb.KeepAliveStreamResponse, error) {
		if err := ka.Send(&pb.KeepAliveStreamRequest{LeaseId: lease}); err != nil {
			return nil, err
		}
		return ka.Receive()
	}
	if r, err := renew(); err != nil || r.GetErrorCode() != "" {
		t.Fatalf("renewal before the change: %v %v", r, err)
	}
	w, err := reader.Watch(ctx, req(&pb.WatchRequest{Prefix: "a:", ProgressNotify: true}))
	mustOK(t, "watch", err)
	if !w.Receive() {
		t.Fatalf("watch before the change: %v", w.Err())
	}
	wEnd := drainUntilError(func() error {
		if w.Receive() {
			return nil
		}
		return w.Err()
	})
	queued := async(func() error {
		_, err := worker.Acquire(ctx, req(&pb.AcquireRequest{Name: "a:q", LeaseId: lease}))
		return err
	})
	waitQueued(t, admin, "a:q", lease)

	// The worker may now lock b: only; the reader loses its policy.
	_, err = ops.auth.SetPolicy(ctx, req(&pb.SetPolicyRequest{Policy: &pb.Policy{Name: "w", Principals: []string{"worker"}, Permissions: []string{"lock"}, Prefixes: []string{"b:"}}}))
	mustOK(t, "narrow the worker's policy", err)
	wantCode(t, "queued Acquire outside the new policy", ended(t, "the queued Acquire", queued), api.CodePermissionDenied)
	if r, err := renew(); err != nil || r.GetErrorCode() != "" {
		t.Fatalf("renewal after the policy still grants lock on b:: %v %v", r, err)
	}
	_, err = ops.auth.DeletePolicy(ctx, req(&pb.DeletePolicyRequest{Name: "r"}))
	mustOK(t, "delete the reader's policy", err)
	wantCode(t, "Watch after its policy was deleted", ended(t, "Watch", wEnd), api.CodePermissionDenied)

	kaEnd := drainUntilError(func() error { _, err := ka.Receive(); return err })
	_, err = ops.auth.DeletePolicy(ctx, req(&pb.DeletePolicyRequest{Name: "w"}))
	mustOK(t, "delete the worker's policy", err)
	wantCode(t, "KeepAliveStream after its policy was deleted", ended(t, "KeepAliveStream", kaEnd), api.CodePermissionDenied)

	releaseUngranted(t, admin, held, "the worker lost lock on it")
}
