package fence

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Settling.
//
// A handler that forwards a request to another service (the gateway's upstream) can end
// without knowing whether the effect happened: the exchange timed out, the connection broke,
// the caller left. The other service may still be working on it, and will apply it whenever it
// gets there. Were the key's lock released then, a newer token's write could be admitted,
// forwarded and applied first, and the older write land after it.
//
// With WithSettle(d), such a handler calls MarkUnsettled before it returns; the key then stays
// fenced for d after the exchange ended (the gateway's side of the connection closed): every
// request for it is refused with 503 unavailable and Retry-After, and records nothing, until
// the older exchange can no longer reach the resource. d must be at least the longest the
// other service may work on one request (its own request timeout). A process that starts
// knows nothing of the exchanges of the one before it, which may have died in the middle of
// some: it refuses every fenced request for d after Middleware was built.

// unsettledKey is the context key of a request's *unsettled flag.
type unsettledKey struct{}

// unsettled is set by MarkUnsettled.
type unsettled struct {
	mu     sync.Mutex // protects marked
	marked bool
}

// MarkUnsettled tells Middleware (WithSettle) that the exchange of the request whose context
// is ctx ended with an unknown outcome: the resource may still apply it. Outside such a
// request, or without WithSettle, it does nothing.
func MarkUnsettled(ctx context.Context) {
	if u, ok := ctx.Value(unsettledKey{}).(*unsettled); ok {
		u.mu.Lock()
		u.marked = true
		u.mu.Unlock()
	}
}

// settler keeps the keys whose last exchange may still reach the resource.
type settler struct {
	d     time.Duration
	start time.Time // every key is unsettled until start + d
	now   func() time.Time

	mu    sync.Mutex           // protects until
	until map[string]time.Time // key → end of its settle time
}

// maxUnsettled is how many keys' settle times are kept before expired ones are swept.
const maxUnsettled = 1024

// WithSettle makes Middleware keep a key fenced for d after a handler ended its exchange with
// an unknown outcome (MarkUnsettled), and every key fenced for d after Middleware was built:
// requests are refused with 503 unavailable and Retry-After meanwhile, recording nothing. Set d
// to at least the longest the resource may keep working on one request after the handler gave
// up on it.
func WithSettle(d time.Duration) HTTPOption {
	return func(o *httpOptions) {
		o.settle = nil
		if d > 0 {
			o.settle = &settler{d: d, now: time.Now, until: map[string]time.Time{}}
		}
	}
}

// started begins the settle time of a new process.
func (s *settler) started() {
	if s != nil {
		s.start = s.now()
	}
}

// wait returns how long key stays unsettled (0 when it is settled).
func (s *settler) wait(key string) time.Duration {
	if s == nil {
		return 0
	}
	now := s.now()
	end := s.start.Add(s.d)
	s.mu.Lock()
	if t, ok := s.until[key]; ok {
		if !now.Before(t) {
			delete(s.until, key)
		}
		end = later(end, t)
	}
	s.mu.Unlock()
	return max(end.Sub(now), 0)
}

// track returns ctx carrying a flag for MarkUnsettled, and a func to call once the handler
// returned: it unsettles key when the flag was set.
func (s *settler) track(ctx context.Context, key string) (context.Context, func()) {
	if s == nil {
		return ctx, func() {}
	}
	u := &unsettled{}
	return context.WithValue(ctx, unsettledKey{}, u), func() {
		u.mu.Lock()
		marked := u.marked
		u.mu.Unlock()
		if marked {
			s.unsettle(key)
		}
	}
}

func (s *settler) unsettle(key string) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.until) >= maxUnsettled {
		for k, t := range s.until {
			if !now.Before(t) {
				delete(s.until, k)
			}
		}
	}
	s.until[key] = now.Add(s.d)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// refuseUnsettled answers 503 for a request of key, which is unsettled for wait.
func refuseUnsettled(w http.ResponseWriter, key string, wait time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	WriteHTTPError(w, http.StatusServiceUnavailable, HTTPError{
		Code: CodeUnavailable,
		Message: "fence: an earlier request for key " + strconv.Quote(key) + " may still reach the resource; retry in " +
			wait.Round(time.Millisecond).String(),
		Key: key,
	})
}
