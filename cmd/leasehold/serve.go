package main

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/internal/raftnode"
	"github.com/leasehold/leasehold/internal/server"
)

func newServeCmd() *cobra.Command {
	var (
		dataDir, listen, advertise, nodeID, raftAddr, bootstrap, join, logLevel string
		quota                                                                   string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a leasehold server (a single durable node with no flags)",
		Long: `Run a leasehold node. With no flags it is a single-node cluster: data (Raft log, snapshots)
in ./leasehold-data, fsync'd before any answer, API and metrics on 127.0.0.1:7420.

A cluster: start every node with the same --bootstrap list and its own --node-id,
--raft-addr and --listen; or add a node to a running cluster with --join API_ADDR.
A node restarted with its data dir rejoins by itself.

Every flag can also be set in the environment as LEASEHOLD_<FLAG> (LEASEHOLD_DATA,
LEASEHOLD_LISTEN, LEASEHOLD_NODE_ID, LEASEHOLD_RAFT_ADDR, LEASEHOLD_BOOTSTRAP, LEASEHOLD_JOIN,
LEASEHOLD_ADVERTISE, LEASEHOLD_LOG_LEVEL, LEASEHOLD_QUOTA_BYTES); a flag on the command line wins.`,
		Example: `  leasehold serve
  leasehold serve --node-id n1 --listen 127.0.0.1:7420 --raft-addr 127.0.0.1:7520 \
      --bootstrap n1=127.0.0.1:7520,n2=127.0.0.1:7521,n3=127.0.0.1:7522 --data ./n1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagsFromEnv(cmd); err != nil {
				return err
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(logLevel)); err != nil {
				return usageErr("--log-level: %v", err)
			}
			logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
			quotaBytes, err := parseBytes(quota)
			if err != nil {
				return usageErr("--quota-bytes: %v", err)
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			if advertise == "" {
				advertise = ln.Addr().String()
			}
			cfg := server.DefaultConfig(dataDir, advertise)
			cfg.Logger = logger
			cfg.Raft.NodeID = nodeID
			cfg.Raft.RaftAddr = raftAddr
			cfg.Raft.Limits.MaxStateBytes = quotaBytes
			cfg.Join = join
			if bootstrap != "" {
				peers, err := parsePeers(bootstrap)
				if err != nil {
					_ = ln.Close()
					return err
				}
				cfg.Raft.Bootstrap = peers
			}
			s, err := server.Open(cfg)
			if err != nil {
				_ = ln.Close()
				return err
			}
			logger.Info("leasehold serving", "api", ln.Addr().String(), "node", nodeID, "raft", raftAddr, "data", dataDir)
			serveErr := s.Serve(cmd.Context(), ln)
			closeErr := s.Close()
			if serveErr != nil {
				return serveErr
			}
			return closeErr
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data", "./leasehold-data", "data directory (Raft log, stable store, snapshots)")
	f.StringVar(&listen, "listen", "127.0.0.1:7420", "API address (gRPC, Connect/HTTP JSON, /metrics, /healthz)")
	f.StringVar(&advertise, "advertise", "", "API address other nodes use to reach this one (default: the listen address)")
	f.StringVar(&nodeID, "node-id", "n1", "this node's id in the cluster")
	f.StringVar(&raftAddr, "raft-addr", "", "Raft peer address host:port (required in a cluster; empty = single node, no Raft port)")
	f.StringVar(&bootstrap, "bootstrap", "", "voters of a new cluster: id=raftaddr,... (the same on every node; used only on an empty data dir)")
	f.StringVar(&join, "join", "", "API address of a running member to join through")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&quota, "quota-bytes", "256MiB", "state quota: bytes, or with KiB, MiB or GiB (the same on every node)")
	return cmd
}

func parsePeers(s string) ([]raftnode.Peer, error) {
	var peers []raftnode.Peer
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || id == "" || addr == "" {
			return nil, usageErr("--bootstrap: %q is not id=host:port", part)
		}
		if seen[id] {
			return nil, usageErr("--bootstrap: node id %q appears twice", id)
		}
		seen[id] = true
		peers = append(peers, raftnode.Peer{ID: id, RaftAddr: addr})
	}
	return peers, nil
}

// flagsFromEnv sets every flag of cmd that was not given on the command
// line from LEASEHOLD_<FLAG> (upper case, dashes as underscores).
func flagsFromEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		env := "LEASEHOLD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !f.Changed && err == nil {
			if serr := f.Value.Set(v); serr != nil {
				err = usageErr("%s=%q: %v", env, v, serr)
			}
		}
	})
	return err
}
