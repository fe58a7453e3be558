package linz

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op is one completed call from client c over [call, ret].
func op(c int, call, ret int64, in Input, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: c, Call: call, Return: ret, Input: in, Output: out}
}

func TestLockModel(t *testing.T) {
	acq := func(lease string) Input { return Input{Op: OpAcquire, Name: "a", Lease: lease} }
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"grant, release, grant", []porcupine.Operation{
			op(1, 1, 2, acq("l1"), Output{Out: OutOK, Token: 1}),
			op(1, 3, 4, Input{Op: OpRelease, Name: "a", Lease: "l1", Token: 1}, Output{Out: OutOK}),
			op(2, 5, 6, acq("l2"), Output{Out: OutOK, Token: 2}),
		}, porcupine.Ok},
		{"a holder that expired unseen", []porcupine.Operation{
			op(1, 1, 2, acq("l1"), Output{Out: OutOK, Token: 1}),
			op(2, 3, 4, acq("l2"), Output{Out: OutOK, Token: 2}),
		}, porcupine.Ok},
		{"an unknown acquire that took effect", []porcupine.Operation{
			op(1, 1, 1<<62, acq("l1"), Output{Out: OutUnknown}),
			op(2, 3, 4, Input{Op: OpStatus, Name: "a"}, Output{Out: OutOK, Lease: "l1", Token: 1}),
		}, porcupine.Ok},
		{"a token that goes back", []porcupine.Operation{
			op(1, 1, 2, acq("l1"), Output{Out: OutOK, Token: 2}),
			op(2, 3, 4, acq("l2"), Output{Out: OutOK, Token: 1}),
		}, porcupine.Illegal},
		{"an expired session that acts again", []porcupine.Operation{
			op(1, 1, 2, acq("l1"), Output{Out: OutOK, Token: 1}),
			op(2, 3, 4, acq("l2"), Output{Out: OutOK, Token: 2}),
			op(1, 5, 6, acq("l1"), Output{Out: OutOK, Token: 3}),
		}, porcupine.Illegal},
		{"free after a grant nobody released, then held by the same grant", []porcupine.Operation{
			op(1, 1, 2, acq("l1"), Output{Out: OutOK, Token: 1}),
			op(2, 3, 4, Input{Op: OpStatus, Name: "a"}, Output{Out: OutOK}),
			op(2, 5, 6, Input{Op: OpStatus, Name: "a"}, Output{Out: OutOK, Lease: "l1", Token: 1}),
		}, porcupine.Illegal},
		{"a release of a stale token accepted", []porcupine.Operation{
			op(1, 1, 2, acq("l1"), Output{Out: OutOK, Token: 1}),
			op(1, 3, 4, Input{Op: OpRelease, Name: "a", Lease: "l1", Token: 1}, Output{Out: OutOK}),
			op(1, 5, 6, acq("l1"), Output{Out: OutOK, Token: 2}),
			op(1, 7, 8, Input{Op: OpRelease, Name: "a", Lease: "l1", Token: 1}, Output{Out: OutOK}),
		}, porcupine.Illegal},
		{"an unclear acquire withdrawn, seen held in between", []porcupine.Operation{
			op(1, 1, 6, Input{Op: OpAcquire, Name: "a", Lease: "l1", Attempt: 1}, Output{Out: OutUnknown}),
			op(1, 1, 6, Input{Op: OpWithdraw, Name: "a", Lease: "l1", Attempt: 1}, Output{Out: OutOK}),
			op(2, 2, 3, Input{Op: OpStatus, Name: "a"}, Output{Out: OutOK, Lease: "l1", Token: 1}),
			op(2, 7, 8, Input{Op: OpStatus, Name: "a"}, Output{Out: OutOK}),
			op(1, 9, 10, acq("l1"), Output{Out: OutOK, Token: 2}),
		}, porcupine.Ok},
		{"a withdrawn grant still held", []porcupine.Operation{
			op(1, 1, 2, Input{Op: OpAcquire, Name: "a", Lease: "l1", Attempt: 1}, Output{Out: OutUnknown}),
			op(1, 1, 2, Input{Op: OpWithdraw, Name: "a", Lease: "l1", Attempt: 1}, Output{Out: OutOK}),
			op(2, 3, 4, Input{Op: OpStatus, Name: "a"}, Output{Out: OutOK, Lease: "l1", Token: 1}),
		}, porcupine.Illegal},
	} {
		r := Check("P1: "+tc.name, LockModel, tc.ops, 10*time.Second)
		if r.Verdict != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, r.Verdict, tc.want)
		}
		if (r.Violation() != "") != (tc.want == porcupine.Illegal) || r.Undecided() != "" {
			t.Errorf("%s: violation %q, undecided %q", tc.name, r.Violation(), r.Undecided())
		}
	}
}

func TestRegisterModel(t *testing.T) {
	put := func(tok uint64) Input { return Input{Op: OpPut, Name: "k", Token: tok} }
	ok := []porcupine.Operation{
		op(1, 1, 2, put(2), Output{Out: OutOK}),
		op(2, 3, 4, put(1), Output{Out: OutStale}),
		op(2, 5, 6, put(2), Output{Out: OutOK}),
	}
	if r := Check("P4", RegisterModel, ok, 10*time.Second); r.Verdict != porcupine.Ok {
		t.Errorf("a fenced history: %s", r.Verdict)
	}
	bad := []porcupine.Operation{
		op(1, 1, 2, put(2), Output{Out: OutOK}),
		op(2, 3, 4, put(1), Output{Out: OutOK}),
	}
	r := Check("P4", RegisterModel, bad, 10*time.Second)
	if r.Verdict != porcupine.Illegal {
		t.Errorf("a stale put accepted: %s", r.Verdict)
	}
	if err := r.Visualize(t.TempDir() + "/kv.html"); err != nil {
		t.Error(err)
	}
}
