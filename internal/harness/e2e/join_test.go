package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"testing"
	"time"

	"github.com/leasehold/leasehold/client"
)

// cli runs the leasehold binary with -o json and decodes its output.
func cli(t *testing.T, v any, args ...string) {
	t.Helper()
	out, err := exec.Command(binary, append(args, "-o", "json")...).Output()
	if err != nil {
		t.Fatalf("leasehold %v: %v\n%s", args, err, out)
	}
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("leasehold %v printed %s: %v", args, out, err)
	}
}

type membersOut struct {
	LeaderID string `json:"leader_id"`
	Members  []struct {
		ID           string `json:"id"`
		Role         string `json:"role"`
		APIAddr      string `json:"api_addr"`
		AppliedIndex uint64 `json:"applied_index"`
		Suffrage     string `json:"suffrage"`
	} `json:"members"`
}

// waitMembers polls `cluster members` until it lists n members, each a
// voter with a known role and API address.
func waitMembers(t *testing.T, endpoint string, n int) membersOut {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var m membersOut
		cli(t, &m, "cluster", "members", "--endpoints", endpoint)
		ok := len(m.Members) == n && m.LeaderID != ""
		for _, mem := range m.Members {
			ok = ok && mem.APIAddr != "" && (mem.Role == "leader" || mem.Role == "follower") && mem.Suffrage == "Voter"
		}
		if ok {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster never showed %d healthy members: %+v", n, m)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A cluster grown one node at a time with --join, shrunk with
// `cluster remove`, and a leadership transfer.
func TestJoinRemoveTransfer(t *testing.T) {
	procs := newProcs(t, 3)
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
			p.log.Close()
		}
	})
	procs[0].start(t, procs[0].id+"="+procs[0].raft)
	waitHealthy(t, procs[0].api)
	for _, p := range procs[1:] {
		p.start(t, "", "--join", procs[0].api)
	}
	m := waitMembers(t, procs[0].api, 3)
	t.Logf("members after joins: %+v", m)

	// The joined node serves writes (forwarded) and its own stale reads.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c3, err := client.Dial(ctx, procs[2].api)
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	s, err := c3.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	l, err := s.Acquire(ctx, "join:a")
	if err != nil {
		t.Fatal(err)
	}
	if err := c3.KVPut(ctx, "join:a", []byte("x"), l.Token(), false); err != nil {
		t.Fatal(err)
	}

	// Hand leadership to n3, then remove n1 through n3.
	var tr struct {
		LeaderID string `json:"leader_id"`
	}
	cli(t, &tr, "cluster", "transfer-leader", "n3", "--endpoints", procs[1].api)
	if tr.LeaderID != "n3" {
		t.Fatalf("transfer-leader n3 reported leader %q", tr.LeaderID)
	}
	var rm membersOut
	cli(t, &rm, "cluster", "remove", "n1", "--endpoints", procs[2].api)
	procs[0].kill()
	m = waitMembers(t, procs[2].api, 2)
	for _, mem := range m.Members {
		if mem.ID == "n1" {
			t.Fatalf("n1 still a member after remove: %+v", m)
		}
	}
	v, tok, err := c3.KVGet(ctx, "join:a")
	if err != nil || string(v) != "x" || tok != l.Token() {
		t.Fatalf("kv after membership changes = %q@%d, %v", v, tok, err)
	}
}

// A single node started without a Raft address grows into a cluster: it
// is stopped and started again on its data dir with --raft-addr, and a
// second node joins it; the lock taken on the single node is still held,
// with its token, and the joined node serves it.
func TestSingleNodeGrowsWithJoin(t *testing.T) {
	procs := newProcs(t, 2)
	n1, n2 := procs[0], procs[1]
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
			p.log.Close()
		}
	})
	single := func() {
		n1.cmd = exec.Command(binary, "serve", "--listen", n1.api, "--data", n1.dir)
		n1.cmd.Stdout, n1.cmd.Stderr = n1.log, n1.log
		if err := n1.cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	single()
	waitHealthy(t, n1.api)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c1, err := client.Dial(ctx, n1.api)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	s, err := c1.NewSession(ctx, client.WithTTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Acquire(ctx, "grow")
	if err != nil {
		t.Fatal(err)
	}

	n1.kill()
	n1.start(t, "") // the same data dir and node id, now with --raft-addr
	waitHealthy(t, n1.api)
	n2.start(t, "", "--join", n1.api)
	m := waitMembers(t, n1.api, 2)
	t.Logf("members after the join: %+v", m)

	c2, err := client.Dial(ctx, n2.api)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	info, err := c2.Status(ctx, "grow")
	if err != nil {
		t.Fatal(err)
	}
	if info.GetHolder().GetToken() != h.Token() {
		t.Fatalf("the lock taken on the single node: token %d through the joined node, want %d", info.GetHolder().GetToken(), h.Token())
	}
}
