package authedge_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/api"
	"github.com/leasehold/leasehold/internal/auth"
	"github.com/leasehold/leasehold/internal/authedge"
)

func newEdge() *authedge.Edge {
	return authedge.New(authedge.Config{
		NodeID:     func() string { return "n1" },
		ClusterID:  func() string { return "c1" },
		LimitsName: func(context.Context) string { return "ip:10.0.0.1" },
		Audit:      slog.New(slog.DiscardHandler),
	})
}

// TestForwardHeaders: a forwarded request names this node, the cluster,
// and the caller: a node, a principal, or an anonymous caller's limits'
// name.
func TestForwardHeaders(t *testing.T) {
	e := newEdge()
	for _, tc := range []struct {
		ctx  context.Context
		want string
	}{
		{context.Background(), "ip:10.0.0.1"},
		{authedge.AsNode(context.Background()), auth.ForwardedNode},
	} {
		h := http.Header{}
		e.SetForwardHeaders(tc.ctx, h)
		if h.Get("Leasehold-Forwarded-By") != "n1" || h.Get("Leasehold-Cluster-Id") != "c1" || h.Get(auth.PrincipalHeader) != tc.want {
			t.Errorf("forward headers %v, want principal %q", h, tc.want)
		}
	}
}

// TestAnonymousPassesWithAuthOff: without credentials the middleware lets
// the request through as the zero Principal, and nothing is decided.
func TestAnonymousPassesWithAuthOff(t *testing.T) {
	e := newEdge()
	var got auth.Principal
	reached := false
	h := e.Authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached, got = true, authedge.Principal(r.Context())
		if err := e.DecideAtLeader(r.Context(), nil); err != nil {
			t.Errorf("DecideAtLeader with auth off: %v", err)
		}
	}))
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil))
	if !reached || got != (auth.Principal{}) || authedge.LimitsPrincipal(httptest.NewRequest("GET", "/x", nil)) != "" {
		t.Fatalf("reached %v principal %+v", reached, got)
	}
}

// TestWriteDenied answers in the protocol the request spoke.
func TestWriteDenied(t *testing.T) {
	err := api.Errorf(api.CodePermissionDenied, `bob may not "lock"`)
	w := httptest.NewRecorder()
	authedge.WriteDenied(w, httptest.NewRequest("POST", "/x", nil), err)
	if w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), `"code":"permission_denied"`) || !strings.Contains(w.Body.String(), `bob may not \"lock\"`) {
		t.Fatalf("JSON refusal: %d %s", w.Code, w.Body)
	}
	r := httptest.NewRequest("POST", "/x", nil)
	r.Header.Set("Content-Type", "application/grpc+proto")
	w = httptest.NewRecorder()
	authedge.WriteDenied(w, r, err)
	if w.Code != http.StatusOK || w.Header().Get("Grpc-Status") != "7" || w.Header().Get(api.CodeHeader) != string(api.CodePermissionDenied) {
		t.Fatalf("gRPC refusal: %d %v", w.Code, w.Header())
	}
}

// TestRevokedOnlyForPermissionDenied: a context that ended for another
// reason is not a revocation.
func TestRevokedOnlyForPermissionDenied(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	if authedge.Revoked(ctx) != nil {
		t.Fatal("Revoked of a live context")
	}
	cancel(api.Errorf(api.CodeUnavailable, "draining"))
	if authedge.Revoked(ctx) != nil {
		t.Fatal("Revoked of a context ended by unavailable")
	}
	ctx, cancel = context.WithCancelCause(context.Background())
	cancel(api.Errorf(api.CodePermissionDenied, "revoked"))
	if err := authedge.Revoked(ctx); api.CodeOf(err) != api.CodePermissionDenied {
		t.Fatalf("Revoked = %v, want permission-denied", err)
	}
}
