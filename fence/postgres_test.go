package fence_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/pgfence"
)

func openPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := serviceURL(t, "LEASEHOLD_TEST_POSTGRES")
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("LEASEHOLD_TEST_POSTGRES: %v", err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatalf("postgres at LEASEHOLD_TEST_POSTGRES: %v (start it with: eval \"$(bash scripts/ci-services.sh)\")", err)
	}
	return pool
}

// pgTables creates the fence table plus the test's accept log and data tables under unique
// names, dropped at cleanup.
func pgTables(t *testing.T, pool *pgxpool.Pool, mode fence.Mode) (g *pgfence.Guard, log, data string) {
	t.Helper()
	ctx := context.Background()
	base := unique("leasehold_test_")
	g = pgfence.New(pool, fence.WithMode(mode), fence.WithTable(base))
	if err := g.Init(ctx); err != nil {
		t.Fatal(err)
	}
	log, data = base+"_log", base+"_data"
	if _, err := pool.Exec(ctx, `CREATE TABLE `+log+` (id bigserial PRIMARY KEY, resource text NOT NULL, token numeric(20,0) NOT NULL);
		CREATE TABLE `+data+` (resource text PRIMARY KEY, value bytea)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), `DROP TABLE IF EXISTS `+base+`, `+log+`, `+data)
		if err != nil {
			t.Errorf("drop test tables: %v", err)
		}
	})
	return g, log, data
}

func openPostgres(t *testing.T, mode fence.Mode) *subject {
	pool := openPool(t)
	g, log, data := pgTables(t, pool, mode)
	return &subject{
		guard: g,
		doLogged: func(ctx context.Context, key string, token uint64, value []byte, fail bool) error {
			return g.Do(ctx, key, token, func(tx pgx.Tx) error {
				if fail {
					return errEffect
				}
				if _, err := tx.Exec(ctx, `INSERT INTO `+log+` (resource, token) VALUES ($1, $2::text::numeric)`, key, strconv.FormatUint(token, 10)); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO `+data+` (resource, value) VALUES ($1, $2)
					ON CONFLICT (resource) DO UPDATE SET value = EXCLUDED.value`, key, value)
				return err
			})
		},
		logged: func(ctx context.Context, key string) ([]uint64, []byte) {
			rows, err := pool.Query(ctx, `SELECT token::text::bigint FROM `+log+` WHERE resource = $1 ORDER BY id`, key)
			if err != nil {
				t.Fatal(err)
			}
			toks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			out := make([]uint64, len(toks))
			for i, v := range toks {
				out[i] = uint64(v)
			}
			var v []byte
			err = pool.QueryRow(ctx, `SELECT value FROM `+data+` WHERE resource = $1`, key).Scan(&v)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			return out, v
		},
	}
}

// TestPostgresRollback: the caller's statements and the token update commit or roll back
// together, and FenceTx works inside a caller-owned transaction.
func TestPostgresRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := openPool(t)
	g, log, _ := pgTables(t, pool, fence.Strict)

	err := g.Do(ctx, "report:417", 7, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO `+log+` (resource, token) VALUES ('report:417', 7)`); err != nil {
			return err
		}
		return errEffect
	})
	if !errors.Is(err, errEffect) {
		t.Fatalf("Do = %v, want errEffect", err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+log).Scan(&n); err != nil || n != 0 {
		t.Fatalf("log rows after rollback = %d, %v; want 0", n, err)
	}
	mustLast(t, g, "report:417", 0, "")

	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.FenceTx(ctx, tx, "report:417", 7); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	mustLast(t, g, "report:417", 7, "")
	tx, err = pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	mustStale(t, g.FenceTx(ctx, tx, "report:417", 7), "report:417", 7, 7)
}

// TestPostgresBlocksConcurrentWriter: while one writer's Do is inside its function, a second
// writer for the same key cannot pass the check; it proceeds, and is judged against the first
// writer's token, only after the first commits.
func TestPostgresBlocksConcurrentWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := openPool(t)
	g, log, _ := pgTables(t, pool, fence.Monotonic)
	table := strings.TrimSuffix(log, "_log")

	inside := make(chan struct{})
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- g.Do(ctx, "k", 5, func(pgx.Tx) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	second := make(chan error, 1)
	go func() { second <- g.Write(ctx, "k", 4, []byte("stale")) }()

	// The second writer must be waiting on the first one's row lock: observe it in
	// pg_stat_activity rather than sleeping.
	waitForLockWait(ctx, t, pool, table)
	select {
	case err := <-second:
		t.Fatalf("second writer finished while the first held the key: %v", err)
	default:
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	mustStale(t, <-second, "k", 4, 5)
}

// waitForLockWait polls until a backend running a statement on table waits for a lock;
// bounded in iterations.
func waitForLockWait(ctx context.Context, t *testing.T, pool *pgxpool.Pool, table string) {
	t.Helper()
	for range 5000 {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid() AND position($1 in query) > 0`, table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatal("no backend ever waited for a lock")
}

func TestPostgresTokenRange(t *testing.T) {
	t.Parallel()
	g, _, _ := pgTables(t, openPool(t), fence.Monotonic)
	testTokenRange(context.Background(), t, g)
}
