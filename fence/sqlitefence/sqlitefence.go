package sqlitefence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver (pure Go, no cgo)

	"github.com/leasehold/leasehold/fence"
)

// Open opens the SQLite database file at path with the settings the SQLite guard wants
// on every pooled connection: transactions start with BEGIN IMMEDIATE (_txlock=immediate),
// busy_timeout 10 s, WAL journal and synchronous=FULL. It uses modernc.org/sqlite, driver
// name "sqlite".
func Open(path string) (*sql.DB, error) {
	esc := strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(path)
	dsn := "file:" + esc + "?_txlock=immediate" +
		"&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("fence: open sqlite %s: %w", path, err)
	}
	return db, nil
}

// SQLite is a Guard over a SQLite fence table (modernc.org/sqlite through database/sql), with
// the same contract as Postgres: Do runs the token check and your statements in one
// transaction.
//
// The table (Init creates it):
//
//	CREATE TABLE IF NOT EXISTS "leasehold_fence" (
//	    resource   TEXT NOT NULL PRIMARY KEY,
//	    token      TEXT NOT NULL COLLATE BINARY
//	               CHECK (length(token) = 20 AND token NOT GLOB '*[^0-9]*' AND token > '00000000000000000000'),
//	    value      BLOB,
//	    updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
//	)
//
// SQLite integers are signed 64-bit, so tokens are stored as 20-digit zero-padded decimal
// text, whose byte order (BINARY collation) is numeric order over the whole uint64 range. The
// check (fence.Monotonic shown; fence.Strict uses <):
//
//	INSERT INTO "leasehold_fence" (resource, token) VALUES (?1, ?2)
//	ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = ...
//	    WHERE "leasehold_fence".token <= excluded.token
//	RETURNING token
//
// Why it is atomic: SQLite has one writer per database. The upsert is the first statement of
// the transaction, so the transaction takes the write lock before it reads the row (with a
// DB from Open already at BEGIN IMMEDIATE; on a DEFERRED transaction the first write
// statement takes it, waiting out busy_timeout), and keeps it until COMMIT or ROLLBACK. No
// other connection can check or change any key in between. Configure busy_timeout on every
// connection (Open does): without it a concurrent writer fails with SQLITE_BUSY
// instead of waiting.
type Guard struct {
	db   *sql.DB
	mode fence.Mode

	sqlCreate, sqlCheck, sqlCheckValue, sqlToken, sqlLast string
}

var _ fence.Guard = (*Guard)(nil)

// New returns a guard over db (best opened with Open). WithMode and WithTable
// apply. Call Init to create the table.
func New(db *sql.DB, opts ...fence.Option) *Guard {
	o := fence.Apply(opts...)
	t := `"` + strings.ReplaceAll(o.Table, `"`, `""`) + `"`
	cmp := "<="
	if o.Mode == fence.Strict {
		cmp = "<"
	}
	const now = `strftime('%Y-%m-%dT%H:%M:%fZ', 'now')`
	return &Guard{
		db:   db,
		mode: o.Mode,
		sqlCreate: `CREATE TABLE IF NOT EXISTS ` + t + ` (
	resource   TEXT NOT NULL PRIMARY KEY,
	token      TEXT NOT NULL COLLATE BINARY
	           CHECK (length(token) = 20 AND token NOT GLOB '*[^0-9]*' AND token > '00000000000000000000'),
	value      BLOB,
	updated_at TEXT NOT NULL DEFAULT (` + now + `)
)`,
		sqlCheck: `INSERT INTO ` + t + ` (resource, token) VALUES (?1, ?2)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token, updated_at = ` + now + `
	WHERE ` + t + `.token ` + cmp + ` excluded.token
RETURNING token`,
		sqlCheckValue: `INSERT INTO ` + t + ` (resource, token, value) VALUES (?1, ?2, ?3)
ON CONFLICT (resource) DO UPDATE SET token = excluded.token, value = excluded.value, updated_at = ` + now + `
	WHERE ` + t + `.token ` + cmp + ` excluded.token
RETURNING token`,
		sqlToken: `SELECT token FROM ` + t + ` WHERE resource = ?1`,
		sqlLast:  `SELECT token, value FROM ` + t + ` WHERE resource = ?1`,
	}
}

// Init creates the fence table if it does not exist.
func (s *Guard) Init(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, s.sqlCreate); err != nil {
		return fmt.Errorf("fence: sqlite create table: %w", err)
	}
	return nil
}

// Write implements Guard.
func (s *Guard) Write(ctx context.Context, key string, token uint64, value []byte) error {
	if value == nil {
		value = []byte{}
	}
	return s.do(ctx, key, token, value, nil)
}

// Do runs fn inside one transaction that first checks and advances key's token and commits
// after fn returns nil; the same contract as Postgres.Do. fn must not commit or roll back tx.
// While fn runs the whole database is write-locked, so keep fn short.
func (s *Guard) Do(ctx context.Context, key string, token uint64, fn func(tx *sql.Tx) error) error {
	return s.do(ctx, key, token, nil, fn)
}

func (s *Guard) do(ctx context.Context, key string, token uint64, value []byte, fn func(*sql.Tx) error) (err error) {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fence: sqlite begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err := s.check(ctx, tx, key, token, value); err != nil {
		return err
	}
	if fn != nil {
		if err := fn(tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fence: sqlite commit: %w", err)
	}
	return nil
}

// FenceTx checks and advances key's token inside tx, a transaction the caller owns. For the
// guarantee the check must be tx's first statement (or tx must have begun IMMEDIATE); after an
// error the caller must roll back.
func (s *Guard) FenceTx(ctx context.Context, tx *sql.Tx, key string, token uint64) error {
	if err := fence.ValidateWrite(key, token); err != nil {
		return err
	}
	return s.check(ctx, tx, key, token, nil)
}

func (s *Guard) check(ctx context.Context, tx *sql.Tx, key string, token uint64, value []byte) error {
	q, args := s.sqlCheck, []any{key, fence.PadToken(token)}
	if value != nil {
		q, args = s.sqlCheckValue, append(args, value)
	}
	var got string
	err := tx.QueryRowContext(ctx, q, args...).Scan(&got)
	if err == nil {
		return nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("fence: sqlite check %q: %w", key, err)
	}
	if err := tx.QueryRowContext(ctx, s.sqlToken, key).Scan(&got); err != nil {
		return fmt.Errorf("fence: sqlite read last token of %q: %w", key, err)
	}
	last, err := fence.ParseStoredToken(got)
	if err != nil {
		return err
	}
	return &fence.StaleTokenError{Key: key, Token: token, LastToken: last}
}

// Last implements Guard.
func (s *Guard) Last(ctx context.Context, key string) (uint64, []byte, error) {
	if err := fence.ValidateKey(key); err != nil {
		return 0, nil, err
	}
	var tok string
	var val []byte
	err := s.db.QueryRowContext(ctx, s.sqlLast, key).Scan(&tok, &val)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil, nil
	}
	if err != nil {
		return 0, nil, fmt.Errorf("fence: sqlite last %q: %w", key, err)
	}
	t, err := fence.ParseStoredToken(tok)
	return t, val, err
}
