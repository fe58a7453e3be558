package fsm

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

// TestRandomized applies seeded random commands over a few sessions and
// names to three Machines: a (checked after every step by rig: consistent
// state, ≤1 holder per name, live holders and waiters, monotonic tokens,
// refusals change nothing), b (fed the same commands from the start) and c
// (replaced every restoreEvery steps by a Snapshot → Restore copy of a, then
// fed the same commands). All three must return the same Results and have
// byte-identical snapshots. A small reference model predicts the outcome of
// fenced writes and of releases and acquires whose outcome is certain.
func TestRandomized(t *testing.T) {
	const (
		seeds        = 20
		steps        = 2000
		restoreEvery = 100
	)
	limits := Limits{MaxSessions: 6, MaxLocksPerSession: 3, MaxWaitersPerName: 3, MaxKVKeys: 3}
	for seed := int64(1); seed <= seeds; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			t.Parallel()
			g := &gen{rnd: rand.New(rand.NewSource(seed))}
			a := newRig(t, limits)
			b, c := New(limits), New(limits)
			kvLast := map[string]uint64{}      // the model of the fenced KV
			withdrawn := map[string][]uint64{} // the model of each session's withdrawn wait ids
			for step := 1; step <= steps; step++ {
				cmd := g.next(a.m)
				want := predict(a.m, kvLast, withdrawn, cmd)
				noteWithdrawn(a.m, withdrawn, cmd)
				res := a.apply(cmd)
				g.count(res)
				for _, name := range genNames {
					if len(a.m.Lock(name).Holders) > 1 {
						g.shared++
					}
				}
				if err := want(res); err != nil {
					t.Fatalf("step %d: %v: %v", step, cmd, err)
				}
				if kv := res.KV; kv != nil {
					kvLast[kv.GetKey()] = kv.GetToken()
				}
				for _, other := range []*Machine{b, c} {
					if err := sameResult(res, other.Apply(a.index, cmd)); err != nil {
						t.Fatalf("step %d: %v: machines disagree: %v", step, cmd, err)
					}
				}
				if step%restoreEvery == 0 {
					sa := a.snapshot()
					for i, other := range []*Machine{b, c} {
						so, err := other.Snapshot()
						if err != nil || !bytes.Equal(sa, so) {
							t.Fatalf("step %d: machine %d's snapshot differs (err %v)", step, i+1, err)
						}
					}
					c = roundTrip(t, a.m)
				}
			}
			// A seed with many grants must reach the modes' several holders.
			if g.grants == 0 || g.refusals == 0 || g.grants > 100 && g.shared == 0 {
				t.Fatalf("generator too tame: %d grants, %d refusals, %d steps with a name held by several", g.grants, g.refusals, g.shared)
			}
		})
	}
}

// gen generates random commands, reading the state only to make commands
// that hit (a right token, a queued wait_id) often enough.
type gen struct {
	rnd      *rand.Rand
	leases   []string // every lease id ever proposed
	waitSeq  uint64   // the last wait id handed out
	now      int64
	grants   int
	refusals int
	shared   int // steps after which a name had several holders
}

var (
	genNames = []string{"n0", "n1", "n2", "n3"}
	genKeys  = []string{"k0", "k1", "k2", "k3"}
)

func (g *gen) lease() string {
	if len(g.leases) == 0 || g.rnd.Intn(20) == 0 {
		return "ghost"
	}
	// Mostly recent sessions, so that most of them are live.
	n := min(len(g.leases), 8)
	return g.leases[len(g.leases)-1-g.rnd.Intn(n)]
}

func (g *gen) count(res Result) {
	if res.Err != nil {
		g.refusals++
	}
	for _, e := range res.Events {
		if e.Token != 0 && e.Type.String() == "EVENT_TYPE_ACQUIRED" {
			g.grants++
		}
	}
}

func (g *gen) pick(s []string) string { return s[g.rnd.Intn(len(s))] }

