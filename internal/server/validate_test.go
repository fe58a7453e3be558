package server_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/harness/servertest"
	"github.com/leasehold/leasehold/internal/validate"
)

// fixture is a server with one session holding one lock and one KV entry.
type fixture struct {
	c     *servertest.Cluster
	lease string // holds "held"
	token uint64 // its token; also the KV entry's
}

func newFixture(t *testing.T, opts servertest.Options) *fixture {
	c, _ := startManual(t, opts)
	s := newSession(t, c.Client, 60_000, "holder")
	h := acquire(t, c.Client, "held", s.GetLeaseId())
	_, err := c.Client.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "k", Value: []byte("v"), Token: h.GetToken()}))
	mustOK(t, "KvPut", err)
	return &fixture{c: c, lease: s.GetLeaseId(), token: h.GetToken()}
}

// view is the state as the API shows it, plus the state machine's bytes.
type view struct {
	list  *pb.ListResponse
	held  *pb.LockInfo
	kv    *pb.KvGetResponse
	state []byte
}

func (f *fixture) view(t *testing.T) view {
	t.Helper()
	list, err := f.c.Client.List(ctxT(t), req(&pb.ListRequest{}))
	mustOK(t, "List", err)
	kv, err := f.c.Client.KvGet(ctxT(t), req(&pb.KvGetRequest{Key: "k"}))
	mustOK(t, "KvGet", err)
	return view{list: list.Msg, held: status(t, f.c.Client, "held"), kv: kv.Msg, state: f.c.State()}
}

func (v view) equal(w view) bool {
	return proto.Equal(v.list, w.list) && proto.Equal(v.held, w.held) && proto.Equal(v.kv, w.kv) && bytes.Equal(v.state, w.state)
}

var (
	hexID    = strings.Repeat("a", 32)
	tooLong  = strings.Repeat("n", validate.MaxNameLen+1)
	longest  = strings.Repeat("n", validate.MaxNameLen)
	bigValue = make([]byte, validate.MaxValueLen+1)
)

