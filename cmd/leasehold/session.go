package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/client"
)

type sessionJSON struct {
	LeaseID     string   `json:"lease_id"`
	Owner       string   `json:"owner"`
	TTLMs       int64    `json:"ttl_ms"`
	RemainingMs int64    `json:"remaining_ttl_ms"`
	Names       []string `json:"names"`
}

func newSessionCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Create, keep alive, list and close sessions (leases) for use with acquire --session",
	}
	cmd.AddCommand(newSessionCreateCmd(g), newSessionKeepAliveCmd(g), newSessionListCmd(g), newSessionCloseCmd(g))
	return cmd
}

func newSessionCreateCmd(g *globals) *cobra.Command {
	var (
		ttl   time.Duration
		owner string
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a session and print its lease id; it expires after the TTL unless kept alive",
		Example: `  id=$(leasehold session create --ttl 30s --owner worker-A)
  leasehold session keepalive "$id" &
  leasehold acquire report:417 --session "$id"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				s, err := c.NewSession(ctx, client.WithTTL(ttl), client.WithOwner(ownerOr(owner)))
				if err != nil {
					return err
				}
				s.Orphan() // the session outlives the command, until its TTL
				emit(cmd, g, sessionJSON{LeaseID: s.ID(), Owner: s.Owner(), TTLMs: s.TTL().Milliseconds(), RemainingMs: s.TTL().Milliseconds(), Names: []string{}}, s.ID())
				return nil
			})
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 10*time.Second, "session TTL, at most 1h (below 1s is raised to 1s)")
	cmd.Flags().StringVar(&owner, "owner", "", "owner label shown to operators (default: user@host:pid)")
	return cmd
}

func newSessionKeepAliveCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "keepalive ID",
		Short: "Renew a session every TTL/3 until interrupted; exit with lease-expired when it ended",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Close()
			for {
				ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
				ttl, err := c.RenewSession(ctx, args[0])
				cancel()
				if cmd.Context().Err() != nil {
					return nil
				}
				if err != nil {
					return err
				}
				t := time.NewTimer(ttl / 3)
				select {
				case <-cmd.Context().Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
		},
	}
}

func newSessionListCmd(g *globals) *cobra.Command {
	var (
		stale bool
		limit int32
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List live sessions: lease id, owner, TTL, remaining TTL, names held or waited for",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				sessions, truncated, err := c.ListSessions(ctx, append(readOpts(stale), client.ListLimit(limit))...)
				if err != nil {
					return err
				}
				views := make([]sessionJSON, 0, len(sessions))
				var b strings.Builder
				for _, s := range sessions {
					v := sessionJSON{LeaseID: s.GetLeaseId(), Owner: s.GetOwner(), TTLMs: s.GetTtlMs(), RemainingMs: s.GetRemainingMs(), Names: append([]string{}, s.GetNames()...)}
					views = append(views, v)
					rem := "unknown"
					if v.RemainingMs >= 0 {
						rem = (time.Duration(v.RemainingMs) * time.Millisecond).String()
					}
					fmt.Fprintf(&b, "%s  owner %q  ttl %s  remaining %s  names %s\n", v.LeaseID, v.Owner, time.Duration(v.TTLMs)*time.Millisecond, rem, strings.Join(v.Names, ","))
				}
				if truncated {
					b.WriteString("(more sessions exist; raise --limit)\n")
				}
				if len(sessions) == 0 {
					b.WriteString("no sessions\n")
				}
				emit(cmd, g, map[string]any{"sessions": views, "truncated": truncated}, b.String())
				return nil
			})
		},
	}
	staleFlag(cmd, &stale)
	cmd.Flags().Int32Var(&limit, "limit", 0, "at most this many sessions (0 = the server maximum, 1000)")
	return cmd
}

func newSessionCloseCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "close ID",
		Short: "End a session, releasing its locks without lock-delay",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				released, err := c.CloseSessionID(ctx, args[0])
				if err != nil {
					return err
				}
				emit(cmd, g, map[string]any{"lease_id": args[0], "released": append([]string{}, released...)},
					fmt.Sprintf("closed %s; released %d lock(s) %s", args[0], len(released), strings.Join(released, ",")))
				return nil
			})
		},
	}
}