func (g *gen) next(m *Machine) *fsmpb.Command {
	g.now += int64(g.rnd.Intn(50))
	var cmd *fsmpb.Command
	switch n := g.rnd.Intn(100); {
	case n < 12:
		id := fmt.Sprint("s", len(g.leases))
		if len(g.leases) > 0 && g.rnd.Intn(10) == 0 {
			id = g.lease() // a reused id: refused while live
		}
		g.leases = append(g.leases, id)
		cmd = create(id, "owner-"+id)
	case n < 17:
		cmd = closeSession(g.lease())
	case n < 22:
		cmd = expire(g.lease())
	case n < 52:
		var opts []acqOpt
		if g.rnd.Intn(3) == 0 {
			opts = append(opts, try())
		}
		if g.rnd.Intn(5) < 2 {
			opts = append(opts, delay(int64(1+g.rnd.Intn(1000))))
		}
		opts = append(opts, waitID(g.waitID()))
		name := g.pick(genNames)
		opts = append(opts, g.mode(name)...)
		cmd = acquire(name, g.lease(), opts...)
	case n < 60:
		name, lease, id := g.pick(genNames), g.lease(), g.recentWaitID()
		if ws := m.Lock(name).Waiters; len(ws) > 0 && g.rnd.Intn(2) == 0 {
			w := ws[g.rnd.Intn(len(ws))]
			lease, id = w.GetLeaseId(), w.GetWaitId()
		} else if h := g.holder(m, name); h != nil && g.rnd.Intn(2) == 0 {
			lease, id = h.GetLeaseId(), h.GetWaitId()
		}
		cmd = cancelWait(name, lease, id)
	case n < 78:
		name, lease, token := g.pick(genNames), g.lease(), uint64(g.rnd.Int63n(int64(m.Token())+2))
		if h := g.holder(m, name); h != nil && g.rnd.Intn(10) < 7 {
			switch g.rnd.Intn(4) {
			case 0:
				token = h.GetToken() // maybe the wrong lease
			case 1:
				lease = h.GetLeaseId() // maybe the wrong token
			default:
				lease, token = h.GetLeaseId(), h.GetToken()
			}
		}
		cmd = release(name, lease, token)
		if g.rnd.Intn(4) == 0 { // the same check of (name, lease, token)
			cmd = proclaim(name, lease, token, fmt.Sprint("p", g.now))
		}
	case n < 85:
		name, token := g.pick(genNames), uint64(g.rnd.Int63n(int64(m.Token())+2))
		if li := m.Lock(name); li.Delayed && g.rnd.Intn(10) < 7 {
			token = li.DelayToken
		}
		cmd = endDelay(name, token)
	case n < 97:
		token := uint64(g.rnd.Int63n(int64(m.Token()) + 2))
		if h := m.Lock(g.pick(genNames)).Holder; h != nil && g.rnd.Intn(2) == 0 {
			token = h.GetToken()
		}
		v := fmt.Sprint("v", g.now)
		if g.rnd.Intn(3) == 0 {
			cmd = kvPutStrict(g.pick(genKeys), v, token)
		} else {
			cmd = kvPut(g.pick(genKeys), v, token)
		}
	case n < 99:
		cmd = bump(uint64(max(0, int64(m.Token())+int64(g.rnd.Intn(7))-3)))
	default:
		cmd = registerNode(g.pick([]string{"a", "b"}), fmt.Sprint("10.0.0.1:", g.now))
	}
	cmd.UnixMs = g.now
	return cmd
}

// waitID is an Acquire's wait id as clients send them: mostly a new one,
// sometimes none, sometimes a recent one again (a retry, or a request
// delayed past its withdrawal).
func (g *gen) waitID() uint64 {
	switch n := g.rnd.Intn(10); {
	case n == 0:
		return 0
	case n < 4:
		return g.recentWaitID()
	}
	g.waitSeq++
	return g.waitSeq
}

func (g *gen) recentWaitID() uint64 {
	return uint64(max(0, int64(g.waitSeq)-int64(g.rnd.Intn(4))))
}