// TestBadInput: every request outside a documented limit is refused with
// its code, and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, servertest.Options{})
	type call func(ctx context.Context, c client, f *fixture) error
	cases := []struct {
		name string
		call call
		want api.Code
	}{
		// CreateSession
		{"ttl 0", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 0}))
			return err
		}, api.CodeInvalidArgument},
		{"ttl negative", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: -1000}))
			return err
		}, api.CodeInvalidArgument},
		{"owner too long", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 5000, Owner: strings.Repeat("o", validate.MaxOwnerLen+1)}))
			return err
		}, api.CodeInvalidArgument},
		{"owner unprintable", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 5000, Owner: "worker\x07A"}))
			return err
		}, api.CodeInvalidArgument},
		{"owner newline", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 5000, Owner: "worker\nA"}))
			return err
		}, api.CodeInvalidArgument},

		// Acquire and TryAcquire: names, lease ids, lock-delay, wait.
		{"acquire empty name", acquireReq("", hexID, 0, 0), api.CodeInvalidArgument},
		{"acquire name too long", acquireReq(tooLong, hexID, 0, 0), api.CodeInvalidArgument},
		{"acquire name with space", acquireReq("a b", hexID, 0, 0), api.CodeInvalidArgument},
		{"acquire name with star", acquireReq("a*", hexID, 0, 0), api.CodeInvalidArgument},
		{"acquire name non-ascii", acquireReq("lock-ü", hexID, 0, 0), api.CodeInvalidArgument},
		{"acquire name with NUL", acquireReq("a\x00b", hexID, 0, 0), api.CodeInvalidArgument},
		{"acquire empty lease", acquireReq("n", "", 0, 0), api.CodeInvalidArgument},
		{"acquire lease too short", acquireReq("n", hexID[:31], 0, 0), api.CodeInvalidArgument},
		{"acquire lease too long", acquireReq("n", hexID+"a", 0, 0), api.CodeInvalidArgument},
		{"acquire lease upper case", acquireReq("n", strings.ToUpper(hexID), 0, 0), api.CodeInvalidArgument},
		{"acquire lease not hex", acquireReq("n", strings.Repeat("g", 32), 0, 0), api.CodeInvalidArgument},
		{"acquire lock-delay negative", acquireReq("n", hexID, -1, 0), api.CodeInvalidArgument},
		{"acquire wait negative", acquireReq("n", hexID, 0, -1), api.CodeInvalidArgument},
		{"acquire wait above 1h", acquireReq("n", hexID, 0, 3_600_001), api.CodeInvalidArgument},
		{"acquire unknown lease", acquireReq("n", hexID, 0, 0), api.CodeLeaseExpired},
		{"try empty name", tryReq("", hexID, 0), api.CodeInvalidArgument},
		{"try bad lease", tryReq("n", "lease-1", 0), api.CodeInvalidArgument},
		{"try lock-delay negative", tryReq("n", hexID, -5), api.CodeInvalidArgument},
		{"try unknown lease", tryReq("n", hexID, 0), api.CodeLeaseExpired},
		{"try held by another", func(ctx context.Context, c client, f *fixture) error {
			other, err := c.CreateSession(ctx, req(&pb.CreateSessionRequest{TtlMs: 5000}))
			if err != nil {
				return err
			}
			_, err = c.TryAcquire(ctx, req(&pb.TryAcquireRequest{Name: "held", LeaseId: other.Msg.GetLeaseId()}))
			// Close the extra session so the state compares equal.
			if _, cerr := c.CloseSession(ctx, req(&pb.CloseSessionRequest{LeaseId: other.Msg.GetLeaseId()})); cerr != nil {
				return cerr
			}
			return err
		}, api.CodeLocked},

		// Release
		{"release token 0", releaseReq("held", "", 0), api.CodeInvalidArgument},
		{"release empty name", releaseReq("", "", 1), api.CodeInvalidArgument},
		{"release bad lease", releaseReq("held", "xyz", 1), api.CodeInvalidArgument},
		{"release wrong token", releaseReq("held", "", 999), api.CodeNotHolder},
		{"release unknown lease", releaseReq("held", hexID, 1), api.CodeNotHolder},

		// Sessions
		{"keepalive bad lease", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.KeepAlive(ctx, req(&pb.KeepAliveRequest{LeaseId: "short"}))
			return err
		}, api.CodeInvalidArgument},
		{"keepalive unknown lease", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.KeepAlive(ctx, req(&pb.KeepAliveRequest{LeaseId: hexID}))
			return err
		}, api.CodeLeaseExpired},
		{"close bad lease", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.CloseSession(ctx, req(&pb.CloseSessionRequest{LeaseId: ""}))
			return err
		}, api.CodeInvalidArgument},
		{"close unknown lease", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.CloseSession(ctx, req(&pb.CloseSessionRequest{LeaseId: hexID}))
			return err
		}, api.CodeLeaseExpired},

		// Fenced KV
		{"kv put empty key", putReq("", []byte("x"), 1), api.CodeInvalidArgument},
		{"kv put key too long", putReq(tooLong, []byte("x"), 1), api.CodeInvalidArgument},
		{"kv put key bad char", putReq("k?", []byte("x"), 1), api.CodeInvalidArgument},
		{"kv put token 0", putReq("k", []byte("x"), 0), api.CodeInvalidArgument},
		{"kv put value too big", putReq("k", bigValue, 1), api.CodeInvalidArgument},
		{"kv put token never issued", putReq("k", []byte("x"), 1_000_000), api.CodeInvalidArgument},
		{"kv put stale", func(ctx context.Context, c client, f *fixture) error {
			_, err := c.KvPut(ctx, req(&pb.KvPutRequest{Key: "k", Value: []byte("x"), Token: f.token, Strict: true}))
			return err
		}, api.CodeStaleToken},
		{"kv get bad key", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.KvGet(ctx, req(&pb.KvGetRequest{Key: "a b"}))
			return err
		}, api.CodeInvalidArgument},
		{"kv get missing", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.KvGet(ctx, req(&pb.KvGetRequest{Key: "missing"}))
			return err
		}, api.CodeNotFound},

		// Reads
		{"status empty name", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.Status(ctx, req(&pb.StatusRequest{}))
			return err
		}, api.CodeInvalidArgument},
		{"list prefix too long", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.List(ctx, req(&pb.ListRequest{Prefix: tooLong}))
			return err
		}, api.CodeInvalidArgument},
		{"list prefix bad char", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.List(ctx, req(&pb.ListRequest{Prefix: "a%"}))
			return err
		}, api.CodeInvalidArgument},
		{"list limit negative", func(ctx context.Context, c client, _ *fixture) error {
			_, err := c.List(ctx, req(&pb.ListRequest{Limit: -1}))
			return err
		}, api.CodeInvalidArgument},
		{"watch prefix too long", func(ctx context.Context, c client, _ *fixture) error {
			st, err := c.Watch(ctx, req(&pb.WatchRequest{Prefix: tooLong}))
			if err != nil {
				return err
			}
			defer st.Close()
			for st.Receive() {
			}
			return st.Err()
		}, api.CodeInvalidArgument},
	}
	for _, proto := range []struct {
		name string
		c    client
	}{{"grpc", f.c.Client}, {"json", f.c.JSON}} {
		for _, tc := range cases {
			t.Run(proto.name+"/"+tc.name, func(t *testing.T) {
				before := f.view(t)
				err := tc.call(ctxT(t), proto.c, f)
				wantCode(t, tc.name, err, tc.want)
				if after := f.view(t); !before.equal(after) {
					t.Fatalf("a refused request changed the state:\nbefore %v %v\nafter  %v %v", before.list, before.kv, after.list, after.kv)
				}
			})
		}
	}
}

