package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/gateway"
)

// newGatewayCmd returns `leasehold gateway`: the fencing reverse proxy of fence/gateway.
func newGatewayCmd(gf *globals) *cobra.Command {
	cfg := gateway.DefaultConfig()
	var adminTokenFile string
	var seq sequencerFlags
	cmd := &cobra.Command{
		Use:   "gateway --listen ADDR --upstream URL",
		Short: "Proxy to a service that cannot check fencing tokens, refusing stale ones",
		Long: `Run an HTTP reverse proxy that is the sole admission point of an upstream service which
cannot check fencing tokens itself.

Each write request carries a Fencing-Token header (decimal, > 0) and a resource key (the
Fencing-Key header, or the URL path with --key-from path). Per key, the gateway serializes
requests, answers a stale token with 409 {"error":{"code":"stale-token",...,"last_token":N}}
without contacting the upstream, and records the token (fsync'd to --data) before forwarding
the rest, so an upstream that applied a request and then failed never lets an older token in
(--record unless-4xx: record after the answer unless it is 4xx). GET, HEAD and OPTIONS pass without a token unless
--fence-reads. The upstream must not be reachable except through this one gateway.

Verifying mode (--keyset): each fenced request carries a signed sequencer in the
Fencing-Sequencer header instead of a bare token. A forged or altered sequencer, one signed by
a key not in the key set, one from another cluster, or one for another lock than the key's
(--lock KEY=LOCK, --lock-is-key) is refused with 403 permission-denied before its token is
compared or recorded; a malformed or missing one with 400 invalid-argument.

Without signatures, --token-counter URL refuses a token above the newest token the cluster
has issued (403 permission-denied; 503 unavailable while the cluster cannot be asked).`,

		Example: `  leasehold gateway --listen 127.0.0.1:7421 --upstream http://127.0.0.1:8080
  curl -X POST -H 'Fencing-Key: payments:stream-1' -H 'Fencing-Token: 18' \
       http://127.0.0.1:7421/charge`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cfg.Logger == nil {
				cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			}
			if err := seq.apply(&cfg, gf.tls); err != nil {
				return err
			}
			tok, err := readSecretFile("--admin-token-file", adminTokenFile)
			if err != nil {
				return err
			}
			cfg.AdminToken = tok
			g, err := gateway.New(cfg)
			if err != nil {
				return err
			}
			defer seq.reloadOnHUP(g, cfg.Logger)()
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			serveErr := g.ListenAndServe(ctx)
			closeErr := g.Close()
			if serveErr != nil {
				return serveErr
			}
			if closeErr != nil {
				return fmt.Errorf("gateway: close: %w", closeErr)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", cfg.Listen, "address to listen on")
	f.StringVar(&cfg.Upstream, "upstream", "", "base URL of the protected service (required)")
	f.StringVar(&cfg.KeyFrom, "key-from", cfg.KeyFrom, `where the resource key comes from: "header" or "path"`)
	f.StringVar(&cfg.KeyHeader, "key-header", fence.DefaultKeyHeader, "header carrying the key with --key-from header")
	f.StringVar(&cfg.TokenHeader, "token-header", fence.DefaultTokenHeader, "header carrying the fencing token")
	f.StringVar(&cfg.DataFile, "data", cfg.DataFile, "bbolt file keeping the last accepted token per key")
	f.BoolVar(&cfg.Strict, "strict", false, "accept a token only if greater than the last (default: greater or equal)")
	f.BoolVar(&cfg.FenceReads, "fence-reads", false, "require and check tokens on GET, HEAD and OPTIONS too")
	f.StringVar(&cfg.Record, "record", cfg.Record, `when to record a token: "before" forwarding, or after the answer "unless-4xx"`)
	f.DurationVar(&cfg.LockTimeout, "lock-timeout", cfg.LockTimeout, "how long a request waits for its key (then 503)")
	f.DurationVar(&cfg.UpstreamTimeout, "upstream-timeout", cfg.UpstreamTimeout, "bound on one upstream exchange (0: none)")
	f.DurationVar(&cfg.Settle, "settle", cfg.Settle, "after an exchange whose outcome is unknown (timeout, reset) refuse its key (503, Retry-After) this long, and every key this long after start, so an older write still on its way to the upstream cannot land after a newer one; set it at least to the upstream's own request timeout (0: off)")
	f.IntVar(&cfg.MaxKeys, "max-keys", cfg.MaxKeys, "most keys kept in --data; a new key beyond it gets 507 resource-exhausted")
	f.StringVar(&cfg.AdminListen, "admin-listen", cfg.AdminListen, `address of /healthz, /metrics and POST /admin/drop-idle?older-than=DUR ("" for none)`)
	f.StringVar(&adminTokenFile, "admin-token-file", os.Getenv("LEASEHOLD_GATEWAY_ADMIN_TOKEN_FILE"), "file holding the bearer token (≥ 32 bytes, e.g. openssl rand -hex 32) that POST /admin/... requires (Authorization: Bearer TOKEN); without it they are refused (403); env LEASEHOLD_GATEWAY_ADMIN_TOKEN_FILE")
	seq.add(f)
	if err := cmd.MarkFlagRequired("upstream"); err != nil {
		panic(errors.Join(errors.New("gateway: mark --upstream required"), err)) // a programming error
	}
	return cmd
}
