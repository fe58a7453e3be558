package fence_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/leasehold/leasehold/fence"
)

// The seed scenario at the resource: worker-B's write with token 2 lands, then paused
// worker-A's write with token 1 is refused and the value stays v2.
func ExampleMemory() {
	ctx := context.Background()
	g := fence.NewMemory(fence.WithMode(fence.Strict))

	fmt.Println(g.Write(ctx, "report:417", 1, []byte("v1"))) // worker-A, before its pause
	fmt.Println(g.Write(ctx, "report:417", 2, []byte("v2"))) // worker-B, after A's lease expired

	err := g.Write(ctx, "report:417", 1, []byte("old-v1")) // worker-A resumes
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Println("rejected: last token", stale.LastToken)
	}
	tok, val, _ := g.Last(ctx, "report:417")
	fmt.Printf("last: token %d value %s\n", tok, val)
	// Output:
	// <nil>
	// <nil>
	// rejected: last token 2
	// last: token 2 value v2
}

// A payment service that checks nothing, fenced in-process: leader B (token 18) charges,
// then the stale leader A (token 17) is refused before the handler runs.
func ExampleMiddleware() {
	charges := 0
	payments := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		fmt.Fprintln(w, "charged")
	})
	admitter := fence.NewAdmitter(fence.NewMemoryTokenStore()) // use a boltfence.Store to survive restarts
	h := fence.Middleware(admitter)(payments)

	for _, token := range []string{"18", "17"} {
		r := httptest.NewRequest(http.MethodPost, "/charge", nil)
		r.Header.Set("Fencing-Key", "payments:stream-1")
		r.Header.Set("Fencing-Token", token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("token %s: %d %s", token, w.Code, w.Body)
	}
	fmt.Println("charges:", charges)
	// Output:
	// token 18: 200 charged
	// token 17: 409 {"error":{"code":"stale-token","message":"fence: stale token 17 for key \"payments:stream-1\": last accepted token is 18","key":"payments:stream-1","token":17,"last_token":18}}
	// charges: 1
}
