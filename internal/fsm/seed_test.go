package fsm

import (
	"errors"
	"testing"
)

// TestSeedScenario is DESIGN.md's seed scenario at the state-machine level.
// The manual clock is the unix_ms the leader stamps on each command; the
// Machine never reads a clock, so the only way time acts here is the Expire
// the lessor proposes once lease-1's TTL has passed.
//
//	t=0     worker-A acquire report:417:rebuild ttl=5000ms -> lease-1, token t1
//	t=6000  lease-1 expired (A sent no keepalive; A's process still exists)
//	t=6000  worker-B acquire                                -> lease-2, token t2 > t1
//	t=6100  resource.write(token=t2, v2)                    -> accepted
//	t=6200  worker-A resumes; resource.write(token=t1, v1)  -> stale-token
//	t=6200  worker-A release(lease-1, t1)                   -> not-holder; B still holds
func TestSeedScenario(t *testing.T) {
	const (
		name = "report:417:rebuild"
		key  = "report:417"
	)
	r := newRig(t, DefaultLimits())

	r.must(at(0, create("lease-1", "worker-A")))
	resA := r.must(at(0, acquire(name, "lease-1")))
	if resA.Holding == nil {
		t.Fatal("worker-A was not granted the lock")
	}
	t1 := resA.Holding.GetToken()

	// t=6000: the lessor saw no keepalive for 5000 ms and proposes expiry.
	resExp := r.must(at(6000, expire("lease-1")))
	wantEvents(t, resExp, ev{"EXPIRED", name, "lease-1", t1})
	if ev := resExp.Events[0]; ev.UnixMs != 6000 || ev.Owner != "worker-A" {
		t.Fatalf("expiry event %+v", ev)
	}

	r.must(at(6000, create("lease-2", "worker-B")))
	resB := r.must(at(6000, acquire(name, "lease-2")))
	if resB.Holding == nil {
		t.Fatal("worker-B was not granted the lock")
	}
	t2 := resB.Holding.GetToken()
	if t2 <= t1 {
		t.Fatalf("t2 = %d, not above t1 = %d", t2, t1)
	}

	r.must(at(6100, kvPut(key, "v2", t2)))

	res := r.apply(at(6200, kvPut(key, "v1", t1)))
	var stale *StaleTokenError
	if !errors.Is(res.Err, ErrStaleToken) || !errors.As(res.Err, &stale) || stale.LastToken != t2 {
		t.Fatalf("late write by worker-A: Err = %v, want stale token (last %d)", res.Err, t2)
	}

	res = r.apply(at(6200, release(name, "lease-1", t1)))
	if !errors.Is(res.Err, ErrNotHolder) {
		t.Fatalf("release by worker-A: Err = %v, want ErrNotHolder", res.Err)
	}
	wantHolder(t, r, name, "lease-2", t2)
	if owner := r.m.Lock(name).Owner; owner != "worker-B" {
		t.Fatalf("owner %q, want worker-B", owner)
	}
	wantKV(t, r, key, "v2", t2)

	// Contrast: the same writes to a resource that does not check tokens.
	// The paused holder's late write lands last and wins.
	unfenced := map[string]string{}
	unfenced[key] = "v2" // t=6100, worker-B
	unfenced[key] = "v1" // t=6200, worker-A resumes
	if got := unfenced[key]; got != "v1" {
		t.Fatalf("unfenced value %q, want v1", got)
	}
	if fenced := string(r.m.KV(key).GetValue()); fenced == unfenced[key] {
		t.Fatalf("fenced and unfenced resources agree on %q; the scenario shows nothing", fenced)
	}
}
