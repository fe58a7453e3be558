package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/client"
)

type leaderJSON struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	Epoch uint64 `json:"epoch"`
}

func newElectCmd(g *globals) *cobra.Command {
	var (
		rf      runFlags
		observe bool
	)
	cmd := &cobra.Command{
		Use:   "elect NAME VALUE [flags] [-- CMD [ARGS...]]",
		Short: "Campaign to lead NAME, proclaiming VALUE; run CMD while leader",
		Long: `Wait in NAME's queue until elected, with VALUE as the leader's value. The epoch is the
leader's fencing token: greater than every earlier leader's. With CMD, run it while leader
exactly as 'leasehold run' does (LEASEHOLD_TOKEN is the epoch; CMD is stopped before the lease
may be lost, so before another candidate can be elected). Without CMD, print the epoch and lead
until interrupted. With --observe, print the leader of NAME, one line per change (value and
epoch), until interrupted.`,
		Example: `  leasehold elect scheduler node-a:9000 --ttl 10s -- ./scheduler --epoch-from-env
  leasehold elect --observe scheduler`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if observe {
				if len(args) != 1 {
					return usageErr("usage: leasehold elect --observe NAME")
				}
				return observeLeader(cmd, g, args[0])
			}
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(args) < 2 || dash >= 0 && dash != 2 || dash < 0 && len(args) != 2:
				return usageErr("usage: leasehold elect NAME VALUE [flags] [-- CMD [ARGS...]]")
			}
			name, value := args[0], []byte(args[1])
			campaign := func(ctx context.Context, s *client.Session) (*client.Lock, error) {
				lead, err := s.Campaign(ctx, name, value)
				if err != nil {
					return nil, err
				}
				return lead.Lock(), nil
			}
			if dash < 0 {
				return holdUntilInterrupted(cmd, g, sessionOptions(rf.ttl, rf.owner, rf.seq), campaign)
			}
			if len(args) == 2 {
				return usageErr("usage: leasehold elect NAME VALUE [flags] -- CMD [ARGS...]: CMD is missing")
			}
			rf.queues = true // a campaign waits in the queue
			return holdAndRun(cmd, g, name, args[2:], rf, campaign)
		},
	}
	rf.register(cmd)
	cmd.Flags().BoolVar(&observe, "observe", false, "print the leader of NAME at every change instead of campaigning")
	return cmd
}

// observeLeader prints the leader of name, one line per change.
func observeLeader(cmd *cobra.Command, g *globals, name string) error {
	c, err := g.dial(cmd.Context())
	if err != nil {
		return err
	}
	defer c.Close()
	leaders, err := c.Observe(cmd.Context(), name)
	if err != nil {
		return err
	}
	for value, epoch := range leaders {
		emit(cmd, g, leaderJSON{Name: name, Value: string(value), Epoch: epoch}, fmt.Sprintf("%s epoch=%s", value, strconv.FormatUint(epoch, 10)))
	}
	return nil
}
