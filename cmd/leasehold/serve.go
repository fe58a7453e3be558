package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/internal/admission"
	"github.com/leasehold/leasehold/internal/buildinfo"
	"github.com/leasehold/leasehold/internal/gcfloor"
	"github.com/leasehold/leasehold/internal/raftnode"
	"github.com/leasehold/leasehold/internal/server"
)

func newServeCmd(g *globals) *cobra.Command {
	var (
		dataDir, listen, advertise, nodeID, raftAddr, bootstrap, join, logLevel string
		quota, gcHeapFloor                                                      string
		tlsFlags                                                                serveTLSFlags
		forceNewCluster                                                         bool
		admins                                                                  []string
		nodeSecretFile                                                          string
		pprofOn                                                                 bool
		limits                                                                  []string
	)
	var logFormat string
	var accessLog bool
	var watchHistory int
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a leasehold server (a single durable node with no flags)",
		Long: `Run a leasehold node. With no flags it is a single-node cluster: data (Raft log, snapshots)
in ./leasehold-data, fsync'd before any answer, API and metrics on 127.0.0.1:7420.

A cluster: start every node of a new cluster with the same --bootstrap list and its own
--node-id, --raft-addr and --listen. The cluster is founded once: a node with an empty data
dir founds it only when every voter of the list has answered that the cluster was never
formed (it waits for them, so start them all); if one holds the cluster's log, the node
refuses to start (its data was lost, or it comes late): remove it (leasehold cluster remove
ID) and start it with --join. --bootstrap is ignored on a data dir with state, so restarts
may keep it. Add a node to a running cluster with --join API_ADDR (it joins as a non-voter
and becomes a voter once it has caught up). --bootstrap and --join together (deploy files
with one command line for every start): found the cluster if it was never formed, else join
it through API_ADDR as a member that starts over. A node with a --raft-addr and an empty
data dir starts only with --bootstrap or --join. A single node (no --raft-addr) grows: stop
it, start it again on the same --data and --node-id with --raft-addr, then --join others to it.

--force-new-cluster is for a permanent loss of quorum: it keeps this node's data and token
counter, makes it the only voter of a cluster with a new id, and the others are refused
from then on. Run it on one survivor only, then grow the cluster again with --join.

TLS: --cert and --key serve the API over TLS only (HTTP/2 and HTTP/1.1 on the one port);
--client-ca also requires every client to present a certificate signed by that CA. Calls
to other nodes then use https:// with this node's certificate, verifying theirs with the
global --cacert (default: --client-ca). Without --cert, serve refuses a non-loopback --listen
address unless --insecure is given. --peer-cert, --peer-key and --peer-ca run Raft peer
traffic inside mutual TLS, where only node certificates (certs create-node) are peers; with
--node-secret-file every Raft peer must also prove it knows the secret (a challenge-response:
the secret never travels). A --raft-addr with neither admits any process that can reach it:
serve allows that only on a loopback address, or with --insecure.

Every flag can also be set in the environment as LEASEHOLD_<FLAG> (LEASEHOLD_DATA,
LEASEHOLD_LISTEN, LEASEHOLD_NODE_ID, LEASEHOLD_RAFT_ADDR, LEASEHOLD_BOOTSTRAP, LEASEHOLD_JOIN,
LEASEHOLD_ADVERTISE, LEASEHOLD_LOG_LEVEL, LEASEHOLD_LOG_FORMAT, LEASEHOLD_ACCESS_LOG,
LEASEHOLD_QUOTA_BYTES, LEASEHOLD_CERT, LEASEHOLD_KEY, LEASEHOLD_CLIENT_CA,
LEASEHOLD_INSECURE, LEASEHOLD_SEQUENCER_KEY, LEASEHOLD_FORCE_NEW_CLUSTER,
LEASEHOLD_PPROF, LEASEHOLD_LIMIT, LEASEHOLD_WATCH_HISTORY, LEASEHOLD_GC_HEAP_FLOOR); a flag on the command line wins.

Auth: --admin NAME makes NAME (a client certificate CN or a token's principal) an admin whatever
the policies say; --node-secret-file FILE identifies nodes to each other without mutual TLS (see
leasehold auth --help).

Signed sequencers: with --sequencer-key FILE (the same file on every node), sessions created
with sequencers get a signed sequencer with every grant; GET /v1/keys serves the public keys.

--limit NAME=VALUE (repeatable, or comma-separated) sets a limit that keeps the node alive
under floods; 0 turns one off. The limits and their defaults:
  ` + limitDefaults() + `
A request refused by a limit fails with resource-exhausted, naming the limit to raise.`,
		Example: `  leasehold serve
  leasehold serve --node-id n1 --listen 127.0.0.1:7420 --raft-addr 127.0.0.1:7520 \
      --bootstrap n1=127.0.0.1:7520,n2=127.0.0.1:7521,n3=127.0.0.1:7522 --data ./n1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := flagsFromEnv(cmd); err != nil {
				return err
			}
			logger, err := newLogger(os.Stderr, logFormat, logLevel)
			if err != nil {
				return err
			}
			quotaBytes, err := parseBytes(quota)
			if err != nil {
				return usageErr("--quota-bytes: %v", err)
			}
			floor, err := admission.ParseBytes(gcHeapFloor)
			if err == nil && floor > maxGCHeapFloor {
				err = fmt.Errorf("%s is more than 64GiB", gcHeapFloor)
			}
			if err != nil {
				return usageErr("--gc-heap-floor: %v", err)
			}
			if watchHistory < 1 || watchHistory > maxWatchHistory {
				return usageErr("--watch-history %d: want 1 to %d events", watchHistory, maxWatchHistory)
			}
			serverTLS, peerTLS, err := tlsFlags.config(listen, g.tls.cacert)
			if err != nil {
				return err
			}
			signer, err := tlsFlags.signer()
			if err != nil {
				return err
			}
			raftTLS, err := tlsFlags.raftConfig(raftAddr)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if errors.Is(err, syscall.EADDRINUSE) {
				return usageErr("%s is in use by another process: stop it, or give another --listen", listen)
			}
			if err != nil {
				return fmt.Errorf("listen: %w", err)
			}
			if advertise == "" {
				advertise = ln.Addr().String()
			}
			cfg := server.DefaultConfig(dataDir, advertise)
			cfg.Logger = logger
			cfg.TLS, cfg.PeerClientTLS, cfg.Signer = serverTLS, peerTLS, signer
			cfg.Raft.PeerTLS = raftTLS
			if accessLog {
				cfg.AccessLog = logger.With("log", "access")
			}
			cfg.Raft.NodeID = nodeID
			cfg.Raft.RaftAddr = raftAddr
			cfg.Raft.Limits.MaxStateBytes = quotaBytes
			for _, l := range limits {
				name, value, _ := strings.Cut(l, "=")
				if err := cfg.Limits.Set(name, value); err != nil {
					_ = ln.Close()
					return usageErr("--limit: %v", err)
				}
			}
			if err := cfg.Limits.Validate(); err != nil {
				_ = ln.Close()
				return usageErr("--limit: %v", err)
			}
			cfg.Join = join
			cfg.WatchHistory = watchHistory
			cfg.Raft.ForceNewCluster = forceNewCluster
			cfg.Admins = admins
			if cfg.NodeSecret, err = readNodeSecret(nodeSecretFile); err != nil {
				_ = ln.Close()
				return err
			}
			if cfg.NodeSecret != "" {
				cfg.Raft.PeerSecret = []byte(cfg.NodeSecret)
			} else if raftAddr != "" && raftTLS == nil {
				// On loopback this is the documented development cluster (Info,
				// so that a normal start logs nothing at WARN); elsewhere only
				// --insecure allows it, and it is worth a warning.
				level := slog.LevelWarn
				if loopback(raftAddr) {
					level = slog.LevelInfo
				}
				logger.Log(cmd.Context(), level, "the Raft port admits any process that can reach it: give --peer-cert/--peer-key/--peer-ca or --node-secret-file", "raft", raftAddr)
			}
			cfg.Pprof = pprofOn
			if err := applyTestHooks(&cfg, logger); err != nil {
				_ = ln.Close()
				return err
			}
			if bootstrap != "" {
				peers, err := parsePeers(bootstrap)
				if err != nil {
					_ = ln.Close()
					return err
				}
				cfg.Raft.Bootstrap = peers
			}
			cfg.Raft.Abort = cmd.Context().Done()
			s, err := server.Open(cfg)
			switch {
			case errors.Is(err, raftnode.ErrDataDirInUse):
				err = usageErr("the data dir %s is in use by another leasehold process: stop it, or give another --data", dataDir)
			case errors.Is(err, raftnode.ErrNoState) && !forceNewCluster:
				err = usageErr("no state in %s; if this node's data was lost, remove it from the cluster with `leasehold cluster remove %s` and start it with --join ADDR (the API address of a running member); to start a brand-new cluster, give every first node the same --bootstrap list", dataDir, nodeID)
			case errors.Is(err, raftnode.ErrClusterFormed):
				err = usageErr("%v", err)
			case errors.Is(err, raftnode.ErrShutdown) && cmd.Context().Err() != nil:
				logger.Info("leasehold stopped before the cluster was founded", "node", nodeID)
				_ = ln.Close()
				return nil
			}
			if err != nil {
				_ = ln.Close()
				return err
			}
			defer gcfloor.Start(uint64(floor))()
			logger.Info("leasehold serving", "api", ln.Addr().String(), "node", nodeID, "raft", raftAddr, "data", dataDir, "tls", serverTLS != nil, "version", buildinfo.Get().Version)
			serveErr := s.Serve(cmd.Context(), ln)
			logger.Info("leasehold shutting down", "node", nodeID, "cause", context.Cause(cmd.Context()))
			closeErr := s.Close()
			logger.Info("leasehold stopped", "node", nodeID, "err", errors.Join(serveErr, closeErr))
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
	f.StringVar(&bootstrap, "bootstrap", "", "voters of a new cluster: id=raftaddr,... (the same on every node; used only on an empty data dir, to found the cluster once every voter answers that it was never formed)")
	f.StringVar(&join, "join", "", "API address of a running member to join through (with --bootstrap: only if the cluster was formed before)")
	f.StringVar(&logLevel, "log-level", "info", "trace, debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json (one object per line)")
	f.BoolVar(&accessLog, "access-log", false, "log one line per request (method, path, status, leasehold code, duration, peer)")
	f.StringVar(&quota, "quota-bytes", "256MiB", "state quota: bytes, or with KiB, MiB or GiB (the same on every node)")
	f.StringVar(&gcHeapFloor, "gc-heap-floor", "32MiB", "let the heap grow to this size before the garbage collector runs (bytes, or with KiB, MiB or GiB; 0 = off: Go's GOGC alone)")
	tlsFlags.add(f)
	f.IntVar(&watchHistory, "watch-history", server.DefaultWatchHistory, "events kept in memory for watch --from-index; a watcher may fall half of it behind")
	f.StringVar(&nodeSecretFile, "node-secret-file", "", "file with a secret (>= 32 bytes) shared by every node: a caller presenting it is a node (for auth without mutual TLS between nodes; use with --cert)")
	f.StringSliceVar(&admins, "admin", nil, "principals (client certificate CN or token principal) that are admins whatever the policies say (repeatable; see leasehold auth)")
	f.BoolVar(&forceNewCluster, "force-new-cluster", false, "after a permanent loss of quorum: make this node the only voter of a new cluster, keeping its data (one survivor only; remove the flag once it runs)")
	f.BoolVar(&pprofOn, "pprof", false, "serve net/http/pprof under /debug/pprof/ on the API address")
	f.StringSliceVar(&limits, "limit", nil, "a limit NAME=VALUE (repeatable): "+strings.Join(admission.LimitNames(), ", "))
	return cmd
}

// maxGCHeapFloor caps --gc-heap-floor.
const maxGCHeapFloor = 64 << 30

// maxWatchHistory caps --watch-history (a few hundred bytes per event).
const maxWatchHistory = 1_000_000

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

// limitDefaults lists every limit with its default, for the help text.
func limitDefaults() string {
	d := admission.DefaultLimits()
	var out []string
	for _, n := range admission.LimitNames() {
		out = append(out, n+"="+d.Get(n))
	}
	return strings.Join(out, "\n  ")
}
