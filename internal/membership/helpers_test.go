package membership_test

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/leasehold/leasehold/api"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func req[T any](m *T) *connect.Request[T] { return connect.NewRequest(m) }

// wantCode fails unless err carries the leasehold code want.
func wantCode(t *testing.T, what string, err error, want api.Code) {
	t.Helper()
	if got := api.CodeOf(err); got != want {
		t.Fatalf("%s: error %v (code %q), want code %q", what, err, got, want)
	}
}

func mustOK(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