// noteWithdrawn updates the model of withdrawn wait ids with cmd, before
// it is applied to m: a session's withdrawals, its last maxWithdrawn
// remembered, forgotten when a new session takes its id.
func noteWithdrawn(m *Machine, withdrawn map[string][]uint64, cmd *fsmpb.Command) {
	switch op := cmd.GetOp().(type) {
	case *fsmpb.Command_CreateSession:
		if m.sessions[op.CreateSession.GetLeaseId()] == nil {
			delete(withdrawn, op.CreateSession.GetLeaseId())
		}
	case *fsmpb.Command_Withdraw:
		c := op.Withdraw
		ids := withdrawn[c.GetLeaseId()]
		if m.sessions[c.GetLeaseId()] == nil || c.GetWaitId() == 0 || slices.Contains(ids, c.GetWaitId()) {
			return
		}
		ids = append(ids, c.GetWaitId())
		withdrawn[c.GetLeaseId()] = ids[max(0, len(ids)-maxWithdrawn):]
	}
}

// mode returns the acquire options of name's recipe: n0 and n1 are locks,
// n2 a read/write lock, n3 a semaphore of 2 permits; now and then a request
// carries the wrong permits or an invalid combination.
func (g *gen) mode(name string) []acqOpt {
	switch {
	case g.rnd.Intn(30) == 0:
		return []acqOpt{shared(), permits(2)} // invalid
	case name == "n2" && g.rnd.Intn(2) == 0:
		return []acqOpt{shared()}
	case name == "n3" && g.rnd.Intn(15) == 0:
		return []acqOpt{permits(3)}
	case name == "n3":
		return []acqOpt{permits(2), withValue(fmt.Sprint("v", g.rnd.Intn(2)))}
	}
	return nil
}

// holder returns one of name's holdings at random, or nil.
func (g *gen) holder(m *Machine, name string) *fsmpb.Holding {
	hs := m.Lock(name).Holders
	if len(hs) == 0 {
		return nil
	}
	return hs[g.rnd.Intn(len(hs))]
}

