package admission

import "testing"

// TestParkedAcquiresCounts: places are counted per session and per
// principal, refused naming the limit hit, given back once however often
// the release is called, and leave no entries behind.
func TestParkedAcquiresCounts(t *testing.T) {
	q := newParkedAcquires(2, 3)
	var releases []func()
	for _, e := range []struct{ session, principal string }{{"s1", "p"}, {"s1", "p"}, {"s2", "p"}} {
		release, name, err := q.enter(e.session, e.principal)
		if err != nil {
			t.Fatalf("enter %v: %s %v", e, name, err)
		}
		releases = append(releases, release)
	}
	if _, name, err := q.enter("s1", "other"); err == nil || name != "queued-per-session" {
		t.Fatalf("third of s1: %q %v, want queued-per-session", name, err)
	}
	if _, name, err := q.enter("s3", "p"); err == nil || name != "queued-per-principal" {
		t.Fatalf("fourth of p: %q %v, want queued-per-principal", name, err)
	}
	if got := q.parked(); got != 3 {
		t.Fatalf("parked %d, want 3 (refusals take no place)", got)
	}
	releases[0]()
	releases[0]()
	if got := q.parked(); got != 2 {
		t.Fatalf("parked %d after one release called twice, want 2", got)
	}
	for _, r := range releases[1:] {
		r()
	}
	if q.parked() != 0 || len(q.bySession) != 0 || len(q.byPrincipal) != 0 {
		t.Fatalf("after every release: total %d, sessions %v, principals %v; want none", q.total, q.bySession, q.byPrincipal)
	}
	unbounded := newParkedAcquires(0, 0)
	for range 5 {
		if _, name, err := unbounded.enter("s", "p"); err != nil {
			t.Fatalf("no limits: %s %v", name, err)
		}
	}
}
