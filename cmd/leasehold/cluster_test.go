package main

import (
	"strings"
	"testing"
)

// TestClusterAddStandalone: a node started without --raft-addr cannot
// grow until it is started again with one; cluster add says so with
// invalid-argument and changes nothing.
func TestClusterAddStandalone(t *testing.T) {
	p := startServe(t, t.TempDir())
	e := fails(t, p.cli(t, "cluster", "add", "n2", "127.0.0.1:7521", "127.0.0.1:7421", "-o", "json"), "invalid-argument", 2)
	if !strings.Contains(e.Error.Message, "--raft-addr") {
		t.Errorf("message %q does not say what is missing", e.Error.Message)
	}
	m := ok[struct {
		Members []struct {
			ID string `json:"id"`
		} `json:"members"`
	}](t, p.cli(t, "cluster", "members", "-o", "json"))
	if len(m.Members) != 1 {
		t.Fatalf("members after a refused add: %+v", m.Members)
	}
}
