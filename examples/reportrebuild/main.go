//go:build unix

// Command reportrebuild replays seed 000 with real processes, a real leasehold server and
// PostgreSQL: a paused worker's late write is refused by the database.
//
//	go build ./cmd/leasehold
//	./leasehold serve --data "$(mktemp -d)" &   # a leasehold server on 127.0.0.1:7420
//	eval "$(bash scripts/ci-services.sh)"       # PostgreSQL; sets LEASEHOLD_TEST_POSTGRES
//	go run ./examples/reportrebuild
//
// The program starts itself twice more, as the worker processes worker-A and worker-B, and
// directs them:
//
//  1. worker-A takes the lock report:417:rebuild with a 1 s TTL and gets a token;
//  2. the program stops worker-A with SIGSTOP: no keepalives, but the process and its token
//     live on — a GC pause or a frozen VM;
//  3. worker-B, queued on the lock, is granted it once worker-A's lease has expired, with a
//     larger token, and writes report 417 through pgfence.Guard (strict mode): one
//     transaction that checks the token and upserts the row;
//  4. the program resumes worker-A with SIGCONT. Its Lock.Done has fired (the lease is lost),
//     but it writes anyway, as a request already on its way would: PostgreSQL refuses it
//     (fence.ErrStaleToken) and the row keeps worker-B's report; worker-A's release is
//     refused too (not-holder);
//  5. worker-B releases; the program prints the final row.
//
// It prints the timeline and exits 0 only if every result is the expected one.
//
// Flags: --endpoints (default $LEASEHOLD_ENDPOINTS or 127.0.0.1:7420), --postgres (default
// $LEASEHOLD_TEST_POSTGRES), --table-prefix (default leasehold_example: the tables
// <prefix>_fence and <prefix>_reports). On every run the example clears its own rows, so
// that a fresh leasehold server, whose tokens start again at 1, is not refused by the tokens
// of an earlier run; never reset a fence row of real data.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/client"
	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/pgfence"
)

const (
	lockName = "report:417:rebuild" // the lock the workers take
	resource = "report:417"         // the fence key of the row they write
	reportID = 417

	workerA = "worker-A"
	workerB = "worker-B"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "reportrebuild:", err)
		os.Exit(1)
	}
}