// predict returns a check of the outcome of cmd on m where it is certain,
// computed before the Apply from a model independent of fsm's code paths.
func predict(m *Machine, kvLast map[string]uint64, withdrawn map[string][]uint64, cmd *fsmpb.Command) func(Result) error {
	switch op := cmd.GetOp().(type) {
	case *fsmpb.Command_KvPut:
		c := op.KvPut
		last, exists := kvLast[c.GetKey()]
		var want error
		switch {
		case c.GetToken() == 0 || c.GetToken() > m.Token():
			want = ErrInvalidToken
		case !exists && len(kvLast) >= m.limits.MaxKVKeys:
			want = ErrTooManyKeys
		case exists && (c.GetToken() < last || c.GetStrict() && c.GetToken() == last):
			want = ErrStaleToken
		}
		return func(res Result) error {
			if !isErr(res.Err, want) {
				return fmt.Errorf("fenced write: Err %v, want %v", res.Err, want)
			}
			if want == nil && (res.KV == nil || !bytes.Equal(res.KV.GetValue(), c.GetValue())) {
				return fmt.Errorf("accepted write stored %v", res.KV)
			}
			return nil
		}
	case *fsmpb.Command_Release:
		c := op.Release
		owns := slices.ContainsFunc(m.Lock(c.GetName()).Holders, func(h *fsmpb.Holding) bool {
			return h.GetLeaseId() == c.GetLeaseId() && h.GetToken() == c.GetToken()
		})
		return func(res Result) error {
			if owns != (res.Err == nil) || (!owns && !errors.Is(res.Err, ErrNotHolder)) {
				return fmt.Errorf("release by owner=%v: Err %v", owns, res.Err)
			}
			return nil
		}
	case *fsmpb.Command_Acquire:
		c := op.Acquire
		if s := m.sessions[c.GetLeaseId()]; s != nil && c.GetWaitId() != 0 && slices.Contains(withdrawn[c.GetLeaseId()], c.GetWaitId()) {
			return func(res Result) error {
				if !errors.Is(res.Err, ErrWithdrawn) {
					return fmt.Errorf("acquire with a withdrawn wait id: Err %v, Holding %v", res.Err, res.Holding)
				}
				return nil
			}
		}
		li := m.Lock(c.GetName())
		free := len(li.Holders) == 0 && !li.Delayed && len(li.Waiters) == 0
		s := m.sessions[c.GetLeaseId()]
		room := s != nil && len(s.locks) < m.limits.MaxLocksPerSession
		var heldToken uint64
		held, same := false, false
		for _, h := range li.Holders {
			if h.GetLeaseId() == c.GetLeaseId() {
				held, heldToken = true, h.GetToken()
				same = h.GetMode() == c.GetMode() && bytes.Equal(h.GetValue(), c.GetValue())
			}
		}
		n := max(c.GetPermits(), 1)
		isShared := c.GetMode() == fsmpb.Mode_MODE_SHARED
		invalid := isShared && n > 1 || !free && (len(li.Holders) > 0 || len(li.Waiters) > 0 || li.Delayed) && n != li.Permits
		// Room beside the holders, by the table of modes.go.
		fits := len(li.Waiters) == 0 && !li.Delayed && !invalid
		for _, h := range li.Holders {
			hShared := h.GetMode() == fsmpb.Mode_MODE_SHARED
			fits = fits && hShared == isShared && (isShared || n > 1)
		}
		fits = fits && (isShared || len(li.Holders) < int(n))
		next := m.Token() + 1
		return func(res Result) error {
			switch {
			case s == nil && !errors.Is(res.Err, ErrSessionNotFound):
				return fmt.Errorf("acquire by a dead session: Err %v", res.Err)
			case s != nil && invalid && !errors.Is(res.Err, ErrInvalidMode):
				return fmt.Errorf("acquire with mode %v and %d permits of a name with %d: Err %v", c.GetMode(), n, li.Permits, res.Err)
			case s != nil && !held && fits && room && (res.Err != nil || res.Queued || res.Holding.GetToken() != next):
				return fmt.Errorf("acquire with room beside %d holders: Err %v, Holding %v, want token %d", len(li.Holders), res.Err, res.Holding, next)
			case held && !invalid && same && (res.Err != nil || res.Holding.GetToken() != heldToken):
				return fmt.Errorf("re-acquire by the holder: Err %v, Holding %v, want token %d", res.Err, res.Holding, heldToken)
			case held && !invalid && !same && (!errors.Is(res.Err, ErrInvalidMode) || res.Holding != nil):
				return fmt.Errorf("re-acquire by the holder in another mode or with another value: Err %v, Holding %v", res.Err, res.Holding)
			case free && room && !invalid && (res.Err != nil || res.Queued || res.Holding.GetToken() != next):
				return fmt.Errorf("acquire of a free name: Err %v, Holding %v, want token %d", res.Err, res.Holding, next)
			case !fits && !held && res.Holding != nil:
				return fmt.Errorf("acquire without room granted %v", res.Holding)
			}
			return nil
		}
	}
	return func(Result) error { return nil }
}

// sameResult compares two Results of the same command on two Machines.
func sameResult(a, b Result) error {
	switch {
	case errString(a.Err) != errString(b.Err):
		return fmt.Errorf("Err %v vs %v", a.Err, b.Err)
	case !proto.Equal(a.Session, b.Session), !proto.Equal(a.Holding, b.Holding), !proto.Equal(a.KV, b.KV):
		return fmt.Errorf("Session/Holding/KV %v %v %v vs %v %v %v", a.Session, a.Holding, a.KV, b.Session, b.Holding, b.KV)
	case a.Queued != b.Queued,
		!slices.Equal(a.Released, b.Released),
		!slices.Equal(a.EndedSessions, b.EndedSessions),
		!slices.Equal(a.LockDelays, b.LockDelays),
		!slices.Equal(a.Events, b.Events):
		return fmt.Errorf("%+v vs %+v", a, b)
	}
	return nil
}
