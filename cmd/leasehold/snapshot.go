package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/backup"
	"github.com/leasehold/leasehold/internal/fsm"
	"github.com/leasehold/leasehold/internal/raftnode"
)

// openBackup opens and verifies the backup at path; every failure is the
// operator's (a wrong or damaged file): invalid-argument.
func openBackup(path string) (*backup.File, error) {
	b, err := backup.Open(path)
	if err != nil {
		return nil, usageErr("%s: %v", path, err)
	}
	return b, nil
}

func newSnapshotCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Back up a running cluster and restore a backup into a new data dir",
	}
	save := &cobra.Command{
		Use:   "save FILE",
		Short: "Write a consistent snapshot of the running cluster to FILE (with a SHA-256 checksum)",
		Long: `Ask the leader for a snapshot of the state — every acknowledged command included — and
stream it into FILE. The file is written as FILE.part-* and renamed when complete and
synced, so FILE is either absent or a whole backup. The cluster keeps serving meanwhile.
--timeout bounds the whole transfer; here it defaults to 1h.`,
		Example: `  leasehold snapshot save /backups/leasehold-$(date +%F-%H%M).snap`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("timeout") {
				g.timeout = time.Hour
			}
			return g.do(cmd, func(ctx context.Context, c *client.Client) error {
				info, size, err := backup.Save(args[0], func(w io.Writer) (*client.SnapshotInfo, error) { return c.Snapshot(ctx, w) })
				if err != nil {
					return err
				}
				emit(cmd, g, map[string]any{"file": args[0], "bytes": size, "index": info.GetIndex(), "term": info.GetTerm(), "token": info.GetToken(), "node_id": info.GetNodeId()},
					fmt.Sprintf("saved %s: %d bytes, index %d, token %d, from node %s", args[0], size, info.GetIndex(), info.GetToken(), info.GetNodeId()))
				return nil
			})
		},
	}
	status := &cobra.Command{
		Use:   "status FILE",
		Short: "Verify FILE's checksum and print its index, token counter and sizes",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := openBackup(args[0])
			if err != nil {
				return err
			}
			defer b.Close()
			st, err := b.Scan()
			if err != nil {
				return usageErr("%s: %v", args[0], err)
			}
			in := b.Info
			taken := time.UnixMilli(in.GetUnixMs()).UTC().Format(time.RFC3339)
			lastGrant := "none"
			if in.GetLastGrantUnixMs() > 0 {
				lastGrant = time.UnixMilli(in.GetLastGrantUnixMs()).UTC().Format(time.RFC3339)
			}
			var t strings.Builder
			fmt.Fprintf(&t, "file        %s (%d bytes, sha256 %x: OK)\n", args[0], b.Size, b.Sum)
			fmt.Fprintf(&t, "taken       %s from node %s at index %d, term %d\n", taken, in.GetNodeId(), in.GetIndex(), in.GetTerm())
			fmt.Fprintf(&t, "token       %d (last grant %s, peak %d grants/s)\n", in.GetToken(), lastGrant, in.GetPeakRate())
			fmt.Fprintf(&t, "state       %d bytes accounted: %d sessions, %d locks, %d KV keys (%d value bytes), %d tombstones, %d nodes",
				st.StateBytes, st.Sessions, st.Locks, st.KVKeys, st.ValueBytes, st.Tombstones, st.Nodes)
			emit(cmd, g, map[string]any{
				"file": args[0], "bytes": b.Size, "sha256": fmt.Sprintf("%x", b.Sum), "checksum": "ok",
				"index": in.GetIndex(), "term": in.GetTerm(), "token": in.GetToken(), "node_id": in.GetNodeId(),
				"unix_ms": in.GetUnixMs(), "last_grant_unix_ms": in.GetLastGrantUnixMs(), "peak_rate": in.GetPeakRate(), "state": st,
			}, t.String())
			return nil
		},
	}
	var (
		dataDir, nodeID, raftAddr, quota string
		tokenFloor                       uint64
	)
	restore := &cobra.Command{
		Use:   "restore FILE --data DIR [--token-floor N]",
		Short: "Build a new single-node data dir from a backup, with the token counter raised first",
		Long: `Build DIR (absent or empty) as the data dir of a NEW single-node cluster that holds FILE's
state: the fenced KV with its tokens, the token counter, the registered nodes. Sessions,
holdings, queues and lock-delays of the backup are dropped: their holders belonged to the
lost cluster and must acquire again.

Before the node can ever serve, the token counter is raised above anything the lost cluster
could have issued after the backup, so no token is handed out twice:
  - automatically: floor = token + ceil(max(0, now − last grant) × max(2 × peak rate, 1000/s)) + 1,
    from the grant clock in the backup (the newest grant stamp and the most grants stamped in
    one second). This assumes that this machine's wall clock does not run behind the old
    cluster's, and that the lost cluster never granted faster than that bound;
  - or explicitly with --token-floor N, which overrides the automatic floor: use it when you
    know a larger token (the largest token any resource accepted) or the assumptions fail.
Without a grant stamp in the backup and without --token-floor, restore refuses.

Then start the node with ` + "`leasehold serve --data DIR`" + ` (with the same --node-id and --raft-addr)
and grow the cluster with --join.`,
		Example: `  leasehold snapshot restore /backups/leasehold.snap --data ./leasehold-data
  leasehold snapshot restore /backups/leasehold.snap --data ./n1 --node-id n1 --raft-addr 10.0.0.1:7520 --token-floor 5000000`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dataDir == "" {
				return usageErr("--data is required: the new data dir to build")
			}
			if ents, err := os.ReadDir(dataDir); err == nil && len(ents) > 0 {
				return usageErr("--data %s is not empty: restore builds a new data dir and never overwrites one", dataDir)
			}
			limits := fsm.DefaultLimits()
			q, err := parseBytes(quota)
			if err != nil {
				return usageErr("--quota-bytes: %v", err)
			}
			limits.MaxStateBytes = q
			b, err := openBackup(args[0])
			if err != nil {
				return err
			}
			defer b.Close()
			explicit := cmd.Flags().Changed("token-floor")
			var how string
			floor := func(gc fsm.GrantClock) (uint64, error) {
				auto := uint64(0)
				if gc.LastGrantUnixMs > 0 {
					auto = gc.Floor(time.Now().UnixMilli())
				}
				switch {
				case explicit && tokenFloor <= gc.Token:
					return 0, usageErr("--token-floor %d is not above the backup's newest token %d", tokenFloor, gc.Token)
				case explicit:
					how = fmt.Sprintf("--token-floor %d (the automatic floor would be %d)", tokenFloor, auto)
					return tokenFloor, nil
				case auto == 0:
					return 0, usageErr("the backup has no grant stamp to compute a floor from: give --token-floor N above any token the lost cluster could have issued")
				}
				how = fmt.Sprintf("automatic: token %d + (now − last grant) × max(2 × %d/s, %d/s) + 1", gc.Token, gc.PeakRate, fsm.MinFloorRate)
				return auto, nil
			}
			cfg := raftnode.DefaultConfig()
			cfg.DataDir, cfg.NodeID, cfg.RaftAddr, cfg.Limits = dataDir, nodeID, raftAddr, limits
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute)
			defer cancel()
			res, err := raftnode.Restore(ctx, cfg, raftnode.Snapshot{Stream: b.Stream, Size: b.Stream.Size(), Index: b.Info.GetIndex()}, floor)
			if err != nil {
				return err
			}
			emit(cmd, g, map[string]any{"data": dataDir, "node_id": nodeID, "backup_token": res.Clock.Token, "token_floor": res.Floor, "floor": how, "index": res.Index},
				fmt.Sprintf("restored %s into %s (node %s): backup token %d, token floor %d, %s\nstart it with: leasehold serve --data %s --node-id %s%s",
					args[0], dataDir, nodeID, res.Clock.Token, res.Floor, how, dataDir, nodeID, raftAddrFlag(raftAddr)))
			return nil
		},
	}
	f := restore.Flags()
	f.StringVar(&dataDir, "data", "", "the new data dir to build (must be absent or empty)")
	f.Uint64Var(&tokenFloor, "token-floor", 0, "start the token counter at N (overrides the automatic floor)")
	f.StringVar(&nodeID, "node-id", "n1", "the id of the new cluster's only node")
	f.StringVar(&raftAddr, "raft-addr", "", "the Raft address the node will serve with (empty: single node, no Raft port)")
	f.StringVar(&quota, "quota-bytes", "256MiB", "state quota (as serve --quota-bytes)")
	cmd.AddCommand(save, status, restore)
	return cmd
}

func raftAddrFlag(addr string) string {
	if addr == "" {
		return ""
	}
	return " --raft-addr " + addr
}

// parseBytes reads a byte count > 0: an integer, optionally with KiB, MiB
// or GiB.
func parseBytes(s string) (int64, error) {
	n, err := admission.ParseBytes(s)
	if err == nil && n == 0 {
		err = fmt.Errorf("%s must be > 0", s)
	}
	return n, err
}