type config struct {
	endpoints   string
	postgres    string
	tablePrefix string
	worker      string        // set in the worker processes: the owner label
	ttl         time.Duration // the worker's session TTL
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var prefixRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,40}$`)

// run is the whole program: the director, or a worker when --worker is set.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("reportrebuild", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.endpoints, "endpoints", envOr("LEASEHOLD_ENDPOINTS", client.DefaultEndpoint), "leasehold server addresses, comma-separated (env LEASEHOLD_ENDPOINTS)")
	fs.StringVar(&cfg.postgres, "postgres", os.Getenv("LEASEHOLD_TEST_POSTGRES"), "PostgreSQL URL (env LEASEHOLD_TEST_POSTGRES)")
	fs.StringVar(&cfg.tablePrefix, "table-prefix", "leasehold_example", "prefix of the example's tables <prefix>_fence and <prefix>_reports")
	fs.StringVar(&cfg.worker, "worker", "", "internal: run as the worker process with this owner label")
	fs.DurationVar(&cfg.ttl, "ttl", 10*time.Second, "internal: the worker's session TTL")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case fs.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	case cfg.postgres == "":
		return errors.New(`no PostgreSQL: pass --postgres URL or set LEASEHOLD_TEST_POSTGRES (eval "$(bash scripts/ci-services.sh)" starts one on loopback)`)
	case !prefixRE.MatchString(cfg.tablePrefix):
		return fmt.Errorf("--table-prefix %q: want lowercase letters, digits and _", cfg.tablePrefix)
	}
	if cfg.worker != "" {
		return runWorker(ctx, cfg, stdin, stdout)
	}
	return direct(ctx, cfg, stdout, stderr)
}

// tables returns the guard over <prefix>_fence and the sanitized name of <prefix>_reports.
func tables(pool *pgxpool.Pool, prefix string) (*pgfence.Guard, string) {
	// Strict: one accepted write per lock generation, as in seed 000.
	guard := pgfence.New(pool, fence.WithMode(fence.Strict), fence.WithTable(prefix+"_fence"))
	return guard, pgx.Identifier{prefix + "_reports"}.Sanitize()
}

func openPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres URL: %w", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pool, nil
}

// ---------------------------------------------------------------------------- the worker

// message is one line a worker writes to its stdout for the director.
type message struct {
	Event     string `json:"event"` // acquired | lease | write | release
	Token     uint64 `json:"token,omitempty"`
	Lease     string `json:"lease,omitempty"`
	TTLMs     int64  `json:"ttl_ms,omitempty"`
	Result    string `json:"result,omitempty"`
	LastToken uint64 `json:"last_token,omitempty"`
	Detail    string `json:"detail,omitempty"`
}

// Commands the director writes to a worker's stdin, one per line.
const (
	cmdWrite     = "write"      // write the report unless the lease is lost
	cmdWriteLate = "write-late" // wait until Lock.Done fired, then write anyway
	cmdRelease   = "release"    // release the lock and exit
)

// runWorker is one worker process: it takes the lock, then obeys the director's commands.
func runWorker(ctx context.Context, cfg config, stdin io.Reader, stdout io.Writer) error {
	enc := json.NewEncoder(stdout)
	send := func(m message) error { return enc.Encode(m) }

	pool, err := openPool(ctx, cfg.postgres)
	if err != nil {
		return err
	}
	defer pool.Close()
	guard, reports := tables(pool, cfg.tablePrefix)

	c, err := client.Dial(ctx, cfg.endpoints)
	if err != nil {
		return err
	}
	defer c.Close()
	s, l, err := acquire(ctx, c, cfg)
	if err != nil {
		return err
	}
	defer closeSession(ctx, s) // worker-A's lease is long gone: Close then has nothing to end
	if err := send(message{Event: "acquired", Token: l.Token(), Lease: l.LeaseID(), TTLMs: s.TTL().Milliseconds()}); err != nil {
		return err
	}

	in := bufio.NewScanner(stdin)
	for in.Scan() {
		switch in.Text() {
		case cmdWrite:
			// A careful worker checks its lock before the effect — and still needs the fence,
			// because it can pause right after this check.
			select {
			case <-l.Done():
				if err := send(message{Event: "lease", Result: "lost", Detail: context.Cause(l.Context()).Error()}); err != nil {
					return err
				}
				continue
			default:
			}
			if err := send(write(ctx, guard, reports, cfg.worker, l.Token())); err != nil {
				return err
			}
		case cmdWriteLate:
			// This process was stopped past its lease. Its Lock.Done fires as soon as it runs
			// again; a request that was already on its way does not look at it. Wait for it
			// (so the timeline can show it), then write anyway with ctx, not l.Context().
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			select {
			case <-l.Done():
			case <-wctx.Done():
			}
			cancel()
			m := message{Event: "lease", Result: "held"}
			if cause := context.Cause(l.Context()); cause != nil {
				m.Result, m.Detail = "lost", cause.Error()
			}
			if err := send(m); err != nil {
				return err
			}
			if err := send(write(ctx, guard, reports, cfg.worker, l.Token())); err != nil {
				return err
			}
		case cmdRelease:
			m := message{Event: "release", Result: "released"}
			if err := l.Release(ctx); errors.Is(err, client.ErrNotHolder) {
				m.Result = "not-holder"
			} else if err != nil {
				return err
			}
			return send(m)
		default:
			return fmt.Errorf("unknown command %q", in.Text())
		}
	}
	if err := in.Err(); err != nil {
		return err
	}
	return errors.New("stdin closed before release")
}

// acquire takes the lock under a new session; worker-B waits in the server's FIFO queue.
// A 1 s lease can run out before its grant is confirmed on a loaded machine (the session
// counts from the moment it sent its request): then it tries again with a new session.
func acquire(ctx context.Context, c *client.Client, cfg config) (*client.Session, *client.Lock, error) {
	for attempt := 1; ; attempt++ {
		s, err := c.NewSession(ctx, client.WithTTL(cfg.ttl), client.WithOwner(cfg.worker))
		if err != nil {
			return nil, nil, err
		}
		l, err := s.Acquire(ctx, lockName)
		if err == nil {
			return s, l, nil
		}
		closeSession(ctx, s)
		if !errors.Is(err, client.ErrLeaseLost) || attempt == 3 {
			return nil, nil, err
		}
	}
}

func closeSession(ctx context.Context, s *client.Session) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = s.Close(ctx)
}

// write upserts report 417 through the fence: the token check and the upsert are one
// PostgreSQL transaction.
func write(ctx context.Context, guard *pgfence.Guard, reports, worker string, token uint64) message {
	body := fmt.Sprintf("report 417 rebuilt by %s", worker)
	err := guard.Do(ctx, resource, token, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+reports+` (id, body, written_by, token)
			VALUES ($1, $2, $3, $4::text::numeric)
			ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, written_by = EXCLUDED.written_by,
				token = EXCLUDED.token, written_at = now()`,
			reportID, body, worker, strconv.FormatUint(token, 10))
		return err
	})
	var stale *fence.StaleTokenError
	switch {
	case err == nil:
		return message{Event: "write", Token: token, Result: "accepted"}
	case errors.As(err, &stale):
		return message{Event: "write", Token: token, Result: "stale-token", LastToken: stale.LastToken, Detail: err.Error()}
	default:
		return message{Event: "write", Token: token, Result: "error", Detail: err.Error()}
	}
}
