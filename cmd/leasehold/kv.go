package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/client"
)

func newKVCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kv",
		Short: "The built-in fenced key-value store: writes carry a fencing token",
	}
	var (
		token  uint64
		strict bool
	)
	put := &cobra.Command{
		Use:   "put KEY VALUE --token N [--strict]",
		Short: "Write VALUE iff N >= the key's last accepted token (> with --strict)",
		Long: `Write VALUE under KEY iff the token is not stale: N >= the last token accepted for KEY
(a holder may write many times), or N > it with --strict (one write per grant). A stale token
fails with code stale-token and the value is unchanged. N must be a token the cluster issued.`,
		Example: `  leasehold kv put report:417 v2 --token 2`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if token == 0 {
				return usageErr("--token is required and must be > 0")
			}
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.KVPut(ctx, args[0], []byte(args[1]), token, strict); err != nil {
					return err
				}
				emit(cmd, g, map[string]any{"key": args[0], "token": token, "status": "accepted"}, fmt.Sprintf("accepted %s token %d", args[0], token))
				return nil
			})
		},
	}
	put.Flags().Uint64Var(&token, "token", 0, "fencing token of the writer's holding")
	put.Flags().BoolVar(&strict, "strict", false, "accept only a token greater than the last accepted")
	var stale bool
	get := &cobra.Command{
		Use:   "get KEY",
		Short: "Read KEY's value and the token that wrote it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				opts := readOpts(stale)
				v, tok, err := c.KVGet(ctx, args[0], opts...)
				if err != nil {
					return err
				}
				emit(cmd, g, map[string]any{"key": args[0], "value": string(v), "token": tok}, fmt.Sprintf("%s\ttoken %d", v, tok))
				return nil
			})
		},
	}
	staleFlag(get, &stale)
	var (
		delToken  uint64
		delStrict bool
	)
	del := &cobra.Command{
		Use:   "delete KEY --token N [--strict]",
		Short: "Delete KEY's value iff N >= the key's last accepted token (> with --strict)",
		Long: `Delete the value under KEY by the fencing rule of put: N >= the last token accepted for KEY,
or N > it with --strict. The key keeps its fence as a token-only tombstone, so a later write
with an older token still fails with stale-token; a write with N or newer brings the key back.
Tombstones count toward the key limit and the state quota. A key never written fails with
not-found.`,
		Example: `  leasehold kv delete report:417 --token 3`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if delToken == 0 {
				return usageErr("--token is required and must be > 0")
			}
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.KVDelete(ctx, args[0], delToken, delStrict); err != nil {
					return err
				}
				emit(cmd, g, map[string]any{"key": args[0], "token": delToken, "status": "deleted"}, fmt.Sprintf("deleted %s token %d", args[0], delToken))
				return nil
			})
		},
	}
	del.Flags().Uint64Var(&delToken, "token", 0, "fencing token of the deleter's holding")
	del.Flags().BoolVar(&delStrict, "strict", false, "accept only a token greater than the last accepted")
	cmd.AddCommand(put, get, del)
	return cmd
}
