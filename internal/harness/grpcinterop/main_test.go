package grpcinterop_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The tests run a real server: raft may drop a future at shutdown, and
	// Node.await leaves its waiter behind.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/leasehold/leasehold/internal/raftnode.(*Node).await.func1"))
}
