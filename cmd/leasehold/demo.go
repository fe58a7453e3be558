package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/api"
	pb "github.com/leasehold/leasehold/api/leaseholdv1"
	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/internal/server"
)

func newDemoCmd(g *globals) *cobra.Command {
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the seed scenario (a paused holder's late write is refused) against an in-process server",
		Long: `Start a throw-away single-node server on a free 127.0.0.1 port, then replay the seed scenario:
worker-A takes report:417:rebuild and pauses past its lease; worker-B, waiting in the queue,
gets the lock with a larger token and writes v2 to the fenced KV; worker-A resumes, its write
with the old token is refused (stale-token) and its release too (not-holder). Then the same
writes against a store that checks no token: the late write wins. Exits 0 only if every
result is the expected one.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dir, err := os.MkdirTemp("", "leasehold-demo-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return err
			}
			cfg := server.DefaultConfig(dir, ln.Addr().String())
			cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			s, err := server.Open(cfg)
			if err != nil {
				_ = ln.Close()
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
			defer cancel()
			serveCtx, stopServe := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- s.Serve(serveCtx, ln) }()
			defer func() {
				stopServe()
				<-served
				_ = s.Close()
			}()
			if err := s.WaitLeader(ctx); err != nil {
				return err
			}
			rows, err := runSeedScenario(ctx, ln.Addr().String(), ttl)
			printTimeline(cmd, g, rows)
			if err != nil {
				return err
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", time.Second, "worker-A's TTL (the server grants at least 1s)")
	return cmd
}

// demoRow is one line of the timeline.
type demoRow struct {
	AtMs     int64  `json:"t_ms"`
	Event    string `json:"event"`
	Lease    string `json:"lease,omitempty"`
	Token    uint64 `json:"token,omitempty"`
	Result   string `json:"result"`
	Expected string `json:"expected"`
	OK       bool   `json:"ok"`
}

func printTimeline(cmd *cobra.Command, g *globals, rows []demoRow) {
	if g.output == "json" {
		writeJSON(cmd.OutOrStdout(), map[string]any{"timeline": rows})
		return
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 8, 2, ' ', 0)
	fmt.Fprintln(w, "T(ms)\tEVENT\tLEASE\tTOKEN\tRESULT\t")
	for _, r := range rows {
		mark := "ok"
		if !r.OK {
			mark = "UNEXPECTED (want " + r.Expected + ")"
		}
		tok := ""
		if r.Token != 0 {
			tok = fmt.Sprint(r.Token)
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\n", r.AtMs, r.Event, r.Lease, tok, r.Result, mark)
	}
	_ = w.Flush()
}

// runSeedScenario plays DESIGN.md's seed scenario against the server at
// addr and returns the timeline; the error is non-nil when any result
// differs from the expected one.
func runSeedScenario(ctx context.Context, addr string, ttl time.Duration) ([]demoRow, error) {
	const name, key = "report:417:rebuild", "report:417"
	c, err := client.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	start := time.Now()
	var rows []demoRow
	bad := 0
	add := func(event, lease string, token uint64, result, expected string) {
		ok := result == expected
		if !ok {
			bad++
		}
		rows = append(rows, demoRow{AtMs: time.Since(start).Milliseconds(), Event: event, Lease: lease, Token: token, Result: result, Expected: expected, OK: ok})
	}
	short := func(id string) string { return id[:8] }
	outcome := func(err error) string {
		if err == nil {
			return "accepted"
		}
		return string(api.CodeOf(err))
	}

	// The expiry is observed on the watch stream, as an operator would.
	expired := make(chan *pb.Event, 1)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	events, err := c.Watch(wctx, name) // registered when it returns
	if err != nil {
		return nil, err
	}
	go func() {
		for ev, err := range events {
			if err != nil {
				return
			}
			if ev.GetType() == pb.EventType_EVENT_TYPE_EXPIRED {
				expired <- ev
				return
			}
		}
	}()

	a, err := c.NewSession(ctx, client.WithTTL(ttl), client.WithOwner("worker-A"))
	if err != nil {
		return rows, err
	}
	la, err := a.Acquire(ctx, name)
	if err != nil {
		return rows, err
	}
	add("worker-A acquire "+name+" ttl="+a.TTL().String(), short(a.ID()), la.Token(), "granted", "granted")
	a.Orphan() // worker-A pauses: no more keepalives, but its process (and token) live on

	b, err := c.NewSession(ctx, client.WithTTL(10*time.Second), client.WithOwner("worker-B"))
	if err != nil {
		return rows, err
	}
	defer b.Close(context.WithoutCancel(ctx))
	lb, err := b.Acquire(ctx, name) // waits in the queue until A's lease expires
	if err != nil {
		return rows, err
	}
	select {
	case ev := <-expired:
		rows = append(rows, demoRow{AtMs: ev.GetUnixMs() - start.UnixMilli(), Event: "lease of worker-A expired (no keepalive)", Lease: short(ev.GetLeaseId()), Token: ev.GetToken(), Result: "expired", Expected: "expired", OK: true})
	case <-ctx.Done():
		return rows, ctx.Err()
	}
	result := "granted, token larger"
	if lb.Token() <= la.Token() {
		result = "granted, token NOT larger"
	}
	add("worker-B acquire (was queued)", short(b.ID()), lb.Token(), result, "granted, token larger")
	add("resource.write(v2) by worker-B", short(b.ID()), lb.Token(), outcome(c.KVPut(ctx, key, []byte("v2"), lb.Token(), false)), "accepted")
	add("worker-A resumes; resource.write(v1)", short(a.ID()), la.Token(), outcome(c.KVPut(ctx, key, []byte("v1"), la.Token(), false)), string(api.CodeStaleToken))
	add("worker-A release", short(a.ID()), la.Token(), outcome(la.Release(ctx)), string(api.CodeNotHolder))
	info, err := c.Status(ctx, name)
	if err != nil {
		return rows, err
	}
	holder, holderLease := "free", ""
	if h := info.GetHolder(); h != nil {
		holder, holderLease = "held by "+h.GetOwner(), short(h.GetLeaseId())
	}
	add("status "+name, holderLease, info.GetHolder().GetToken(), holder, "held by worker-B")
	v, tok, err := c.KVGet(ctx, key)
	if err != nil {
		return rows, err
	}
	add("kv get "+key, "", tok, "value "+string(v), "value v2")

	// Contrast: a store that checks no token. The late write wins.
	unsafe := map[string]string{}
	unsafe[key] = "v2" // worker-B
	unsafe[key] = "v1" // worker-A, late
	add("contrast: unfenced store after both writes", "", 0, "value "+unsafe[key], "value v1")

	if bad > 0 {
		return rows, api.Errorf(api.CodeInternal, "%d results differ from the seed scenario", bad)
	}
	return rows, nil
}
