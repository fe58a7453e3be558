package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/client"
)

type memberJSON struct {
	ID           string `json:"id"`
	RaftAddr     string `json:"raft_addr"`
	APIAddr      string `json:"api_addr"`
	Role         string `json:"role"`
	Suffrage     string `json:"suffrage"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

func emitMembers(cmd *cobra.Command, g *globals, members []*client.Member, leader string) {
	out := make([]memberJSON, 0, len(members))
	var b strings.Builder
	fmt.Fprintf(&b, "%-8s %-11s %-8s %-22s %-22s %6s %8s %8s\n", "ID", "ROLE", "SUFFRAGE", "RAFT", "API", "TERM", "COMMIT", "APPLIED")
	for _, m := range members {
		out = append(out, memberJSON{ID: m.GetId(), RaftAddr: m.GetRaftAddr(), APIAddr: m.GetApiAddr(), Role: m.GetRole(), Suffrage: m.GetSuffrage(), Term: m.GetTerm(), CommitIndex: m.GetCommitIndex(), AppliedIndex: m.GetAppliedIndex()})
		term, commit, applied := fmt.Sprint(m.GetTerm()), fmt.Sprint(m.GetCommitIndex()), fmt.Sprint(m.GetAppliedIndex())
		if m.GetRole() == "unreachable" { // nothing known: no zeros that look like a fresh node
			term, commit, applied = "-", "-", "-"
		}
		fmt.Fprintf(&b, "%-8s %-11s %-8s %-22s %-22s %6s %8s %8s\n", m.GetId(), m.GetRole(), strings.ToLower(m.GetSuffrage()), m.GetRaftAddr(), m.GetApiAddr(), term, commit, applied)
	}
	emit(cmd, g, map[string]any{"leader_id": leader, "members": out}, b.String())
}

func newClusterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Inspect and change the Raft membership"}
	members := &cobra.Command{
		Use:   "members",
		Short: "List members with role, suffrage (voter/nonvoter), term, commit and applied index",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				ms, leader, err := c.Members(ctx)
				if err != nil {
					return err
				}
				emitMembers(cmd, g, ms, leader)
				return nil
			})
		},
	}
	add := &cobra.Command{
		Use:   "add ID RAFT_ADDR API_ADDR",
		Short: "Add a member as a non-voter; start it with --join; the leader promotes it once caught up",
		Long: `Add a member as a non-voter, then start it with serve --join API_ADDR (it refuses to start
on an empty data dir without --join). The leader promotes it to voter once it has caught up,
and only if the voters then still have a quorum of reachable members. Usually you need not
run this at all: serve --join adds the node itself. A node started without --raft-addr
cannot add members (invalid-argument).`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				ms, err := c.AddMember(ctx, args[0], args[1], args[2])
				if err != nil {
					return err
				}
				emitMembers(cmd, g, ms, "")
				return nil
			})
		},
	}
	remove := &cobra.Command{
		Use:   "remove ID",
		Short: "Remove a member (refused when the voters left would have no quorum of reachable members)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				ms, err := c.RemoveMember(ctx, args[0])
				if err != nil {
					return err
				}
				emitMembers(cmd, g, ms, "")
				return nil
			})
		},
	}
	transfer := &cobra.Command{
		Use:   "transfer-leader [ID]",
		Short: "Hand leadership to voter ID (any voter when omitted)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				leader, err := c.TransferLeader(ctx, id)
				if err != nil {
					return err
				}
				emit(cmd, g, map[string]any{"leader_id": leader}, "leader "+leader)
				return nil
			})
		},
	}
	bump := &cobra.Command{
		Use:   "bump-token MIN",
		Short: "Raise the token counter to at least MIN by hand",
		Long: `Raise the cluster's token counter so that every later grant gets a token above MIN.
` + "`snapshot restore`" + ` and a restart from an existing data dir raise it themselves (see
docs/operating/backup.md); use this when you know a larger token than they assumed, for example
the largest token your resources accepted, plus a margin: fenced resources would otherwise
refuse the new holders' writes, or worse, accept reused tokens. It never lowers the counter.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			min, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil || min == 0 {
				return usageErr("MIN must be a token > 0, got %q", args[0])
			}
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				tok, err := c.BumpToken(ctx, min)
				if err != nil {
					return err
				}
				emit(cmd, g, map[string]any{"token": tok}, fmt.Sprintf("newest token %d; the next grant gets a larger one", tok))
				return nil
			})
		},
	}
	cmd.AddCommand(members, add, remove, transfer, bump)
	return cmd
}
