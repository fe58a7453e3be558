package server_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/internal/servertest"
)

// TestForwardedRequestClusterID: a request forwarded by a node of another
// cluster is refused with permission-denied and changes nothing; one from
// this cluster is served.
func TestForwardedRequestClusterID(t *testing.T) {
	c := servertest.Start(t, servertest.Options{})
	own := c.Server().Node().ClusterID()
	other := strings.Repeat("ab", 16)

	before := c.State()
	r := req(&pb.CreateSessionRequest{TtlMs: 5000, Owner: "forked"})
	r.Header().Set("Leasehold-Forwarded-By", "n9")
	r.Header().Set("Leasehold-Cluster-Id", other)
	_, err := c.Client.CreateSession(ctxT(t), r)
	wantCode(t, "CreateSession forwarded from another cluster", err, api.CodePermissionDenied)
	if err != nil && !strings.Contains(err.Error(), other) {
		t.Errorf("the refusal %q does not name the foreign cluster", err)
	}
	if !bytes.Equal(before, c.State()) {
		t.Fatal("the refused request changed the state")
	}

	// A streaming call is checked too.
	wr := req(&pb.WatchRequest{})
	wr.Header().Set("Leasehold-Cluster-Id", other)
	stream, err := c.Client.Watch(ctxT(t), wr)
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
		_ = stream.Close()
	}
	wantCode(t, "Watch from another cluster", err, api.CodePermissionDenied)

	r = req(&pb.CreateSessionRequest{TtlMs: 5000, Owner: "ours"})
	r.Header().Set("Leasehold-Forwarded-By", "n2")
	r.Header().Set("Leasehold-Cluster-Id", own)
	_, err = c.Client.CreateSession(ctxT(t), r)
	mustOK(t, "CreateSession forwarded within the cluster", err)
}
