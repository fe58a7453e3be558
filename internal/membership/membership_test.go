package membership_test

import (
	"bytes"
	"runtime"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/harness/servertest"
)

// TestForwardedRequestClusterID: a request forwarded by a node of another
// cluster is refused with permission-denied and changes nothing; one from
// this cluster is served.
func TestForwardedRequestClusterID(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	own := c.Server().Node().ClusterID()
	other := strings.Repeat("ab", 16)

	before := c.State()
	r := connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 5000, Owner: "forked"})
	r.Header().Set("Leasehold-Forwarded-By", "n9")
	r.Header().Set("Leasehold-Cluster-Id", other)
	_, err := c.Client.CreateSession(servertest.Ctx(t), r)
	servertest.WantCode(t, "CreateSession forwarded from another cluster", err, api.CodePermissionDenied)
	if err != nil && !strings.Contains(err.Error(), other) {
		t.Errorf("the refusal %q does not name the foreign cluster", err)
	}
	if !bytes.Equal(before, c.State()) {
		t.Fatal("the refused request changed the state")
	}

	// A streaming call is checked too.
	wr := connect.NewRequest(&pb.WatchRequest{})
	wr.Header().Set("Leasehold-Cluster-Id", other)
	stream, err := c.Client.Watch(servertest.Ctx(t), wr)
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
		_ = stream.Close()
	}
	servertest.WantCode(t, "Watch from another cluster", err, api.CodePermissionDenied)

	r = connect.NewRequest(&pb.CreateSessionRequest{TtlMs: 5000, Owner: "ours"})
	r.Header().Set("Leasehold-Forwarded-By", "n2")
	r.Header().Set("Leasehold-Cluster-Id", own)
	_, err = c.Client.CreateSession(servertest.Ctx(t), r)
	servertest.MustOK(t, "CreateSession forwarded within the cluster", err)
}

// TestStandaloneNoPromoteLoop: a standalone node (no Raft address) cannot
// add a member, so it runs no loop looking for non-voters to promote: an
// idle node wakes only for what it serves (and raft's lease check).
func TestStandaloneNoPromoteLoop(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	if !c.Server().Node().Standalone() {
		t.Fatal("servertest's node has a Raft address; this test needs a standalone one")
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for g := range strings.SplitSeq(stacks, "\n\n") {
		if strings.Contains(g, "membership.(*Manager).PromoteLoop") {
			t.Fatalf("a standalone node runs the non-voter promotion loop:\n%s", g)
		}
	}
}
