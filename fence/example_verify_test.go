package fence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/sequencer"
)

// Verifying mode: a forged sequencer with a huge token is refused before it reaches the guard,
// so the honest holder's write still lands.
func ExampleSequencers() {
	ctx := context.Background()
	key, _ := sequencer.GenerateKey(nil, "k1", time.Now())
	cluster, _ := sequencer.NewSigner("cluster-7", key)
	verifier, _ := sequencer.NewVerifier(cluster.KeySet()) // the pinned key set

	seqs := fence.NewSequencers(verifier, fence.LockMap(map[string]string{"report:417": "report:417:rebuild"}, nil))
	guard := seqs.Guard(fence.NewMemory())

	forgerKey, _ := sequencer.GenerateKey(nil, "k1", time.Now())
	forger, _ := sequencer.NewSigner("cluster-7", forgerKey)
	forged, _ := forger.SignString(sequencer.Sequencer{Name: "report:417:rebuild", Token: 1<<64 - 1})
	err := guard.Write(ctx, "report:417", forged, []byte("forged"))
	fmt.Println(errors.Is(err, sequencer.ErrBadSignature))

	honest, _ := cluster.SignString(sequencer.Sequencer{Name: "report:417:rebuild", Token: 18})
	fmt.Println(guard.Write(ctx, "report:417", honest, []byte("v18")))
	tok, val, _ := guard.Last(ctx, "report:417")
	fmt.Println(tok, string(val))
	// Output:
	// true
	// <nil>
	// 18 v18
}
