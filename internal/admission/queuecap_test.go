package admission

import (
	"fmt"
	"strings"
	"testing"
)

// TestParkedAcquiresCounts: places are counted per session and per
// principal, refused naming the limit hit, given back once however often
// the release is called, and leave no entries behind.
func TestParkedAcquiresCounts(t *testing.T) {
	q := newParkedAcquires(2, 3)
	var releases []func()
	for i, e := range []struct{ session, principal string }{{"s1", "p"}, {"s1", "p"}, {"s2", "p"}} {
		pl, name, err := q.enter(e.session, e.principal, fmt.Sprint("n", i), uint64(i+1))
		if err != nil {
			t.Fatalf("enter %v: %s %v", e, name, err)
		}
		releases = append(releases, pl.Release)
	}
	if _, name, err := q.enter("s1", "other", "n", 4); err == nil || name != "queued-per-session" {
		t.Fatalf("third of s1: %q %v, want queued-per-session", name, err)
	}
	if _, name, err := q.enter("s3", "p", "n", 5); err == nil || name != "queued-per-principal" {
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
	for i := range 5 {
		if _, name, err := unbounded.enter("s", "p", fmt.Sprint("n", i), uint64(i+1)); err != nil {
			t.Fatalf("no limits: %s %v", name, err)
		}
	}
}

// TestOneWaitPerName: while a request of a session is parked for a name
// (proposed or queued), another wait id of that session for the name is
// refused (O(1), before it is proposed); a retry of the parked one, other
// names and other sessions are admitted; once every request with the
// parked id returned, a new id is admitted again.
func TestOneWaitPerName(t *testing.T) {
	q := newParkedAcquires(0, 0)
	must := func(session, name string, id uint64) *Place {
		t.Helper()
		pl, limit, err := q.enter(session, "p", name, id)
		if err != nil {
			t.Fatalf("%s %s %d: refused (%s): %v", session, name, id, limit, err)
		}
		return pl
	}
	first := must("s", "n", 1)
	retry := must("s", "n", 1)
	if _, limit, err := q.enter("s", "p", "n", 3); err == nil || limit != NoSecondWait || !strings.Contains(err.Message, "wait id 1") {
		t.Fatalf("a second wait id of the session for the name: %q %v, want %s naming wait id 1", limit, err, NoSecondWait)
	}
	must("s", "other", 3).Release()
	must("t", "n", 3).Release()
	granted := must("s", "free", 4) // granted at once: gives its place back
	granted.Waits(false)
	must("s", "free", 6).Release()
	first.Release()
	if _, _, err := q.enter("s", "p", "n", 5); err == nil {
		t.Fatal("admitted while a retry of the parked request is still parked")
	}
	retry.Release()
	retry.Release()
	must("s", "n", 5).Release()
	if len(q.waiting) != 0 || q.parked() != 0 {
		t.Fatalf("left behind: waiting %v, parked %d", q.waiting, q.parked())
	}
}
