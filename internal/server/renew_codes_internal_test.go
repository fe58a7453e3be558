package server

import (
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/lessor"
	"github.com/leasehold/leasehold/internal/raftnode"
)

// TestRenewalRefusalCodes: a renewal is told lease-expired only when the
// session is gone from the applied state of a confirmed leader. An expiry
// whose outcome is not known yet and an unconfirmed leadership are
// retryable (unavailable): the session may live on under a successor.
func TestRenewalRefusalCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want api.Code
	}{
		{lessor.ErrNotFound, api.CodeLeaseExpired},
		{lessor.ErrExpiring, api.CodeUnavailable},
		{fmt.Errorf("%w: %w", lessor.ErrUnconfirmed, raftnode.ErrUnavailable), api.CodeUnavailable},
		{fmt.Errorf("%w: %w", lessor.ErrUnconfirmed, raftnode.ErrShutdown), api.CodeUnavailable},
		{fmt.Errorf("%w: %w", lessor.ErrNotLeader, raftnode.ErrNotLeader), api.CodeNotLeader},
	} {
		if got := api.CodeOf(toAPI(tc.err)); got != tc.want {
			t.Errorf("%v: code %s, want %s", tc.err, got, tc.want)
		}
	}
}
