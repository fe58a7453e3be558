package main

import (
	"testing"

	"github.com/spf13/cobra"
)

func TestFlagsFromEnv(t *testing.T) {
	t.Setenv("LEASEHOLD_DATA", "/from/env")
	t.Setenv("LEASEHOLD_NODE_ID", "n7")
	t.Setenv("LEASEHOLD_LOG_LEVEL", "debug")
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	var data, node, level string
	cmd.Flags().StringVar(&data, "data", "./leasehold-data", "")
	cmd.Flags().StringVar(&node, "node-id", "n1", "")
	cmd.Flags().StringVar(&level, "log-level", "info", "")
	if err := cmd.ParseFlags([]string{"--node-id", "n2"}); err != nil {
		t.Fatal(err)
	}
	if err := flagsFromEnv(cmd); err != nil {
		t.Fatal(err)
	}
	if data != "/from/env" || node != "n2" || level != "debug" {
		t.Fatalf("data %q node %q level %q: want the env for unset flags and the command line over the env", data, node, level)
	}
}

func TestFlagsFromEnvBadValue(t *testing.T) {
	t.Setenv("LEASEHOLD_TTL", "soon")
	cmd := &cobra.Command{Use: "x"}
	cmd.Flags().Duration("ttl", 0, "")
	if err := flagsFromEnv(cmd); err == nil {
		t.Fatal("a malformed LEASEHOLD_TTL was accepted")
	}
}
