package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/leasehold/leasehold/fence"
	"github.com/leasehold/leasehold/fence/sqlitefence"
)

func openSQLiteDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sqlitefence.Open(filepath.Join(t.TempDir(), "fence?#%.db")) // odd name on purpose
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8) // several connections, so the write lock is contended across them
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func openSQLite(t *testing.T, mode fence.Mode) *subject {
	ctx := context.Background()
	db := openSQLiteDB(t)
	table := unique("fence_")
	g := sqlitefence.New(db, fence.WithMode(mode), fence.WithTable(table))
	if err := g.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE accept_log (id INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT NOT NULL, token TEXT NOT NULL);
		CREATE TABLE data (resource TEXT PRIMARY KEY, value BLOB)`); err != nil {
		t.Fatal(err)
	}
	return &subject{
		guard: g,
		doLogged: func(ctx context.Context, key string, token uint64, value []byte, fail bool) error {
			return g.Do(ctx, key, token, func(tx *sql.Tx) error {
				if fail {
					return errEffect
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO accept_log (resource, token) VALUES (?, ?)`, key, strconv.FormatUint(token, 10)); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, `INSERT INTO data (resource, value) VALUES (?1, ?2)
					ON CONFLICT (resource) DO UPDATE SET value = excluded.value`, key, value)
				return err
			})
		},
		logged: func(ctx context.Context, key string) ([]uint64, []byte) {
			rows, err := db.QueryContext(ctx, `SELECT token FROM accept_log WHERE resource = ? ORDER BY id`, key)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var log []uint64
			for rows.Next() {
				var s string
				if err := rows.Scan(&s); err != nil {
					t.Fatal(err)
				}
				n, _ := strconv.ParseUint(s, 10, 64)
				log = append(log, n)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			var v []byte
			if err := db.QueryRowContext(ctx, `SELECT value FROM data WHERE resource = ?`, key).Scan(&v); err != nil && !errors.Is(err, sql.ErrNoRows) {
				t.Fatal(err)
			}
			return log, v
		},
	}
}

// TestSQLiteRollback: the caller's statements and the token update commit or roll back together.
func TestSQLiteRollback(t *testing.T) {
	ctx := context.Background()
	db := openSQLiteDB(t)
	g := sqlitefence.New(db, fence.WithMode(fence.Strict))
	if err := g.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE report (id INTEGER PRIMARY KEY, body TEXT)`); err != nil {
		t.Fatal(err)
	}
	err := g.Do(ctx, "report:417", 7, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO report (id, body) VALUES (417, 'half')`); err != nil {
			return err
		}
		return errEffect
	})
	if !errors.Is(err, errEffect) {
		t.Fatalf("Do = %v, want errEffect", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM report`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("report rows after rollback = %d, %v; want 0", n, err)
	}
	mustLast(t, g, "report:417", 0, "")

	// FenceTx in a caller-owned transaction.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.FenceTx(ctx, tx, "report:417", 7); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO report (id, body) VALUES (417, 'v7')`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustStale(t, g.FenceTx(ctx, tx, "report:417", 7), "report:417", 7, 7)
	_ = tx.Rollback()
}

// TestSQLiteTokenRange: tokens are compared as numbers over the whole uint64 range, not as
// SQLite's signed integers.
func TestSQLiteTokenRange(t *testing.T) {
	ctx := context.Background()
	g := sqlitefence.New(openSQLiteDB(t))
	if err := g.Init(ctx); err != nil {
		t.Fatal(err)
	}
	testTokenRange(ctx, t, g)
}

// testTokenRange walks tokens across 2^53 and 2^63 up to MaxUint64, where floating point or
// signed storage would misorder them.
func testTokenRange(ctx context.Context, t *testing.T, g fence.Guard) {
	t.Helper()
	const key = "range"
	steps := []uint64{9, 10, 1 << 53, 1<<53 + 1, math.MaxInt64, math.MaxInt64 + 1, math.MaxUint64 - 1, math.MaxUint64}
	for i, tok := range steps {
		if err := g.Write(ctx, key, tok, []byte(strconv.FormatUint(tok, 10))); err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
		mustLast(t, g, key, tok, strconv.FormatUint(tok, 10))
		if i > 0 {
			mustStale(t, g.Write(ctx, key, steps[i-1], []byte("stale")), key, steps[i-1], tok)
		}
	}
}
