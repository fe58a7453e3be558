package sequencer_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/sequencer"
)

// The grantor signs a sequencer for each grant; the resource verifies it offline against the
// cluster's pinned key set and the lock it expects, and only then looks at the token.
func Example() {
	key, _ := sequencer.GenerateKey(nil, "k1", time.Now())
	signer, _ := sequencer.NewSigner("cluster-7", key)

	// Grantor side: a grant of lock "report:417:rebuild" with token 42.
	text, _ := signer.SignString(sequencer.Sequencer{
		Name: "report:417:rebuild", Token: 42, LeaseID: "lease-1", IssuedUnixMs: time.Now().UnixMilli(),
	})

	// Resource side: the key set was fetched once and pinned.
	verifier, _ := sequencer.NewVerifier(signer.KeySet())
	q, err := verifier.VerifyString(text, "report:417:rebuild")
	fmt.Println(q.Token, err)

	// The same sequencer presented for another lock is refused.
	_, err = verifier.VerifyString(text, "report:418:rebuild")
	fmt.Println(errors.Is(err, sequencer.ErrWrongLock))
	// Output:
	// 42 <nil>
	// true
}

// A key set file is what a resource pins: the cluster id and the public keys.
func ExampleKeySet() {
	key, _ := sequencer.GenerateKey(nil, "k1", time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	signer, _ := sequencer.NewSigner("cluster-7", key)
	data, _ := json.Marshal(signer.KeySet())

	var pinned sequencer.KeySet
	err := json.Unmarshal(data, &pinned)
	fmt.Println(pinned.ClusterID, pinned.Keys[0].ID, err)
	// Output: cluster-7 k1 <nil>
}

// Rotation: the signer adds a key and signs with it; a verifier that trusts both keys accepts
// sequencers from either until the old one is dropped.
func ExampleSigner_Rotate() {
	k1, _ := sequencer.GenerateKey(nil, "k1", time.Now())
	k2, _ := sequencer.GenerateKey(nil, "k2", time.Now())
	signer, _ := sequencer.NewSigner("cluster-7", k1)
	old, _ := signer.Sign(sequencer.Sequencer{Name: "a", Token: 1})
	_ = signer.Rotate(k2)
	verifier, _ := sequencer.NewVerifier(signer.KeySet())

	_, errOld := verifier.Verify(old, "a")
	fresh, _ := signer.Sign(sequencer.Sequencer{Name: "a", Token: 2})
	q, errNew := verifier.Verify(fresh, "a")
	fmt.Println(errOld, q.KeyID, errNew)
	// Output: <nil> k2 <nil>
}
