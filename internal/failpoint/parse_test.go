package failpoint

import "testing"

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		p    Point
		at   int64
		role string
	}{
		{"fsm-apply-after:37", FSMApplyAfter, 37, ""},
		{"log-append-before:1:leader", LogAppendBefore, 1, "leader"},
		{"commit-reply:5:follower", CommitReply, 5, "follower"},
		{"snapshot-persist-after:2", SnapshotPersistAfter, 2, ""},
	} {
		p, at, role, err := Parse(tc.spec)
		if err != nil || p != tc.p || at != tc.at || role != tc.role {
			t.Errorf("Parse(%q) = %v, %d, %q, %v; want %v, %d, %q", tc.spec, p, at, role, err, tc.p, tc.at, tc.role)
		}
	}
	for _, bad := range []string{"", "fsm-apply-after", "fsm-apply-after:0", "fsm-apply-after:-1", "fsm-apply-after:x", "nowhere:3", "commit-reply:3:both", "commit-reply:3:leader:x"} {
		if _, _, _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = nil error, want one", bad)
		}
	}
}

func TestPointNames(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Points() {
		n := p.String()
		if n == "" || n == "unknown" || seen[n] {
			t.Errorf("point %d has name %q", p, n)
		}
		seen[n] = true
	}
	if len(seen) != 7 {
		t.Errorf("%d points, want 7", len(seen))
	}
}