func acquireReq(name, lease string, delayMs, waitMs int64) func(context.Context, client, *fixture) error {
	return func(ctx context.Context, c client, _ *fixture) error {
		_, err := c.Acquire(ctx, req(&pb.AcquireRequest{Name: name, LeaseId: lease, LockDelayMs: delayMs, WaitMs: waitMs}))
		return err
	}
}

func tryReq(name, lease string, delayMs int64) func(context.Context, client, *fixture) error {
	return func(ctx context.Context, c client, _ *fixture) error {
		_, err := c.TryAcquire(ctx, req(&pb.TryAcquireRequest{Name: name, LeaseId: lease, LockDelayMs: delayMs}))
		return err
	}
}

// releaseReq releases name; an empty lease means the fixture's holder.
func releaseReq(name, lease string, token uint64) func(context.Context, client, *fixture) error {
	return func(ctx context.Context, c client, f *fixture) error {
		if lease == "" {
			lease = f.lease
		}
		_, err := c.Release(ctx, req(&pb.ReleaseRequest{Name: name, LeaseId: lease, Token: token}))
		return err
	}
}

func putReq(key string, value []byte, token uint64) func(context.Context, client, *fixture) error {
	return func(ctx context.Context, c client, _ *fixture) error {
		_, err := c.KvPut(ctx, req(&pb.KvPutRequest{Key: key, Value: value, Token: token}))
		return err
	}
}

// TestClamps: values at or beyond a limit that the API accepts are granted
// as documented: TTLs below 1 s raised to it, up to 1 h as asked and above
// it refused, lock-delay capped at 60 s, names, owners and values exactly
// at their limit accepted.
func TestClamps(t *testing.T) {
	t.Parallel()
	c, _ := startManual(t, servertest.Options{})
	for _, tc := range []struct{ ask, want int64 }{
		{1, 1000}, {10, 1000}, {999, 1000}, {1000, 1000}, {5000, 5000},
		{3_600_000, 3_600_000},
	} {
		s := newSession(t, c.Client, tc.ask, "")
		if s.GetTtlMs() != tc.want {
			t.Errorf("CreateSession(ttl %d ms) granted %d ms, want %d", tc.ask, s.GetTtlMs(), tc.want)
		}
		ka, err := c.Client.KeepAlive(ctxT(t), req(&pb.KeepAliveRequest{LeaseId: s.GetLeaseId()}))
		mustOK(t, "KeepAlive", err)
		if ka.Msg.GetTtlMs() != tc.want {
			t.Errorf("KeepAlive of a %d ms session reports ttl %d ms", tc.want, ka.Msg.GetTtlMs())
		}
	}

	for _, ttl := range []int64{3_600_001, 7_200_000} {
		_, err := c.Client.CreateSession(ctxT(t), req(&pb.CreateSessionRequest{TtlMs: ttl}))
		if api.CodeOf(err) != api.CodeInvalidArgument {
			t.Errorf("CreateSession(ttl %d ms) = %v, want invalid-argument (never lowered silently)", ttl, err)
		}
	}

	owner := strings.Repeat("ö", validate.MaxOwnerLen/2) // 128 bytes of printable UTF-8
	s := newSession(t, c.Client, 60_000, owner)
	if s.GetOwner() != owner {
		t.Fatalf("owner %q came back as %q", owner, s.GetOwner())
	}
	for _, tc := range []struct {
		name      string
		delay     int64
		wantDelay int64
	}{
		{longest, 0, 0},
		{"aZ09._-:/@=+", 1, 1},
		{"delay:60s", 60_000, 60_000},
		{"delay:120s", 120_000, 60_000},
	} {
		resp, err := c.Client.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: tc.name, LeaseId: s.GetLeaseId(), LockDelayMs: tc.delay}))
		mustOK(t, "Acquire "+tc.name, err)
		if got := resp.Msg.GetHolding().GetLockDelayMs(); got != tc.wantDelay {
			t.Errorf("Acquire(%s, lock_delay %d) holding has lock_delay %d, want %d", tc.name, tc.delay, got, tc.wantDelay)
		}
		if got := status(t, c.Client, tc.name).GetHolder(); got.GetLockDelayMs() != tc.wantDelay || got.GetOwner() != owner {
			t.Errorf("Status(%s) holder %v, want lock_delay %d owner %q", tc.name, got, tc.wantDelay, owner)
		}
		if got := resp.Msg.GetTtlMs(); got != 60_000 {
			t.Errorf("Acquire reports ttl %d, want the session's 60000", got)
		}
	}
	h := status(t, c.Client, longest).GetHolder()
	_, err := c.Client.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: longest, Value: make([]byte, validate.MaxValueLen), Token: h.GetToken()}))
	mustOK(t, "KvPut of a value of exactly MaxValueLen", err)
}

