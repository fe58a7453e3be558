package server

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasehold/leasehold/api"
)

// A queued Acquire waits for the next Release of its lock and goes when it
// is proposed; without one it goes after maxRide; it ends with its caller
// or the server's drain; and no name is kept once nobody waits on it.
func TestRideWithRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &Server{drain: make(chan struct{})}
		type outcome struct {
			err   error
			after time.Duration
		}
		start := func(ctx context.Context, name string) <-chan outcome {
			done := make(chan outcome, 1)
			t0 := time.Now()
			go func() {
				err := s.ride(ctx, name)
				done <- outcome{err, time.Since(t0)}
			}()
			return done
		}
		ctx := context.Background()

		a, b, other := start(ctx, "n"), start(ctx, "n"), start(ctx, "m")
		time.Sleep(maxRide / 2)
		synctest.Wait()
		select {
		case o := <-a:
			t.Fatalf("went after %v with no release (%v)", o.after, o.err)
		default:
		}
		s.releasing("n")
		for _, ch := range []<-chan outcome{a, b} {
			if o := <-ch; o.err != nil || o.after != maxRide/2 {
				t.Fatalf("after the release: %v at %v, want nil at once (%v)", o.err, o.after, maxRide/2)
			}
		}
		if o := <-other; o.err != nil || o.after != maxRide {
			t.Fatalf("no release of its lock: %v after %v, want nil after maxRide", o.err, o.after)
		}

		cctx, cancel := context.WithCancel(ctx)
		c := start(cctx, "n")
		synctest.Wait()
		cancel()
		if o := <-c; o.err == nil {
			t.Fatal("a ride whose caller gave up returned nil")
		}
		d := start(ctx, "n")
		synctest.Wait()
		close(s.drain)
		if o := <-d; api.FromError(o.err).Code != api.CodeUnavailable {
			t.Fatalf("a ride when the server drains: %v, want unavailable", o.err)
		}
		if n := len(s.rides.m); n != 0 {
			t.Fatalf("%d names kept with nobody waiting", n)
		}
	})
}
