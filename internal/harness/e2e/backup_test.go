package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

// TestClusterBackupRestore: `snapshot save` against a 3-node cluster, with
// followers listed first, is served by the leader; after the cluster went
// on granting and was lost, `snapshot restore` builds a new node whose
// first grant is above every token the lost cluster issued, and the new
// cluster grows again with --join.
func TestClusterBackupRestore(t *testing.T) {
	procs := startCluster(t, 3)
	m := waitMembers(t, procs[0].api, 3)
	var followers, leader []string
	for _, mem := range m.Members {
		if mem.ID == m.LeaderID {
			leader = append(leader, mem.APIAddr)
		} else {
			followers = append(followers, mem.APIAddr)
		}
	}
	eps := strings.Join(append(followers, leader...), ",")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, eps)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx, client.WithTTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // its cluster is gone by then: stop renewing, do not wait long
		cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
		defer ccancel()
		_ = s.Close(cctx)
	}()
	l, err := s.Acquire(ctx, "bk:a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.KVPut(ctx, "bk:k", []byte("v1"), l.Token(), false); err != nil {
		t.Fatal(err)
	}

	file := filepath.Join(t.TempDir(), "cluster.snap")
	var saved struct {
		NodeID string `json:"node_id"`
		Token  uint64 `json:"token"`
	}
	cli(t, &saved, "snapshot", "save", file, "--endpoints", eps)
	if saved.NodeID != m.LeaderID || saved.Token < l.Token() {
		t.Fatalf("snapshot save = %+v; want it from the leader %s at token ≥ %d", saved, m.LeaderID, l.Token())
	}

	var newest uint64
	for i := range 20 {
		li, err := s.Acquire(ctx, fmt.Sprint("bk:later-", i))
		if err != nil {
			t.Fatal(err)
		}
		newest = li.Token()
	}
	if err := c.KVPut(ctx, "bk:k", []byte("v2"), newest, false); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		p.kill() // the cluster is lost
	}

	fresh := newProcs(t, 3)
	t.Cleanup(func() {
		for _, p := range fresh {
			p.kill()
			p.log.Close()
		}
	})
	var restored struct {
		TokenFloor uint64 `json:"token_floor"`
	}
	cli(t, &restored, "snapshot", "restore", file, "--data", fresh[0].dir, "--node-id", fresh[0].id, "--raft-addr", fresh[0].raft)
	if restored.TokenFloor <= newest {
		t.Fatalf("restore set the floor %d; the lost cluster issued up to %d", restored.TokenFloor, newest)
	}
	fresh[0].start(t, "")
	waitHealthy(t, fresh[0].api)
	for _, p := range fresh[1:] {
		p.start(t, "", "--join", fresh[0].api)
	}
	waitMembers(t, fresh[0].api, 3)

	c2, err := client.Dial(ctx, endpoints(fresh))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	v, tok, err := c2.KVGet(ctx, "bk:k")
	if err != nil || string(v) != "v1" || tok != l.Token() {
		t.Fatalf("restored kv bk:k = %q at token %d (%v); want the backup's v1 at %d", v, tok, err, l.Token())
	}
	s2, err := c2.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close(context.Background())
	l2, err := s2.Acquire(ctx, "bk:a")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= newest {
		t.Fatalf("the restored cluster granted token %d; the lost one issued up to %d", l2.Token(), newest)
	}
}