// TestResourceExhausted: the state machine's limits answer
// resource-exhausted and change nothing.
func TestResourceExhausted(t *testing.T) {
	t.Parallel()
	limits := func(mutate func(*fsm.Limits)) servertest.Options {
		l := fsm.DefaultLimits()
		mutate(&l)
		return servertest.Options{Limits: l}
	}
	t.Run("sessions", func(t *testing.T) {
		t.Parallel()
		c, _ := startManual(t, limits(func(l *fsm.Limits) { l.MaxSessions = 2 }))
		newSession(t, c.Client, 5000, "a")
		newSession(t, c.Client, 5000, "b")
		before := c.State()
		_, err := c.Client.CreateSession(ctxT(t), req(&pb.CreateSessionRequest{TtlMs: 5000, Owner: "c"}))
		wantCode(t, "third session", err, api.CodeResourceExhausted)
		if !bytes.Equal(before, c.State()) {
			t.Fatal("a refused CreateSession changed the state")
		}
	})
	t.Run("waiters", func(t *testing.T) {
		t.Parallel()
		c, _ := startManual(t, limits(func(l *fsm.Limits) { l.MaxWaitersPerName = 1 }))
		a := newSession(t, c.Client, 60_000, "a")
		b := newSession(t, c.Client, 60_000, "b")
		d := newSession(t, c.Client, 60_000, "d")
		acquire(t, c.Client, "n", a.GetLeaseId())
		ctx, cancel := context.WithCancel(ctxT(t))
		queued := async(func() error {
			_, err := c.Client.Acquire(ctx, req(&pb.AcquireRequest{Name: "n", LeaseId: b.GetLeaseId()}))
			return err
		})
		waitQueued(t, c.Client, "n", b.GetLeaseId())
		before := c.State()
		_, err := c.Client.Acquire(ctxT(t), req(&pb.AcquireRequest{Name: "n", LeaseId: d.GetLeaseId()}))
		wantCode(t, "second waiter", err, api.CodeResourceExhausted)
		if !bytes.Equal(before, c.State()) {
			t.Fatal("a refused Acquire changed the state")
		}
		cancel()
		<-queued
	})
	t.Run("locks per session", func(t *testing.T) {
		t.Parallel()
		c, _ := startManual(t, limits(func(l *fsm.Limits) { l.MaxLocksPerSession = 1 }))
		a := newSession(t, c.Client, 60_000, "a")
		acquire(t, c.Client, "n1", a.GetLeaseId())
		before := c.State()
		_, err := c.Client.TryAcquire(ctxT(t), req(&pb.TryAcquireRequest{Name: "n2", LeaseId: a.GetLeaseId()}))
		wantCode(t, "second lock", err, api.CodeResourceExhausted)
		if !bytes.Equal(before, c.State()) {
			t.Fatal("a refused TryAcquire changed the state")
		}
	})
	t.Run("kv keys", func(t *testing.T) {
		t.Parallel()
		c, _ := startManual(t, limits(func(l *fsm.Limits) { l.MaxKVKeys = 1 }))
		a := newSession(t, c.Client, 60_000, "a")
		h := acquire(t, c.Client, "n", a.GetLeaseId())
		_, err := c.Client.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "k1", Value: []byte("v"), Token: h.GetToken()}))
		mustOK(t, "first key", err)
		before := c.State()
		_, err = c.Client.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "k2", Value: []byte("v"), Token: h.GetToken()}))
		wantCode(t, "second key", err, api.CodeResourceExhausted)
		if !bytes.Equal(before, c.State()) {
			t.Fatal("a refused KvPut changed the state")
		}
		// Overwriting the one key is still allowed.
		_, err = c.Client.KvPut(ctxT(t), req(&pb.KvPutRequest{Key: "k1", Value: []byte("w"), Token: h.GetToken()}))
		mustOK(t, "overwrite", err)
	})
}
