package fsm

import (
	"testing"

	"github.com/leasehold/leasehold/internal/fsm/fsmpb"
)

func cp(lease string, remainingMs int64, gen uint64, cleared bool) *fsmpb.SessionCheckpoint {
	return &fsmpb.SessionCheckpoint{LeaseId: lease, RemainingMs: remainingMs, Generation: gen, Cleared: cleared}
}

func checkpointCmd(cps ...*fsmpb.SessionCheckpoint) *fsmpb.Command {
	return &fsmpb.Command{Op: &fsmpb.Command_Checkpoint{Checkpoint: &fsmpb.Checkpoint{Sessions: cps}}}
}

// TestCheckpoint: a checkpoint records the remaining time of a live
// session, a clear with a newer generation removes it, a checkpoint older
// than the last clear is ignored, unknown sessions are skipped, and the
// record survives a snapshot.
func TestCheckpoint(t *testing.T) {
	type want struct {
		checkpointed bool
		remainingMs  int64
		gen          uint64
	}
	for _, tc := range []struct {
		name string
		cmds []*fsmpb.Command
		want want
	}{
		{"recorded", []*fsmpb.Command{checkpointCmd(cp("a", 1200, 0, false), cp("gone", 5, 0, false))}, want{true, 1200, 0}},
		{"newer record wins", []*fsmpb.Command{checkpointCmd(cp("a", 1200, 0, false)), checkpointCmd(cp("a", 700, 0, false))}, want{true, 700, 0}},
		{"cleared", []*fsmpb.Command{checkpointCmd(cp("a", 1200, 0, false)), checkpointCmd(cp("a", 0, 1, true))}, want{false, 0, 1}},
		{"stale record after a clear", []*fsmpb.Command{checkpointCmd(cp("a", 0, 1, true)), checkpointCmd(cp("a", 300, 0, false))}, want{false, 0, 1}},
		{"record of the clear's generation", []*fsmpb.Command{checkpointCmd(cp("a", 0, 1, true)), checkpointCmd(cp("a", 300, 1, false))}, want{true, 300, 1}},
		{"negative remaining is zero", []*fsmpb.Command{checkpointCmd(cp("a", -5, 0, false))}, want{true, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New(DefaultLimits())
			m.Apply(1, create("a", "worker-a"))
			before := m.Session("a")
			for i, c := range tc.cmds {
				if res := m.Apply(uint64(i+2), c); res.Err != nil {
					t.Fatalf("apply %d: %v", i, res.Err)
				}
			}
			if before.GetCheckpointed() || before.GetCheckpointGeneration() != 0 {
				t.Fatal("a checkpoint changed a Session message handed out earlier")
			}
			check := func(m *Machine, where string) {
				s := m.Session("a")
				got := want{s.GetCheckpointed(), s.GetCheckpointRemainingMs(), s.GetCheckpointGeneration()}
				if got != tc.want {
					t.Fatalf("%s: session a = %+v, want %+v", where, got, tc.want)
				}
				if m.Session("gone") != nil {
					t.Fatalf("%s: a checkpoint created a session", where)
				}
			}
			check(m, "applied")
			snap, err := m.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			r := New(DefaultLimits())
			if err := r.Restore(snap); err != nil {
				t.Fatal(err)
			}
			check(r, "restored")
		})
	}
}
